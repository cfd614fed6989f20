package conformance

// End to end with the real codex CLI: `codex exec` of each release in
// peers.CodexVersions talks to a scripted model (internal/fakemodel) and
// runs the model's tools on an exec-server named by CODEX_EXEC_SERVER_URL —
// outpost's executor (`executor serve --listen ws://`, or `outpost bridge`
// → relay → `executor join`), or, as the reference, that release's own
// `codex exec-server`. Between codex and the server sits a wire tap
// (codexcli_capture_test.go); the executor side is set up to differ from
// the test's own (codexcli_host_test.go); the cases that compare a server
// with the reference are in codexcli_scenarios_test.go.
//
// Knobs: OUTPOST_CODEX_CAPTURE=DIR writes every run's wire messages to
// DIR; OUTPOST_CODEXCLI_OUTPOST_BIN judges a prebuilt outpost instead of
// this checkout; OUTPOST_CODEXCLI_FAULTS=m1,m2 makes the taps refuse those
// methods (to see the cases that should fail, fail).
//
// Where a command ran is checked from outside: while a command is still
// running (it waits for the test), the test finds its processes by a marker
// in their command line and walks /proc PPid links up to the exec-server's
// pid. A sandboxed command lives in a PID namespace of its own, where its
// own view of its parents ends at the namespace's init, but /proc of the
// test (the initial namespace) shows the whole chain.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/internal/fakemodel"
	"github.com/outpost-exec/outpost/internal/peers"
	"github.com/outpost-exec/outpost/internal/procgroup"
	"github.com/outpost-exec/outpost/internal/testdeps"
)

// codexRunTimeout bounds one `codex exec`.
const codexRunTimeout = 60 * time.Second

// codexResult is what one `codex exec` run did.
type codexResult struct {
	ExitCode       int
	Stdout, Stderr string
	// Requests is every request codex sent to the model, in order.
	Requests []fakemodel.Request
	// Outputs is every tool output codex handed back to the model (from
	// its last request), in call order.
	Outputs []fakemodel.ToolOutput
	// Wire is what codex and the exec-server said to each other.
	Wire *wireTap
	// CLIPid is the pid `codex exec` ran as.
	CLIPid int
}

// runCodexExec runs srv's `codex exec` in workspace with extra args (e.g.
// "-s", "read-only"), the scripted model answering with script, and its
// commands sent to srv through a wire tap. It fails the test when codex
// fails, times out, or the model saw something the script did not expect,
// and reports (without stopping) each line of codex's stderr that tells of
// trouble with the execution environment (envTrouble).
func runCodexExec(t *testing.T, srv execServer, workspace string, args []string, script []fakemodel.Step) codexResult {
	t.Helper()
	model := fakemodel.Start(script)
	defer model.Close()
	var tap *wireTap
	var tapDir string
	home := t.TempDir()
	var env []string
	var err error
	if srv.stdio != nil {
		// codex starts the exec-server itself, from environments.toml.
		tapDir = t.TempDir()
		if env, err = fakemodel.CodexEnv(home, model.BaseURL(), ""); err == nil {
			argv := srv.stdio
			if srv.pidFile != "" {
				// The server writes its pid, then becomes the program.
				argv = append([]string{"/bin/sh", "-c", `echo $$ > "$0"; exec "$@"`, srv.pidFile}, argv...)
			}
			err = stdioEnvironment(home, tapDir, argv, srv.stdioEnv)
		}
	} else {
		tap = startTap(t, srv.url)
		env, err = fakemodel.CodexEnv(home, model.BaseURL(), tap.URL)
	}
	if err != nil {
		t.Fatal(err)
	}
	argv := fakemodel.CodexExecArgs(workspace, args...)

	timeout := codexRunTimeout
	if d, ok := t.Deadline(); ok && time.Until(d)-10*time.Second < timeout {
		timeout = max(time.Until(d)-10*time.Second, time.Second)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, srv.cli, argv...)
	cmd.Dir = workspace
	cmd.Env = env
	procgroup.KillOnCancel(cmd)
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	if cmd.ProcessState == nil {
		t.Fatalf("codex exec: %v", runErr)
	}
	if srv.stdio != nil {
		tap = loadStdioTap(t, tapDir)
	}

	reqs, errs := model.Requests(), model.Errors()
	res := codexResult{ExitCode: cmd.ProcessState.ExitCode(), Stdout: stdout.String(), Stderr: stderr.String(), Requests: reqs, Outputs: model.ToolOutputs(), Wire: tap, CLIPid: cmd.Process.Pid}
	report := func() string {
		var b strings.Builder
		fmt.Fprintf(&b, "codex %s %s\nexit %d\nstdout:\n%s\nstderr:\n%s\nmodel saw %d requests; tool outputs:\n", srv.version, strings.Join(argv, " "), res.ExitCode, res.Stdout, res.Stderr, len(reqs))
		for i := range res.Outputs {
			fmt.Fprintf(&b, "  %d: %s\n", i, &res.Outputs[i])
		}
		fmt.Fprintf(&b, "exec-server methods: %v\n", tap.Methods())
		return b.String()
	}
	switch {
	case ctx.Err() != nil:
		t.Fatalf("codex exec did not finish within %v\n%s", timeout, report())
	case runErr != nil:
		t.Fatalf("codex exec: %v\n%s", runErr, report())
	case len(errs) > 0:
		t.Fatalf("scripted model: %v\n%s", errors.Join(errs...), report())
	}
	if lines := envTrouble(res.Stderr); len(lines) > 0 {
		t.Errorf("codex complained about the %s exec-server:\n  %s", srv.name, strings.Join(lines, "\n  "))
	}
	t.Logf("%s", report())
	return res
}

// markedProc is a running process whose command line carries a marker.
type markedProc struct {
	chain []string // "pid:comm" of it and its ancestors
	pidNS string   // its PID namespace
}

func (p markedProc) String() string { return strings.Join(p.chain, " < ") + " (" + p.pidNS + ")" }

// underServer finds the running processes whose command line contains
// marker and reports an error unless there are some and every one descends
// from the process pid (the exec-server). They come deepest first: the
// command itself, then wrappers that carry its command line (a sandbox
// helper, bwrap).
func underServer(pid int, marker string) ([]markedProc, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var found []markedProc
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil || p == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(b), marker) {
			continue
		}
		mp := markedProc{chain: ancestry(p)}
		mp.pidNS, _ = os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", p))
		if !containsPid(mp.chain, pid) {
			return nil, fmt.Errorf("process %d (%q) does not descend from the exec-server %d: %s", p, strings.ReplaceAll(string(b), "\x00", " "), pid, mp)
		}
		found = append(found, mp)
	}
	if len(found) == 0 {
		return nil, fmt.Errorf("no running process carries the marker %q", marker)
	}
	sort.Slice(found, func(i, j int) bool { return len(found[i].chain) > len(found[j].chain) })
	return found, nil
}

// ancestry is "pid:comm" for p and each of its ancestors, as the initial
// PID namespace sees them.
func ancestry(p int) []string {
	var chain []string
	for p > 0 && len(chain) < 64 {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p))
		chain = append(chain, fmt.Sprintf("%d:%s", p, strings.TrimSpace(string(comm))))
		p = ppid(p)
	}
	return chain
}

func ppid(p int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "PPid:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

func containsPid(chain []string, pid int) bool {
	for _, c := range chain {
		if strings.HasPrefix(c, strconv.Itoa(pid)+":") {
			return true
		}
	}
	return false
}

func randomTag() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// execServer is an exec-server for one codex release to use: its URL (for
// CODEX_EXEC_SERVER_URL), the pid of the process that starts the commands
// (the one they must descend from), and the codex CLI that talks to it.
//
// Another way to reach an executor is one more execServer: through
// `outpost bridge` → relay → `executor join`, the url is the bridge's and
// the pid the joined executor's.
type execServer struct {
	name    string // "codex" (the reference), "outpost", "outpost-bridge-relay"
	url     string
	pid     int
	version string // of the codex CLI
	cli     string // the codex CLI binary
	// host is the executor side's setup: its login shell, CODEX_HOME
	// and the MCP server that names.
	host *executorHost
	// another starts one more server of this kind (the same binary, its
	// executor side host) for a case that needs a differently set up
	// executor; nil where a case cannot have one.
	another func(ctx context.Context, host *executorHost) (*peers.Server, error)
	// stdio, when set, is the program codex starts as its exec-server
	// (an environments.toml entry, with stdioEnv) instead of url.
	stdio    []string
	stdioEnv []string
	// pidFile, for a server codex starts itself (a new one each run),
	// is where its pid is written as it starts; pid is then 0.
	pidFile string
}

// serverPid is the pid of the process the commands must descend from:
// the server's, or for one codex starts, the one of the current run.
func (srv execServer) serverPid(t *testing.T) int {
	if srv.pidFile == "" {
		return srv.pid
	}
	b, err := os.ReadFile(srv.pidFile)
	if err != nil {
		t.Fatalf("the %s exec-server wrote no pid: %v", srv.name, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("the %s exec-server's pid file holds %q", srv.name, b)
	}
	return pid
}

// outpostBinEnv names a prebuilt outpost binary for TestCodexCLI to judge
// instead of building this checkout: an older release, or a deliberately
// broken build, to see which cases catch what.
const outpostBinEnv = "OUTPOST_CODEXCLI_OUTPOST_BIN"

// TestCodexCLI runs every case with each codex release of
// peers.CodexVersions: its `codex exec` against its own `codex
// exec-server` (the reference), against outpost's executor served on
// ws://, and against one reached through `outpost bridge` and a relay.
// Every part is a separate process built from this checkout (or the
// outpost binary outpostBinEnv names).
//
// A release's three servers are started once and shared by its cases.
// The reference runs first, recording what the comparing cases observe;
// then the two outpost servers run at once, each compared with it.
// Releases run in parallel (as -parallel allows).
func TestCodexCLI(t *testing.T) {
	if _, err := peers.CodexBinary(); err != nil {
		testdeps.Missing(t, "codex", "skipping the codex CLI test: %v", err)
	}
	bin := os.Getenv(outpostBinEnv)
	if bin == "" {
		bin = outpostBinary(t)
	}
	shell := newHostShell(t)
	for _, version := range peers.CodexVersions {
		t.Run(version, func(t *testing.T) {
			t.Parallel()
			cli, err := peers.CodexBinaryAt(version)
			if err != nil {
				testdeps.Missing(t, "codex", "skipping codex %s: %v", version, err)
			}
			codexCLIMatrix(t, bin, version, cli, shell)
		})
	}
}

func codexCLIMatrix(t *testing.T, bin, version, cli string, shell hostShell) {
	// Each server its own executor side (CODEX_HOME, MCP server), so
	// what a case sees of it is that server's doing.
	hostCodex, hostOurs, hostChain := newExecutorHost(t, shell), newExecutorHost(t, shell), newExecutorHost(t, shell)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	startCodex := func(ctx context.Context, h *executorHost) (*peers.Server, error) {
		return peers.Start(ctx, h.env, h.argv(cli, "exec-server", "--listen", "ws://127.0.0.1:0")...)
	}
	startOurs := func(ctx context.Context, h *executorHost) (*peers.Server, error) {
		return peers.Start(ctx, h.env, h.argv(bin, "executor", "serve", "--listen", "ws://127.0.0.1:0", "--log-level", "warn")...)
	}
	theirs, err := startCodex(ctx, hostCodex)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(theirs.Stop)
	ours, err := startOurs(ctx, hostOurs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ours.Stop)
	chain, err := startHostBridgeChain(ctx, bin, t.TempDir(), "codex-e2e", hostChain)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(chain.Stop)

	ref := execServer{name: "codex", url: theirs.URL, pid: theirs.Pid(), version: version, cli: cli, host: hostCodex, another: startCodex}
	refs := map[string]observations{}
	t.Run(ref.name, func(t *testing.T) {
		for _, c := range codexCLICases {
			t.Run(c.name, func(t *testing.T) {
				obs := c.run(t, ref)
				obs.log(t)
				if !t.Failed() {
					refs[c.name] = obs
				}
			})
		}
	})
	// codex starting `outpost bridge --listen stdio` itself, as a program
	// of its environments.toml, to the same joined executor.
	stdioBridge := []string{bin, "bridge", "--listen", "stdio", "--relay", chain.Relay.URL, "--executor", chain.ExecutorID,
		"--token", chain.ClientToken, "--log-level", "warn"}
	// codex starting `outpost executor serve --listen stdio` itself, on the
	// executor side's host like the ws row (a new one each run).
	hostStdio := newExecutorHost(t, shell)
	stdioServe := hostStdio.argv(bin, "executor", "serve", "--listen", "stdio", "--log-level", "warn")
	rows := []execServer{
		{name: "outpost", url: ours.URL, pid: ours.Pid(), version: version, cli: cli, host: hostOurs, another: startOurs},
		{name: "outpost-stdio", version: version, cli: cli, host: hostStdio, stdio: stdioServe, stdioEnv: hostStdio.env, pidFile: filepath.Join(t.TempDir(), "pid")},
		{name: "outpost-bridge-relay", url: chain.URL, pid: chain.Executor.Pid(), version: version, cli: cli, host: hostChain},
		{name: "outpost-bridge-stdio-relay", pid: chain.Executor.Pid(), version: version, cli: cli, host: hostChain, stdio: stdioBridge, stdioEnv: chain.Env},
	}
	// The same chain's executor through outpost.exe's bridge under Wine.
	rows = append(rows, wineBridgeRows(t, version, cli, chain, hostChain)...)
	for _, srv := range rows {
		t.Run(srv.name, func(t *testing.T) {
			t.Parallel()
			for _, c := range codexCLICases {
				t.Run(c.name, func(t *testing.T) {
					obs := c.run(t, srv)
					if obs == nil {
						return
					}
					obs.log(t)
					want, ok := refs[c.name]
					if !ok {
						t.Fatalf("nothing to compare with: the case failed against codex's own exec-server")
					}
					obs.compare(t, want)
				})
			}
		})
	}
}

// observations are what a comparing case saw, by name: against outpost
// each must equal what the same case saw against codex's own exec-server.
// A case that only checks absolute properties returns nil.
type observations map[string]string

func (obs observations) log(t *testing.T) {
	t.Helper()
	for _, k := range obs.keys() {
		t.Logf("observed %s: %s", k, obs[k])
	}
}

func (obs observations) keys() []string {
	keys := make([]string, 0, len(obs))
	for k := range obs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func (got observations) compare(t *testing.T, want observations) {
	t.Helper()
	for _, k := range want.keys() {
		if got[k] != want[k] {
			t.Errorf("%s differs from codex's own exec-server:\n  outpost: %s\n  codex:   %s", k, got[k], want[k])
		}
	}
}

var codexCLICases = []struct {
	name string
	run  func(t *testing.T, srv execServer) observations
}{
	{"unsandboxed", absolute(codexUnsandboxed)},
	{"read-only", absolute(codexReadOnly)},
	{"workspace-write", absolute(codexWorkspaceWrite)},
	{"poll", absolute(codexPoll)},
	{"tty-stdin", absolute(codexTTYStdin)},
	{"sandboxed-process-tree", absolute(codexSandboxedTree)},
	{"quiet-stderr", codexQuietStderr},
	{"executor-shell", codexExecutorShell},
	{"executor-login-shell", codexExecutorLoginShell},
	{"skills", codexSkills},
	{"apply-patch", codexApplyPatch},
	{"mcp-environment-config", codexMCPEnvironmentConfig},
}

// absolute adapts a case that compares nothing.
func absolute(f func(t *testing.T, srv execServer)) func(t *testing.T, srv execServer) observations {
	return func(t *testing.T, srv execServer) observations { f(t, srv); return nil }
}

// parentChain prints "chain PID COMM" for the shell and each ancestor it
// can see (all of them unsandboxed; up to its PID namespace's init when
// sandboxed).
const parentChain = `p=$$; while [ "${p:-0}" -gt 0 ]; do echo "chain $p $(cat /proc/$p/comm)"; n=; while read -r k v; do [ "$k" = PPid: ] && n=$v; done < /proc/$p/status; p=$n; done`

func codexUnsandboxed(t *testing.T, srv execServer) {
	ws := t.TempDir()
	res := runCodexExec(t, srv, ws, []string{"--dangerously-bypass-approvals-and-sandbox"}, []fakemodel.Step{
		{Exec: &fakemodel.ExecCall{Cmd: "echo hello-from-outpost; cat /proc/self/status | grep PPid; " + parentChain}},
	})
	out := onlyOutput(t, res, 1)[0]
	if !out.Exited || out.ExitCode != 0 {
		t.Fatalf("model was not told of a clean exit: %s", &out)
	}
	if !strings.Contains(out.Output, "hello-from-outpost\n") || !strings.Contains(out.Output, "PPid:") {
		t.Fatalf("the command's output did not reach the model: %s", &out)
	}
	// Unsandboxed, the shell sees its real parents: the exec-server must
	// be one of them.
	if !strings.Contains(out.Output, fmt.Sprintf("chain %d ", srv.serverPid(t))) {
		t.Fatalf("the command did not run under the %s exec-server (pid %d): %s", srv.name, srv.serverPid(t), out.Output)
	}
}

func codexReadOnly(t *testing.T, srv execServer) {
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "existing.txt"), []byte("existing-content\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := runCodexExec(t, srv, ws, []string{"-s", "read-only"}, []fakemodel.Step{
		{Exec: &fakemodel.ExecCall{Cmd: "cat existing.txt"}},
		{Exec: &fakemodel.ExecCall{Cmd: "echo x > inside.txt"}},
	})
	outs := onlyOutput(t, res, 2)
	if read := outs[0]; !read.Exited || read.ExitCode != 0 || !strings.Contains(read.Output, "existing-content") {
		t.Errorf("a read in the read-only sandbox failed: %s", &read)
	}
	write := outs[1]
	if !refused(write) {
		t.Errorf("the model should see the write run and fail, denied: %s", &write)
	}
	if _, err := os.Stat(filepath.Join(ws, "inside.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the read-only sandbox let a write through: inside.txt: %v", err)
	}
}

func codexWorkspaceWrite(t *testing.T, srv execServer) {
	ws := t.TempDir()
	git := exec.Command("git", "init", "-q", ws)
	if out, err := git.CombinedOutput(); err != nil {
		t.Logf("git init: %v: %s; making .git by hand", err, out)
		if err := os.Mkdir(filepath.Join(ws, ".git"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Outside the workspace and outside /tmp (which workspace-write
	// leaves writable, and which holds the workspace), in a directory that
	// exists, so only the sandbox can make the write fail.
	dir, err := os.MkdirTemp("/var/tmp", "outpost-codexcli-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	outside := filepath.Join(dir, "outside.txt")

	res := runCodexExec(t, srv, ws, []string{"-s", "workspace-write"}, []fakemodel.Step{
		{Exec: &fakemodel.ExecCall{Cmd: "echo in > inside.txt && cat inside.txt"}},
		{Exec: &fakemodel.ExecCall{Cmd: "echo out > " + outside}},
		{Exec: &fakemodel.ExecCall{Cmd: "echo hook > .git/outpost-probe"}},
	})
	outs := onlyOutput(t, res, 3)
	if in := outs[0]; !in.Exited || in.ExitCode != 0 || !strings.Contains(in.Output, "in\n") {
		t.Errorf("a write inside the workspace failed: %s", &in)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "inside.txt")); err != nil || string(b) != "in\n" {
		t.Errorf("inside.txt = %q, %v; want \"in\\n\"", b, err)
	}
	for i, path := range []string{outside, filepath.Join(ws, ".git", "outpost-probe")} {
		o := outs[i+1]
		if !refused(o) {
			t.Errorf("the model should see the write to %s run and fail, denied: %s", path, &o)
		}
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("workspace-write let a write to %s through: %v", path, err)
		}
	}
}

// codexPoll: a command still running when its yield ends is polled with
// write_stdin and empty chars until it exits. It waits for a file the test
// creates only after checking where the command runs. The first yield is
// long enough for its first line to arrive on a loaded machine (a yield
// returns what has arrived when it ends; 250 ms was too short at load 5).
func codexPoll(t *testing.T, srv execServer) {
	ws := t.TempDir()
	marker := "poll-" + randomTag()
	gate := filepath.Join(ws, "gate")
	res := runCodexExec(t, srv, ws, []string{"--dangerously-bypass-approvals-and-sandbox"}, []fakemodel.Step{
		{Exec: &fakemodel.ExecCall{Cmd: "echo started-" + marker + "; until [ -e gate ]; do sleep 0.05; done; echo done-" + marker, YieldMs: 1500}},
		{
			Before: func(prev *fakemodel.ToolOutput) error {
				defer os.WriteFile(gate, nil, 0o644)
				if prev == nil || prev.SessionID == 0 {
					return fmt.Errorf("the command is not reported running: %s", prev)
				}
				_, err := underServer(srv.serverPid(t), marker)
				return err
			},
			Stdin: &fakemodel.StdinCall{Chars: "", YieldMs: 10000},
		},
	})
	outs := onlyOutput(t, res, 2)
	if first := outs[0]; first.Exited || first.SessionID == 0 || !strings.Contains(first.Output, "started-"+marker) {
		t.Errorf("the first yield should report the command running, with its first output: %s", &first)
	}
	if poll := outs[1]; !poll.Exited || poll.ExitCode != 0 || !strings.Contains(poll.Output, "done-"+marker) {
		t.Errorf("polling should report the rest of the output and a clean exit: %s", &poll)
	}
}

// codexTTYStdin: a command on a PTY waits for a line; write_stdin sends it.
func codexTTYStdin(t *testing.T, srv execServer) {
	ws := t.TempDir()
	marker := "tty-" + randomTag()
	res := runCodexExec(t, srv, ws, []string{"--dangerously-bypass-approvals-and-sandbox"}, []fakemodel.Step{
		{Exec: &fakemodel.ExecCall{Cmd: "[ -t 0 ] && echo is-a-tty; read x; echo got-$x # " + marker, TTY: true, YieldMs: 1500}},
		{
			Before: func(prev *fakemodel.ToolOutput) error {
				if prev == nil || prev.SessionID == 0 {
					return fmt.Errorf("the command is not reported running: %s", prev)
				}
				_, err := underServer(srv.serverPid(t), marker)
				return err
			},
			Stdin: &fakemodel.StdinCall{Chars: "abc\n", YieldMs: 10000},
		},
	})
	outs := onlyOutput(t, res, 2)
	if first := outs[0]; first.Exited || first.SessionID == 0 || !strings.Contains(first.Output, "is-a-tty") {
		t.Errorf("the first yield should report the command running on a tty: %s", &first)
	}
	if wr := outs[1]; !wr.Exited || wr.ExitCode != 0 || !strings.Contains(wr.Output, "got-abc") {
		t.Errorf("the line written to stdin should reach the command: %s", &wr)
	}
}

// codexSandboxedTree: a sandboxed (read-only) command runs under the
// exec-server, in a PID namespace of its own. The command's own view of its
// parents stops at its namespace's init, so the test walks /proc from
// outside while the command waits on its tty.
func codexSandboxedTree(t *testing.T, srv execServer) {
	ws := t.TempDir()
	marker := "tree-" + randomTag()
	var procs []markedProc
	res := runCodexExec(t, srv, ws, []string{"-s", "read-only"}, []fakemodel.Step{
		{Exec: &fakemodel.ExecCall{Cmd: "read x; echo got-$x # " + marker, TTY: true, YieldMs: 250}},
		{
			Before: func(prev *fakemodel.ToolOutput) error {
				if prev == nil || prev.SessionID == 0 {
					return fmt.Errorf("the command is not reported running: %s", prev)
				}
				var err error
				procs, err = underServer(srv.serverPid(t), marker)
				return err
			},
			Stdin: &fakemodel.StdinCall{Chars: "go\n", YieldMs: 10000},
		},
	})
	for _, p := range procs {
		t.Logf("process tree: %s", p)
	}
	outs := onlyOutput(t, res, 2)
	if wr := outs[1]; !wr.Exited || wr.ExitCode != 0 || !strings.Contains(wr.Output, "got-go") {
		t.Errorf("the line written to stdin should reach the sandboxed command: %s", &wr)
	}
	// The sandbox gave the command (the deepest marked process) a PID
	// namespace of its own.
	self, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", srv.serverPid(t)))
	if len(procs) > 0 && procs[0].pidNS == self {
		t.Errorf("the sandboxed command shares the exec-server's PID namespace: %s", procs[0])
	}
}

// onlyOutput returns the n tool outputs codex handed back, failing unless
// there are exactly n.
func onlyOutput(t *testing.T, res codexResult, n int) []fakemodel.ToolOutput {
	t.Helper()
	if len(res.Outputs) != n {
		t.Fatalf("codex handed back %d tool outputs, want %d", len(res.Outputs), n)
	}
	return res.Outputs
}

// refused reports whether a tool output tells of a command that ran and
// failed because the sandbox denied a write: a nonzero exit and the shell's
// complaint (EROFS, EACCES or EPERM). A command the exec-server refused to
// start does not count.
func refused(o fakemodel.ToolOutput) bool {
	if !o.Exited || o.ExitCode == 0 {
		return false
	}
	s := strings.ToLower(o.Output)
	for _, w := range []string{"read-only file system", "permission denied", "operation not permitted"} {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}
