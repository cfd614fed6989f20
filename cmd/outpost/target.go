package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
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
