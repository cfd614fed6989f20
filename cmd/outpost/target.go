package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/outpost-exec/outpost/client"
	"github.com/outpost-exec/outpost/identity"
)

// Which executor a command reaches, and how: --target URL (a direct
// executor), or --relay URL with --executor ID and --token T. Each comes
// from its flag, else its environment variable ($OUTPOST_TARGET,
// $OUTPOST_RELAY, $OUTPOST_EXECUTOR, $OUTPOST_TOKEN), else the config file
// (<config dir>/config: "target = …", "relay = …", "executor = …",
// "token = …"). A relay named anywhere without an executor is a usage
// error, never a silent run on this machine; so are --target together with
// --relay or --executor, and an executor without a relay.
//
// Defaults are read after parsing, never as flag defaults: a flag's
// default is printed in its usage, and a token must not be.

// remoteFlags are the flags that name the executor.
type remoteFlags struct {
	target, relay, executor, token *string
	acceptNew                      *bool
	fs                             *flag.FlagSet
}

func addRemoteFlags(fs *flag.FlagSet) *remoteFlags {
	return &remoteFlags{
		fs:        fs,
		target:    fs.String("target", "", "executor URL (tcp://, unix://, ws://, stdio://); default $OUTPOST_TARGET or \"target =\" in the config file"),
		relay:     fs.String("relay", "", "relay URL outpost://HOST:PORT#<fingerprint>, with --executor; default $OUTPOST_RELAY or \"relay =\" in the config file"),
		executor:  fs.String("executor", "", "executor id at the relay; default $OUTPOST_EXECUTOR or \"executor =\" in the config file"),
		token:     fs.String("token", "", "client token for the relay; default $OUTPOST_TOKEN or \"token =\" in the config file (never printed)"),
		acceptNew: acceptNewFlag(fs),
	}
}

// acceptNewFlag is --accept-new: ssh's StrictHostKeyChecking=accept-new
// by default (an executor's key met for the first time is pinned, and the
// pin is reported on stderr), "yes" with --accept-new=false (an unpinned
// key is refused, exit 118).
func acceptNewFlag(fs *flag.FlagSet) *bool {
	return fs.Bool("accept-new", true, "pin an executor key met for the first time in the known_executors file, saying so on stderr; --accept-new=false refuses executors whose key is not pinned yet")
}

// acceptNewSetting is --accept-new when given, else "accept-new = yes|no"
// from the config file (for a user who wants ssh's strict checking
// always), else true.
func acceptNewSetting(fs *flag.FlagSet, flagVal bool) (bool, error) {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == "accept-new" })
	v := configValues()["accept-new"]
	if given || v == "" {
		return flagVal, nil
	}
	switch strings.ToLower(v) {
	case "yes", "true", "1":
		return true, nil
	case "no", "false", "0":
		return false, nil
	}
	return false, &usageError{fmt.Sprintf("\"accept-new =\" in the config file: want yes or no, got %q", v)}
}

// pinning applies --accept-new to cfg: refuse unpinned keys, or report
// each new pin on stderr, as ssh reports a host added to known_hosts.
func pinning(cfg *client.Config, acceptNew bool, stderr io.Writer) {
	cfg.NoTOFU = !acceptNew
	cfg.OnPin = func(addr string, key identity.PublicKey, file string) {
		fmt.Fprintf(stderr, "outpost: first contact with %s: pinned its key %s in %s (a different key later is refused)\n", addr, key.Fingerprint(), file)
	}
}

// remote is where a command goes: URL "" means this machine.
type remote struct {
	URL             string
	Executor, Token string // through a relay
	Relay           string // the relay URL, when there is one
	AcceptNew       bool   // --accept-new
}

// usageError is a resolution error that is a usage error (exit 2).
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// resolve picks the executor from flags, environment and config file.
func (r *remoteFlags) resolve() (remote, error) {
	set := map[string]bool{}
	r.fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	cfg := configValues()
	pick := func(flagVal *string, env, key string) (string, string) {
		switch {
		case *flagVal != "":
			return *flagVal, "--" + key
		case os.Getenv(env) != "":
			return os.Getenv(env), "$" + env
		case cfg[key] != "":
			return cfg[key], "\"" + key + " =\" in the config file"
		}
		return "", ""
	}
	acceptNew, err := acceptNewSetting(r.fs, *r.acceptNew)
	if err != nil {
		return remote{}, err
	}
	target, _ := pick(r.target, "OUTPOST_TARGET", "target")
	relay, relayFrom := pick(r.relay, "OUTPOST_RELAY", "relay")
	executor, executorFrom := pick(r.executor, "OUTPOST_EXECUTOR", "executor")
	token, _ := pick(r.token, "OUTPOST_TOKEN", "token")
	usage := func(format string, a ...any) (remote, error) {
		return remote{}, &usageError{fmt.Sprintf(format, a...)}
	}
	switch {
	case set["target"] && (set["relay"] || set["executor"]):
		return usage("give --target, or --relay with --executor, not both")
	case set["target"]:
		return remote{URL: target, AcceptNew: acceptNew}, nil
	case executor != "" && relay == "":
		return usage("--executor needs --relay (the executor comes from %s; give the relay with --relay, $OUTPOST_RELAY or \"relay =\" in the config file)", executorFrom)
	case executor != "":
		return remote{URL: relay, Relay: relay, Executor: executor, Token: token, AcceptNew: acceptNew}, nil
	case relay != "":
		return usage("--relay needs --executor (the relay comes from %s; name the executor with --executor ID, $OUTPOST_EXECUTOR or \"executor =\" in the config file — without one the command would not run where you meant)", relayFrom)
	}
	return remote{URL: target, AcceptNew: acceptNew}, nil
}

// configValues reads "key = value" lines from <config dir>/config. A
// line it cannot use (an unknown key, no "=") is warned about on the
// stderr of the run, once per run (see startConfigWarnings), and skipped.
func configValues() map[string]string {
	out := map[string]string{}
	dir := identity.DefaultConfigDir()
	if dir == "" {
		return out
	}
	path := filepath.Join(dir, "config")
	b, err := os.ReadFile(path)
	if err != nil {
		return out
	}
	known := configKeys()
	var warnings []string
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		// Warnings name the file, the line and at most the key: never a
		// value, nor a line without "=", which may be a pasted token.
		k, v, ok := strings.Cut(line, "=")
		k = strings.TrimSpace(k)
		switch {
		case !ok:
			warnings = append(warnings, fmt.Sprintf("%s:%d: not \"key = value\" (known keys: %s)", path, i+1, strings.Join(known, ", ")))
		case !slices.Contains(known, k):
			warnings = append(warnings, fmt.Sprintf("%s:%d: unknown key %s (known: %s)", path, i+1, showKey(k), strings.Join(known, ", ")))
		default:
			out[k] = strings.TrimSpace(v)
		}
	}
	configWarnings.warn(warnings)
	return out
}

// configKeys are the config file's keys: the names of the flags that say
// where a command goes, which resolve() reads under the same names.
func configKeys() []string {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	addRemoteFlags(fs)
	var keys []string
	fs.VisitAll(func(f *flag.Flag) { keys = append(keys, f.Name) })
	return keys // VisitAll goes in lexical order
}

// showKey quotes an unknown key for a warning, unless it could be a
// secret: a token is longer than any key, and has no place left of "=".
func showKey(k string) string {
	if len(k) > 24 || strings.HasPrefix(k, "opt_") || strings.ContainsFunc(k, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.')
	}) {
		return "(not shown: it may be a value)"
	}
	return strconv.Quote(k)
}

// configWarnings prints the config file's warnings on the stderr of the
// run() that read it, once: a command reads the file several times.
var configWarnings = &configWarner{w: os.Stderr}

type configWarner struct {
	mu     sync.Mutex
	w      io.Writer
	warned bool
}

// startConfigWarnings begins a run whose config file warnings go to w.
func startConfigWarnings(w io.Writer) {
	configWarnings.mu.Lock()
	defer configWarnings.mu.Unlock()
	configWarnings.w, configWarnings.warned = w, false
}

func (c *configWarner) warn(lines []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.warned || len(lines) == 0 {
		return
	}
	c.warned = true
	for _, l := range lines {
		fmt.Fprintln(c.w, "outpost:", l)
	}
}

// configTarget is "target = URL" from the config file.
func configTarget() string { return configValues()["target"] }

// orDefault is v, else $env, else "key =" from the config file: a flag's
// default read after parsing, so usage output never shows it.
func orDefault(v, env, key string) string {
	if v != "" {
		return v
	}
	if e := os.Getenv(env); e != "" {
		return e
	}
	return configValues()[key]
}

// parseArgs parses a command's flags. -h or --help prints the command's
// usage on stdout and ends it with 0, as help should; a bad flag prints it
// on stderr and ends it with 2.
//
// In describe mode (describeHook set) it hands fs, every flag registered,
// to the hook and ends the command before it does anything: every command
// calls parseArgs before its first side effect.
func parseArgs(fs *flag.FlagSet, args []string, stdout io.Writer) (code int, ok bool) {
	if hook := describeHook.Load(); hook != nil {
		(*hook)(fs)
		return 0, false
	}
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "-h" || a == "-help" || a == "--help" {
			fs.SetOutput(stdout)
		}
	}
	err := fs.Parse(args)
	switch {
	case err == nil:
		return 0, true
	case errors.Is(err, flag.ErrHelp):
		return 0, false
	}
	return exitUsage, false
}

// buildVersion is the version, with the commit and its time when the
// binary records them (go build from a checkout does; make build stamps
// the commit where VCS stamping is off).
func buildVersion() string {
	v := version
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	rev, at, dirty := commit, "", ""
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = ", modified"
			}
		}
	}
	if v == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v = bi.Main.Version
	}
	if rev == "" {
		return v + " (" + bi.GoVersion + ")"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	return fmt.Sprintf("%s (commit %s, %s%s, %s)", v, rev, at, dirty, bi.GoVersion)
}

// shortVersion is the version an executor reports (executorVersion, the
// relay's executor list): the release, or for a development build
// "0.0.0-dev+" and its commit, so two builds can be told apart.
func shortVersion() string {
	if version != "dev" {
		return version
	}
	rev := commit
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			return strings.TrimPrefix(bi.Main.Version, "v")
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				rev = s.Value
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev == "" {
		return "0.0.0-dev"
	}
	return "0.0.0-dev+" + rev
}
