//go:build linux

package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/outpost-exec/outpost/client"
	"github.com/outpost-exec/outpost/executor"
	"github.com/outpost-exec/outpost/identity"
	"github.com/outpost-exec/outpost/internal/testdeps"
	"github.com/outpost-exec/outpost/sandbox"
)

const testTimeout = 60 * time.Second

// TestMain lets the test binary be the executor's sandbox helper, as
// outpost's own binary is.
func TestMain(m *testing.M) {
	if sandbox.IsHelper() {
		sandbox.HelperMain()
	}
	os.Exit(m.Run())
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

func requireSandbox(t *testing.T) {
	t.Helper()
	caps := sandbox.Probe()
	if caps.LandlockABI == 0 || !caps.Seccomp {
		testdeps.Missing(t, "sandbox", "this machine cannot enforce the sandbox: %v", caps.Report())
	}
}

// testExecutor is a real executor on loopback TCP (Noise, mux, msgpack).
type testExecutor struct {
	srv *executor.Server
	ln  *executor.NativeListener
	url string
}

func startExecutor(t *testing.T) *testExecutor {
	t.Helper()
	key, err := identity.Generate()
	if err != nil {
		t.Fatal(err)
	}
	cfg := executor.DefaultConfig()
	cfg.Logger = zap.NewNop()
	srv, err := executor.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := srv.ListenNative("tcp://127.0.0.1:0", executor.NativeConfig{Key: key.Keypair()})
	if err != nil {
		t.Fatal(err)
	}
	te := &testExecutor{srv: srv, ln: ln, url: ln.URL() + "#" + key.PublicKey().Fingerprint()}
	t.Cleanup(te.stop)
	return te
}

// stop takes the executor offline: its listener and every session.
func (te *testExecutor) stop() {
	te.ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	te.srv.Shutdown(ctx)
}

// dialer connects to te with a fresh client key, resuming for recovery.
func (te *testExecutor) dialer(t *testing.T, recovery time.Duration) func(context.Context) (client.Environment, error) {
	key, err := identity.Generate()
	if err != nil {
		t.Fatal(err)
	}
	cfg := client.Config{Key: key, KnownExecutors: filepath.Join(t.TempDir(), "known_executors"), RecoveryTimeout: recovery}
	return func(ctx context.Context) (client.Environment, error) { return client.Dial(ctx, te.url, cfg) }
}

// harness is a Server on one executor and an MCP client session (the
// official SDK's client) connected to it in memory.
type harness struct {
	t      *testing.T
	srv    *Server
	cs     *mcp.ClientSession
	ws     string
	logs   *observer.ObservedLogs
	progMu sync.Mutex
	prog   []*mcp.ProgressNotificationParams
}

func newHarness(t *testing.T, tweak func(*Config)) *harness {
	t.Helper()
	te := startExecutor(t)
	return newHarnessOn(t, te.dialer(t, 0), tweak)
}

func newHarnessOn(t *testing.T, dial func(context.Context) (client.Environment, error), tweak func(*Config)) *harness {
	t.Helper()
	core, logs := observer.New(zapcore.InfoLevel)
	h := &harness{t: t, ws: t.TempDir(), logs: logs}
	cfg := Config{Executors: []Executor{{ID: "e1", Dial: dial}}, Log: zap.New(core)}
	cfg.Workspace = h.ws
	if tweak != nil {
		tweak(&cfg)
	}
	if cfg.Workspace != h.ws {
		h.ws = cfg.Workspace
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	h.srv = srv
	h.cs = h.connect()
	return h
}

// connect opens another MCP session to the server.
func (h *harness) connect() *mcp.ClientSession {
	h.t.Helper()
	st, ct := mcp.NewInMemoryTransports()
	if _, err := h.srv.MCP().Connect(ctxT(h.t), st, nil); err != nil {
		h.t.Fatal(err)
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			h.progMu.Lock()
			h.prog = append(h.prog, r.Params)
			h.progMu.Unlock()
		},
	})
	cs, err := c.Connect(ctxT(h.t), ct, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { cs.Close() })
	return cs
}

// call calls a tool and returns its result; a protocol error fails the test.
func (h *harness) call(cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	h.t.Helper()
	res, err := cs.CallTool(ctxT(h.t), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		h.t.Fatalf("%s: %v", name, err)
	}
	return res
}

// ok calls a tool that must succeed and decodes its structured result.
func (h *harness) ok(name string, args map[string]any, out any) *mcp.CallToolResult {
	h.t.Helper()
	res := h.call(h.cs, name, args)
	if res.IsError {
		h.t.Fatalf("%s %v: %s", name, args, text(res))
	}
	if out != nil {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, out); err != nil {
			h.t.Fatalf("%s: decoding %s: %v", name, b, err)
		}
	}
	return res
}

// fails calls a tool that must fail with kind.
func (h *harness) fails(name string, args map[string]any, kind string) string {
	h.t.Helper()
	res := h.call(h.cs, name, args)
	if !res.IsError {
		b, _ := json.Marshal(res.StructuredContent)
		h.t.Fatalf("%s %v succeeded: %s", name, args, b)
	}
	if got := res.Meta[KindMeta]; got != kind {
		h.t.Fatalf("%s %v: kind %v, want %s (%s)", name, args, got, kind, text(res))
	}
	return text(res)
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			b.WriteString(t.Text)
		}
	}
	return b.String()
}

func TestRunReturnsExitCodeStreamsAndProgress(t *testing.T) {
	requireSandbox(t)
	h := newHarness(t, nil)
	params := &mcp.CallToolParams{Name: "run", Arguments: map[string]any{"shell": "echo out; echo err >&2; pwd; exit 3"}}
	params.SetProgressToken("tok-1")
	res, err := h.cs.CallTool(ctxT(t), params)
	if err != nil || res.IsError {
		t.Fatalf("run: %v %s", err, text(res))
	}
	var out runResult
	b, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(b, &out)
	if out.ExitCode != 3 || out.Stdout.Text != "out\n"+h.ws+"\n" || out.Stderr.Text != "err\n" || out.Sandbox != "workspace-write" || out.Executor != "e1" {
		t.Fatalf("run: %+v", out)
	}
	if !strings.Contains(text(res), "exit code 3") || !strings.Contains(text(res), "--- stderr (4 bytes) ---\nerr\n") {
		t.Fatalf("text: %q", text(res))
	}
	h.progMu.Lock()
	var seen strings.Builder
	for _, p := range h.prog {
		if p.ProgressToken != "tok-1" {
			t.Errorf("progress token %v", p.ProgressToken)
		}
		seen.WriteString(p.Message)
	}
	h.progMu.Unlock()
	if !strings.Contains(seen.String(), "out\n") || !strings.Contains(seen.String(), "err\n") {
		t.Fatalf("progress messages %q lack the output", seen.String())
	}
	// The audit line names the tool, the executor, argv and the exit.
	entries := h.logs.FilterMessage("mcp tool call").All()
	if len(entries) != 1 {
		t.Fatalf("%d audit lines", len(entries))
	}
	m := entries[0].ContextMap()
	if m["tool"] != "run" || m["executor"] != "e1" || m["exit"] != int64(3) || fmt.Sprint(m["argv"]) != "[/bin/sh -c echo out; echo err >&2; pwd; exit 3]" {
		t.Fatalf("audit line %v", m)
	}
}

func TestRunCapsEachStreamKeepingHeadAndTail(t *testing.T) {
	requireSandbox(t)
	h := newHarness(t, nil)
	var out runResult
	h.ok("run", map[string]any{"shell": "echo first; head -c 100000 /dev/zero | tr '\\0' x; echo; echo last", "max_output_bytes": 1000}, &out)
	if !out.Stdout.Truncated || out.Stdout.TotalBytes != 100012 || !strings.HasPrefix(out.Stdout.Text, "first\n") || !strings.HasSuffix(out.Stdout.Text, "last\n") {
		t.Fatalf("stdout %d bytes total %d truncated %v: %.80q…", len(out.Stdout.Text), out.Stdout.TotalBytes, out.Stdout.Truncated, out.Stdout.Text)
	}
	if len(out.Stdout.Text) > 1100 {
		t.Fatalf("kept %d bytes of a 1000-byte cap", len(out.Stdout.Text))
	}
}

func TestRunTimesOutAndReportsIt(t *testing.T) {
	requireSandbox(t)
	h := newHarness(t, nil)
	var out runResult
	h.ok("run", map[string]any{"argv": []string{"sleep", "30"}, "timeout_ms": 300}, &out)
	if !out.TimedOut || out.ExitCode != 124 {
		t.Fatalf("%+v", out)
	}
}

func TestStartReadWriteStdinAndExit(t *testing.T) {
	requireSandbox(t)
	h := newHarness(t, nil)
	var st startResult
	h.ok("start", map[string]any{"shell": "echo ready; while read l; do echo got $l; done; echo bye; exit 7"}, &st)
	if st.Handle == "" || st.Pid == 0 {
		t.Fatalf("%+v", st)
	}
	var rd readResult
	h.ok("read", map[string]any{"handle": st.Handle, "wait_ms": 10000}, &rd)
	if rd.Output != "ready\n" || !rd.Running {
		t.Fatalf("%+v", rd)
	}
	var wr writeResult
	h.ok("write_stdin", map[string]any{"handle": st.Handle, "data": "a\n"}, &wr)
	if wr.Written != 2 {
		t.Fatalf("%+v", wr)
	}
	cursor := rd.Cursor
	h.ok("read", map[string]any{"handle": st.Handle, "cursor": cursor, "wait_ms": 10000}, &rd)
	if rd.Output != "got a\n" {
		t.Fatalf("%+v", rd)
	}
	h.ok("write_stdin", map[string]any{"handle": st.Handle, "close": true}, &wr)
	deadline := time.Now().Add(testTimeout)
	for rd.Running && time.Now().Before(deadline) {
		h.ok("read", map[string]any{"handle": st.Handle, "cursor": rd.Cursor, "wait_ms": 5000}, &rd)
	}
	if rd.ExitCode == nil || *rd.ExitCode != 7 {
		t.Fatalf("%+v", rd)
	}
	// The whole output is there from cursor 0.
	h.ok("read", map[string]any{"handle": st.Handle}, &rd)
	if rd.Output != "ready\ngot a\nbye\n" {
		t.Fatalf("%q", rd.Output)
	}
	var ls listResult
	h.ok("list", nil, &ls)
	if len(ls.Processes) != 1 || ls.Processes[0].Handle != st.Handle || ls.Processes[0].Running {
		t.Fatalf("%+v", ls)
	}
	h.fails("read", map[string]any{"handle": st.Handle, "cursor": 1 << 30}, "invalid_argument")
	h.fails("read", map[string]any{"handle": "h999"}, "unknown_handle")
	h.fails("signal", map[string]any{"handle": st.Handle, "signal": "USR9"}, "invalid_argument")
}

func TestReadKeepsTheLastMebibyteAndCountsWhatWasDropped(t *testing.T) {
	requireSandbox(t)
	h := newHarness(t, nil)
	var st startResult
	h.ok("start", map[string]any{"shell": "head -c 3000000 /dev/zero | tr '\\0' y; echo end"}, &st)
	waitExit(t, h, st.Handle)
	var rd readResult
	h.ok("read", map[string]any{"handle": st.Handle, "max_bytes": 16}, &rd)
	if rd.DroppedBytes != 3000004-HandleOutput || len(rd.Output) != 16 || !rd.More || rd.Cursor != rd.DroppedBytes+16 {
		t.Fatalf("dropped %d, %d bytes, more %v, cursor %d", rd.DroppedBytes, len(rd.Output), rd.More, rd.Cursor)
	}
}

func TestHandlesAreBoundedPerSessionAndSessionsApart(t *testing.T) {
	requireSandbox(t)
	h := newHarness(t, func(c *Config) { c.MaxHandles = 2 })
	var a, b startResult
	h.ok("start", map[string]any{"argv": []string{"sleep", "60"}}, &a)
	h.ok("start", map[string]any{"argv": []string{"true"}}, &b)
	waitExit(t, h, b.Handle)
	var c startResult
	h.ok("start", map[string]any{"argv": []string{"sleep", "60"}}, &c) // b, finished, makes room
	h.fails("read", map[string]any{"handle": b.Handle}, "unknown_handle")
	h.fails("start", map[string]any{"argv": []string{"sleep", "60"}}, "too_many_handles")
	// Another session sees none of this one's handles.
	other := h.connect()
	res := h.call(other, "read", map[string]any{"handle": a.Handle})
	if !res.IsError || res.Meta[KindMeta] != "unknown_handle" {
		t.Fatalf("another session read %s: %s", a.Handle, text(res))
	}
	var term terminateResult
	h.ok("terminate", map[string]any{"handle": a.Handle}, &term)
	if !term.WasRunning {
		t.Fatal("terminate: was not running")
	}
	waitGone(t, a.Pid)
}

func waitExit(t *testing.T, h *harness, handle string) readResult {
	t.Helper()
	var rd readResult
	for deadline := time.Now().Add(testTimeout); time.Now().Before(deadline); {
		h.ok("read", map[string]any{"handle": handle, "cursor": rd.Cursor, "wait_ms": 2000, "max_bytes": MaxReadBytes}, &rd)
		if !rd.Running {
			return rd
		}
	}
	t.Fatalf("%s still running", handle)
	return rd
}

// waitGone waits for pid to be gone (reaped, or a zombie of no one's).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(testTimeout); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
		if st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil && strings.Contains(string(st), ") Z ") {
			return
		}
	}
	t.Fatalf("process %d still runs", pid)
}

func TestClosingTheSessionTerminatesItsProcesses(t *testing.T) {
	requireSandbox(t)
	h := newHarness(t, nil)
	var st startResult
	h.ok("start", map[string]any{"argv": []string{"sleep", "60"}}, &st)
	h.cs.Close()
	waitGone(t, st.Pid)
}

func TestCancellingARunTerminatesTheCommand(t *testing.T) {
	requireSandbox(t)
	h := newHarness(t, nil)
	// A sleep of a length no other process has names the command on the
	// host (inside the sandbox's pid namespace $$ means nothing here).
	arg := fmt.Sprintf("%d.%03d", 300+time.Now().UnixNano()%1000, os.Getpid()%1000)
	ctx, cancel := context.WithCancel(ctxT(t))
	done := make(chan error, 1)
	go func() {
		_, err := h.cs.CallTool(ctx, &mcp.CallToolParams{Name: "run", Arguments: map[string]any{"argv": []string{"sleep", arg}}})
		done <- err
	}()
	for deadline := time.Now().Add(testTimeout); len(processesNamed(arg)) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the command never started")
		}
	}
	cancel() // the SDK client sends notifications/cancelled
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("call: %v", err)
	}
	for deadline := time.Now().Add(testTimeout); len(processesNamed(arg)) > 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("processes %v still run after the cancellation", processesNamed(arg))
		}
	}
}

// processesNamed lists the live (not zombie) processes whose command line
// has arg as an argument.
func processesNamed(arg string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if !strings.Contains(string(cmd), "\x00"+arg+"\x00") {
			continue
		}
		if st, _ := os.ReadFile("/proc/" + e.Name() + "/stat"); strings.Contains(string(st), ") Z ") {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

func TestAnExecutorGoingOfflineMidCallIsAnUnavailableError(t *testing.T) {
	requireSandbox(t)
	te := startExecutor(t)
	h := newHarnessOn(t, te.dialer(t, 500*time.Millisecond), nil)
	h.ok("run", map[string]any{"argv": []string{"true"}}, nil)
	pidFile := filepath.Join(h.ws, "pid")
	done := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, _ := h.cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "run", Arguments: map[string]any{"shell": "echo $$ > pid; exec sleep 60"}})
		done <- res
	}()
	for deadline := time.Now().Add(testTimeout); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if b, _ := os.ReadFile(pidFile); len(b) > 0 {
			break
		}
	}
	te.stop()
	res := <-done
	if res == nil || !res.IsError || res.Meta[KindMeta] != "unavailable" {
		t.Fatalf("run across the executor's end: %+v %s", res, text(res))
	}
	// The next call dials again and says the executor cannot be reached.
	h.fails("run", map[string]any{"argv": []string{"true"}}, "unavailable")
}

func TestPolicyRefusesWhatTheOperatorDidNotAllow(t *testing.T) {
	requireSandbox(t)
	h := newHarness(t, nil)
	h.fails("run", map[string]any{"argv": []string{"true"}, "sandbox": "full-access"}, "not_allowed")
	h.fails("run", map[string]any{"argv": []string{"true"}, "network": true}, "not_allowed")
	h.fails("run", map[string]any{"argv": []string{"true"}, "cwd": "/"}, "not_allowed")
	h.fails("run", map[string]any{"argv": []string{"true"}, "cwd": "../"}, "not_allowed")
	h.fails("start", map[string]any{"argv": []string{"true"}, "sandbox": "full-access"}, "not_allowed")
	h.fails("run", map[string]any{"argv": []string{"true"}, "sandbox": "bogus"}, "invalid_argument")
	// read-only may run anywhere.
	var out runResult
	h.ok("run", map[string]any{"argv": []string{"pwd"}, "cwd": "/", "sandbox": "read-only"}, &out)
	if out.Stdout.Text != "/\n" || out.Sandbox != "read-only" {
		t.Fatalf("%+v", out)
	}
}

func TestWorkspaceWriteWritesTheWorkspaceOnly(t *testing.T) {
	requireSandbox(t)
	ws, outside := dirOutsideTmp(t), dirOutsideTmp(t)
	h := newHarness(t, func(c *Config) { c.Workspace = ws })
	os.Mkdir(filepath.Join(ws, "sub"), 0o755)
	var out runResult
	h.ok("run", map[string]any{"shell": "echo x > ../in-ws.txt", "cwd": "sub"}, &out)
	if out.ExitCode != 0 {
		t.Fatalf("writing the workspace from a subdirectory: %+v", out)
	}
	h.ok("run", map[string]any{"shell": "echo x > " + outside + "/escaped"}, &out)
	if out.ExitCode == 0 || !out.SandboxDenied {
		t.Fatalf("a write outside the workspace: %+v", out)
	}
	if _, err := os.Lstat(filepath.Join(outside, "escaped")); err == nil {
		t.Fatal("the command wrote outside the workspace")
	}
	// write_file is judged by the same sandbox on the executor.
	res := h.call(h.cs, "write_file", map[string]any{"path": filepath.Join(outside, "f"), "content": "x"})
	if !res.IsError {
		t.Fatal("write_file outside the workspace succeeded")
	}
	if _, err := os.Lstat(filepath.Join(outside, "f")); err == nil {
		t.Fatal("write_file wrote outside the workspace")
	}
	// A cwd reached through a symlink the model planted is refused.
	os.Symlink(outside, filepath.Join(ws, "link"))
	h.fails("run", map[string]any{"shell": "echo x > planted", "cwd": "link"}, "invalid")
	if _, err := os.Lstat(filepath.Join(outside, "planted")); err == nil {
		t.Fatal("a cwd through a symlink wrote outside the workspace")
	}
}

// dirOutsideTmp returns a fresh directory not under /tmp or $TMPDIR,
// which workspace-write leaves writable.
func dirOutsideTmp(t *testing.T) string {
	t.Helper()
	base := "/var/tmp"
	if os.Getenv("TMPDIR") == base {
		t.Skip("TMPDIR is /var/tmp")
	}
	d, err := os.MkdirTemp(base, "outpost-mcp-test")
	if err != nil {
		t.Fatalf("no directory outside the temp dirs: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func TestReadOnlyServerHasNoWriteToolsAndRunsReadOnly(t *testing.T) {
	requireSandbox(t)
	h := newHarness(t, func(c *Config) { c.ReadOnly = true })
	tools, err := h.cs.ListTools(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range tools.Tools {
		if tl.Name == "write_file" || tl.Name == "edit_file" {
			t.Fatalf("read-only server offers %s", tl.Name)
		}
	}
	var out runResult
	h.ok("run", map[string]any{"shell": "echo x > f"}, &out)
	if out.Sandbox != "read-only" || out.ExitCode == 0 {
		t.Fatalf("%+v", out)
	}
	h.fails("run", map[string]any{"argv": []string{"true"}, "sandbox": "workspace-write"}, "not_allowed")
	if _, err := h.cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "write_file", Arguments: map[string]any{"path": "f", "content": "x"}}); err == nil {
		t.Fatal("write_file on a read-only server")
	}
}

func TestFileTools(t *testing.T) {
	requireSandbox(t)
	h := newHarness(t, nil)
	var wf writeFileResult
	h.ok("write_file", map[string]any{"path": "d/e/f.txt", "content": "alpha\nbeta beta\ngamma\n", "create_dirs": true}, &wf)
	if wf.Path != filepath.Join(h.ws, "d/e/f.txt") || wf.BytesWritten != 22 {
		t.Fatalf("%+v", wf)
	}
	var rf readFileResult
	h.ok("read_file", map[string]any{"path": "d/e/f.txt", "offset": 6, "length": 4}, &rf)
	if rf.Content != "beta" || rf.Size != 22 || !rf.Truncated || rf.Binary {
		t.Fatalf("%+v", rf)
	}
	h.fails("edit_file", map[string]any{"path": "d/e/f.txt", "old_string": "beta", "new_string": "B"}, "edit_mismatch")
	h.fails("edit_file", map[string]any{"path": "d/e/f.txt", "old_string": "delta", "new_string": "B"}, "edit_mismatch")
	var ef editFileResult
	h.ok("edit_file", map[string]any{"path": "d/e/f.txt", "old_string": "beta", "new_string": "B", "expected_replacements": 2}, &ef)
	if b, _ := os.ReadFile(filepath.Join(h.ws, "d/e/f.txt")); string(b) != "alpha\nB B\ngamma\n" || ef.Replacements != 2 {
		t.Fatalf("%q %+v", b, ef)
	}
	os.WriteFile(filepath.Join(h.ws, "bin"), []byte{0x7f, 'E', 'L', 'F', 0, 1, 2}, 0o644)
	h.ok("read_file", map[string]any{"path": "bin"}, &rf)
	if !rf.Binary || rf.Content != "" {
		t.Fatalf("%+v", rf)
	}
	h.ok("read_file", map[string]any{"path": "bin", "encoding": "base64"}, &rf)
	if rf.Content != "f0VMRgABAg==" {
		t.Fatalf("%+v", rf)
	}
	h.fails("read_file", map[string]any{"path": "missing"}, "not_found")
	h.fails("read_file", map[string]any{"path": "d"}, "invalid_argument")
	var ld listDirResult
	h.ok("list_directory", map[string]any{"path": "d"}, &ld)
	if len(ld.Entries) != 1 || ld.Entries[0].Name != "e" || ld.Entries[0].Type != "dir" {
		t.Fatalf("%+v", ld)
	}
	var sr searchResult
	h.ok("search", map[string]any{"name_glob": "*.txt", "content": "gamma"}, &sr)
	if len(sr.Matches) != 1 || sr.Matches[0].Line != 3 || sr.Matches[0].Path != wf.Path {
		t.Fatalf("%+v", sr)
	}
	h.ok("search", map[string]any{"name_glob": "b*"}, &sr)
	if len(sr.Matches) != 1 || !strings.HasSuffix(sr.Matches[0].Path, "/bin") {
		t.Fatalf("%+v", sr)
	}
	h.fails("search", map[string]any{"name_glob": "[", "content": "x"}, "invalid_argument")
}

func TestSearchStopsAtMaxResults(t *testing.T) {
	requireSandbox(t)
	h := newHarness(t, nil)
	for i := range 30 {
		os.WriteFile(filepath.Join(h.ws, fmt.Sprintf("f%02d", i)), []byte("needle\nneedle\n"), 0o644)
	}
	var sr searchResult
	h.ok("search", map[string]any{"content": "needle", "max_results": 5}, &sr)
	if len(sr.Matches) != 5 || !sr.Truncated {
		t.Fatalf("%d matches, truncated %v", len(sr.Matches), sr.Truncated)
	}
	h.fails("search", map[string]any{"content": "needle", "max_results": SearchMaxResults + 1}, "invalid_argument")
}

func TestBadInputGetsAClearErrorOfItsKind(t *testing.T) {
	requireSandbox(t)
	h := newHarness(t, nil)
	if _, err := h.cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "no_such_tool"}); err == nil {
		t.Fatal("an unknown tool was called")
	}
	h.fails("run", map[string]any{"argv": "not a list"}, "invalid_argument")
	h.fails("run", map[string]any{"argv": []string{"true"}, "timeout_ms": "soon"}, "invalid_argument")
	h.fails("run", map[string]any{}, "invalid_argument")
	h.fails("run", map[string]any{"argv": []string{"true"}, "shell": "true"}, "invalid_argument")
	h.fails("run", map[string]any{"argv": []string{strings.Repeat("a", maxArgvBytes)}}, "invalid_argument")
	h.fails("run", map[string]any{"argv": []string{"true"}, "timeout_ms": int64(DefaultMaxTimeout/time.Millisecond) + 1}, "invalid_argument")
	h.fails("run", map[string]any{"argv": []string{"true"}, "executor": "elsewhere"}, "unknown_executor")
	h.fails("run", map[string]any{"argv": []string{"true"}, "env": map[string]any{"A=B": "x"}}, "invalid_argument")
	h.fails("write_file", map[string]any{"path": "x\x00y", "content": ""}, "invalid_argument")
	h.fails("read", map[string]any{"handle": "h1", "wait_ms": 31000}, "unknown_handle")
	// After all that the server still serves.
	var out runResult
	h.ok("run", map[string]any{"argv": []string{"echo", "still here"}}, &out)
	if out.Stdout.Text != "still here\n" {
		t.Fatalf("%+v", out)
	}
}

func TestExecutorsToolReportsReachability(t *testing.T) {
	requireSandbox(t)
	te := startExecutor(t)
	down := startExecutor(t)
	downDial := down.dialer(t, 0)
	down.stop()
	h := newHarnessOn(t, te.dialer(t, 0), func(c *Config) {
		c.Executors = append(c.Executors, Executor{ID: "e2", Dial: downDial})
	})
	var ex executorsResult
	h.ok("executors", nil, &ex)
	if len(ex.Executors) != 2 || !ex.Executors[0].Online || !ex.Executors[0].Default || ex.Executors[1].Online || ex.Executors[1].Error == "" {
		t.Fatalf("%+v", ex)
	}
	h.fails("run", map[string]any{"argv": []string{"true"}, "executor": "e2"}, "unavailable")
}

func TestConcurrentCallsPerSessionAreBounded(t *testing.T) {
	requireSandbox(t)
	h := newHarness(t, nil)
	var st startResult
	h.ok("start", map[string]any{"argv": []string{"sleep", "60"}}, &st)
	var wg sync.WaitGroup
	// Each reader reads again once its wait is over, until the process
	// ends: on a loaded machine the 32 may take a while to be in flight
	// together, and a single 30 s wait could end before the last starts.
	var ended atomic.Bool
	for range MaxConcurrentCalls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !ended.Load() {
				res, err := h.cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "read", Arguments: map[string]any{"handle": st.Handle, "wait_ms": 30000}})
				if err != nil || res.IsError && res.Meta[KindMeta] != "busy" {
					return
				}
			}
		}()
	}
	busy := false
	for deadline := time.Now().Add(testTimeout); !busy && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		res := h.call(h.cs, "read_file", map[string]any{"path": "."})
		busy = res.IsError && res.Meta[KindMeta] == "busy"
	}
	if !busy {
		res := h.call(h.cs, "read", map[string]any{"handle": st.Handle})
		t.Fatalf("%d waiting reads and one more call: never refused as busy (%s: %s)", MaxConcurrentCalls, st.Handle, text(res))
	}
	ended.Store(true)
	h.ok("terminate", map[string]any{"handle": st.Handle}, nil) // the reads end with the process
	wg.Wait()
	h.ok("list", nil, nil)
}
