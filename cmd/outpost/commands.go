package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/outpost-exec/outpost/sandbox"
)

// The command table is the one list of outpost's commands: run() dispatches
// through it, and the usage text, shell completion and man page are made
// from it. Each command's flags are learnt from the command itself (see
// describe), so nothing else lists them.
//
// Why not cobra: it brings pflag, whose flags are --name only and whose
// -h/--help and error handling differ from the standard flag package's.
// outpost documents and tests Go's syntax (-name and --name alike, -flag=value,
// flags stop at "--") and its exits (help on stdout with 0, a bad flag
// with usage on stderr and 2); switching would change what users type and
// what scripts rely on, for features a table and a few generators give.

// command is one runnable outpost command.
type command struct {
	path     string // the words that name it: "executor join"
	operands string // what follows the name in a synopsis: "[flags] -- CMD [ARGS...]"
	summary  string // one line, for usage, completion and the man page
	run      func(args []string, stdout, stderr io.Writer) int
	// complete lists the values its operands take, for completion
	// (nil: files).
	complete func() []string
}

// commandTable is a function, not a variable: help and completion refer
// back to run(), which reads the table.
func commandTable() []command {
	token := func(sub string) func([]string, io.Writer, io.Writer) int {
		return func(args []string, stdout, stderr io.Writer) int {
			return cmdToken(append([]string{sub}, args...), stdout, stderr)
		}
	}
	return []command{
		{path: "demo", operands: "[-- CMD ARGS...]", summary: "run a command through an in-process relay and executor on loopback", run: cmdDemo},
		{path: "exec", operands: "[flags] -- CMD [ARGS...]", summary: "run a command on an executor (or this machine) and exit with its status", run: cmdExec},
		{path: "cp", operands: "[flags] SRC DST", summary: "copy files to or from an executor (EXECUTOR:PATH or :PATH), checked end to end", run: cmdCp},
		{path: "bridge", operands: "[flags]", summary: "serve codex's exec-server protocol (ws://) for one executor, reached over Noise directly or through a relay", run: cmdBridge},
		{path: "mcp", operands: "[flags]", summary: "serve the Model Context Protocol (stdio or --listen http://127.0.0.1:PORT/mcp): run, start/read, files, for MCP agents", run: cmdMcp},
		{path: "executor serve", operands: "[flags]", summary: "serve processes (--listen tcp://HOST:PORT | unix:///path | ws://IP:PORT | stdio)", run: cmdExecutorServe},
		{path: "executor doctor", operands: "[flags]", summary: "print what this machine's sandbox can enforce", run: cmdDoctor},
		{path: "executor join", operands: "[flags]", summary: "join a relay (--relay URL --token T --id NAME) and serve its clients", run: cmdExecutorJoin},
		{path: "relay serve", operands: "[flags]", summary: "run a relay (--listen tcp://HOST:PORT --state-dir DIR --advertise HOST:PORT)", run: cmdRelayServe},
		{path: "relay init", operands: "[flags]", summary: "before a relay's first start: create its key and print its URL (--advertise HOST:PORT)", run: cmdRelayInit},
		{path: "relay migrate", operands: "[flags]", summary: "copy the relay's token store (relay.db) into etcd for a relay cluster (--to etcd://HOST:PORT/PREFIX)", run: cmdRelayMigrate},
		{path: "token create", operands: "[flags]", summary: "create a join token (--join) or a client token (--client); the secret is printed once", run: token("create")},
		{path: "token ls", operands: "[flags]", summary: "list the relay's tokens with their state, uses and scope", run: token("ls")},
		{path: "token revoke", operands: "[flags] ID", summary: "revoke a token", run: token("revoke")},
		{path: "executors ls", operands: "[flags]", summary: "list the executors a client token may reach", run: cmdExecutorsLs},
		{path: "executors revoke", operands: "[flags] ID", summary: "on the relay: unbind an id and revoke its (stolen) key for good", run: cmdExecutorsRevoke},
		{path: "completion", operands: "bash|zsh|fish|powershell", summary: "print a shell completion script", run: cmdCompletion, complete: func() []string { return slices.Clone(completionShells) }},
		{path: "man", operands: "", summary: "print the man page outpost(1) as roff", run: cmdMan},
		{path: "version", operands: "", summary: "print the version, with the commit and its date", run: cmdVersion},
		{path: "help", operands: "[COMMAND]", summary: "print this help, or a command's", run: cmdHelp, complete: topLevelNames},
	}
}

// topLevelNames are the first words of the commands, in table order.
func topLevelNames() []string {
	var names []string
	for _, c := range commandTable() {
		first, _, _ := strings.Cut(c.path, " ")
		if !slices.Contains(names, first) {
			names = append(names, first)
		}
	}
	return names
}

// children are the words that may follow the group path ("" is the top
// level), in table order; nil when path is no group.
func children(path string) []string {
	var out []string
	for _, c := range commandTable() {
		rest, ok := strings.CutPrefix(c.path, path+" ")
		if path == "" {
			rest, ok = c.path, true
		}
		if !ok {
			continue
		}
		w, _, _ := strings.Cut(rest, " ")
		if !slices.Contains(out, w) {
			out = append(out, w)
		}
	}
	return out
}

// lookup finds the command args name, or the group they stop in: n is
// how many words of args name it. c is nil for a group (or nothing).
func lookup(args []string) (c *command, group string, n int) {
	table := commandTable()
	for n < len(args) {
		next := strings.TrimPrefix(group+" "+args[n], " ")
		if i := slices.IndexFunc(table, func(c command) bool { return c.path == next }); i >= 0 {
			return &table[i], "", n + 1
		}
		if children(next) == nil {
			break
		}
		group, n = next, n+1
	}
	return nil, group, n
}

// usageText is the top-level help (group "") or a group's.
func usageText(group string) string {
	var b strings.Builder
	if group == "" {
		b.WriteString("outpost runs commands on remote machines through an end-to-end encrypted relay.\n\n")
	}
	b.WriteString("Usage:\n")
	var rows [][2]string
	width := 0
	for _, c := range commandTable() {
		if group != "" && !strings.HasPrefix(c.path, group+" ") {
			continue
		}
		syn := strings.TrimSpace("outpost " + c.path + " " + c.operands)
		width = max(width, len(syn))
		rows = append(rows, [2]string{syn, c.summary})
	}
	for _, r := range rows {
		fmt.Fprintf(&b, "  %-*s  %s\n", width, r[0], r[1])
	}
	b.WriteString("\nRun \"outpost help <command>\" or \"outpost <command> -h\" for a command's flags.\n")
	return b.String()
}

// describeHook, when set, is handed each command's FlagSet by parseArgs
// once every flag is registered; parseArgs then ends the command with
// (0, false) before it does anything. That is how describe learns a
// command's flags without running it.
var describeHook atomic.Pointer[func(*flag.FlagSet)]

// describeMu makes describe one at a time: the hook is package state.
var describeMu sync.Mutex

// describe returns the command's flags, registered exactly as a real run
// registers them; nil if the command never reached parseArgs.
func describe(c command) *flag.FlagSet {
	describeMu.Lock()
	defer describeMu.Unlock()
	var got *flag.FlagSet
	hook := func(fs *flag.FlagSet) {
		if got == nil {
			got = fs
		}
	}
	describeHook.Store(&hook)
	defer describeHook.Store(nil)
	// --help as well: a command that parsed its flags without parseArgs
	// would stop at them, printing its help to nowhere, rather than run.
	c.run([]string{"--help"}, io.Discard, io.Discard)
	return got
}

// flagInfo is one flag as completion and the man page show it.
type flagInfo struct {
	name      string
	valueName string // "" for a bool flag
	usage     string
	def       string // the default, "" when zero or not to be shown
	choices   []string
}

// dashed is the flag as a user types it: -r, --name.
func (f flagInfo) dashed() string {
	if len(f.name) == 1 {
		return "-" + f.name
	}
	return "--" + f.name
}

// commandInfo is a command with its flags.
type commandInfo struct {
	command
	flags []flagInfo
}

// describeAll describes every command in the table.
func describeAll() ([]commandInfo, error) {
	var out []commandInfo
	for _, c := range commandTable() {
		fs := describe(c)
		if fs == nil {
			return nil, fmt.Errorf("outpost %s does not parse its flags with parseArgs", c.path)
		}
		ci := commandInfo{command: c}
		fs.VisitAll(func(f *flag.Flag) {
			valueName, usage := flag.UnquoteUsage(f)
			fi := flagInfo{name: f.Name, valueName: valueName, usage: usage, choices: choicesOf(fs, f.Name)}
			if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
				fi.valueName = ""
			}
			// The same test flag.PrintDefaults makes: zero values are not
			// defaults worth showing. A token's never is.
			if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" && f.DefValue != "0s" && f.DefValue != "[]" && f.DefValue != "map[]" && !strings.Contains(f.Name, "token") {
				fi.def = f.DefValue
			}
			ci.flags = append(ci.flags, fi)
		})
		out = append(out, ci)
	}
	return out, nil
}

// sandboxModes are the values of every --sandbox flag.
var sandboxModes = []string{string(sandbox.ModeReadOnly), string(sandbox.ModeWorkspaceWrite), string(sandbox.ModeFullAccess)}

// choices holds the values flags accept, by FlagSet name and flag name.
var choices = struct {
	sync.Mutex
	m map[string][]string
}{m: map[string][]string{}}

// flagChoices records, next to a flag's definition, the values it accepts,
// so that shell completion offers them. It does not check them: the
// command does, as before.
func flagChoices(fs *flag.FlagSet, name string, values ...string) {
	choices.Lock()
	defer choices.Unlock()
	choices.m[fs.Name()+"\x00"+name] = slices.Clone(values)
}

func choicesOf(fs *flag.FlagSet, name string) []string {
	choices.Lock()
	defer choices.Unlock()
	return slices.Clone(choices.m[fs.Name()+"\x00"+name])
}

// cmdVersion prints the version (outpost version, -v, --version).
func cmdVersion(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("outpost version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if code, ok := parseArgs(fs, args, stdout); !ok {
		return code
	}
	fmt.Fprintln(stdout, "outpost", buildVersion())
	return 0
}

// cmdHelp prints the usage, or (outpost help exec) a command's help, as
// "outpost exec --help" does.
func cmdHelp(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("outpost help", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if code, ok := parseArgs(fs, args, stdout); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return run(append(slices.Clone(fs.Args()), "--help"), stdout, stderr)
	}
	fmt.Fprint(stdout, usageText(""))
	return 0
}
