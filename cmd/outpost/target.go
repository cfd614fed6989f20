package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"

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
	fs                             *flag.FlagSet
}

func addRemoteFlags(fs *flag.FlagSet) *remoteFlags {
	return &remoteFlags{
		fs:       fs,
		target:   fs.String("target", "", "executor URL (tcp://, unix://, ws://, stdio://); default $OUTPOST_TARGET or \"target =\" in the config file"),
		relay:    fs.String("relay", "", "relay URL outpost://HOST:PORT#<fingerprint>, with --executor; default $OUTPOST_RELAY or \"relay =\" in the config file"),
		executor: fs.String("executor", "", "executor id at the relay; default $OUTPOST_EXECUTOR or \"executor =\" in the config file"),
		token:    fs.String("token", "", "client token for the relay; default $OUTPOST_TOKEN or \"token =\" in the config file (never printed)"),
	}
}

// remote is where a command goes: URL "" means this machine.
type remote struct {
	URL             string
	Executor, Token string // through a relay
	Relay           string // the relay URL, when there is one
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
		return remote{URL: target}, nil
	case executor != "" && relay == "":
		return usage("--executor needs --relay (the executor comes from %s; give the relay with --relay, $OUTPOST_RELAY or \"relay =\" in the config file)", executorFrom)
	case executor != "":
		return remote{URL: relay, Relay: relay, Executor: executor, Token: token}, nil
	case relay != "":
		return usage("--relay needs --executor (the relay comes from %s; name the executor with --executor ID, $OUTPOST_EXECUTOR or \"executor =\" in the config file — without one the command would not run where you meant)", relayFrom)
	}
	return remote{URL: target}, nil
}

// configValues reads "key = value" lines from <config dir>/config.
func configValues() map[string]string {
	out := map[string]string{}
	dir := identity.DefaultConfigDir()
	if dir == "" {
		return out
	}
	b, err := os.ReadFile(filepath.Join(dir, "config"))
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if k, v, ok := strings.Cut(line, "="); ok {
			out[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return out
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
func parseArgs(fs *flag.FlagSet, args []string, stdout io.Writer) (code int, ok bool) {
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
// binary records them (go build from a checkout does).
func buildVersion() string {
	v := version
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	var rev, at, dirty string
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
