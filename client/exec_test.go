package client

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/internal/testdeps"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/sandbox"
)

// TestMain lets this test binary serve as the sandbox helper of the
// in-process executors the tests start.
func TestMain(m *testing.M) {
	if sandbox.IsHelper() {
		sandbox.HelperMain()
	}
	os.Exit(m.Run())
}

// localEnv is an executor in this test process, reached over TCP and
// Noise like any remote one. (The in-process Environment is package
// local's, which imports this package.)
func localEnv(t *testing.T) Environment {
	t.Helper()
	return dial(t, startExecutor(t, nil).url, Config{})
}

func sh(script string) []string { return []string{"/bin/sh", "-c", script} }

func TestExecNonZeroExitIsAResultNotAnError(t *testing.T) {
	res, err := Exec(ctxT(t), localEnv(t), ExecRequest{Argv: sh("echo out; echo err >&2; exit 7"), Env: testEnv})
	if err != nil || res.ExitCode != 7 || res.Stdout.String() != "out\n" || res.Stderr.String() != "err\n" || res.Output.Total != 8 {
		t.Fatalf("%+v %v", res, err)
	}
}

func TestExecTimeoutKillsGrandchildren(t *testing.T) {
	env := localEnv(t)
	start := time.Now()
	res, err := Exec(ctxT(t), env, ExecRequest{Argv: sh("sleep 30 & echo $!; wait"), Env: testEnv, Timeout: 300 * time.Millisecond})
	var te *TimeoutError
	if !errors.As(err, &te) || !res.TimedOut || res.ExitCode != TimeoutExitCode {
		t.Fatalf("%+v %v", res, err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("timeout took %v", time.Since(start))
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(res.Stdout.String()))
	deadline := time.Now().Add(2 * time.Second)
	for processExists(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("grandchild %d still alive 2 s after the timeout", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestExecCancelledContextBehavesLikeATimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	res, err := Exec(ctx, localEnv(t), ExecRequest{Argv: []string{"sleep", "30"}, Env: testEnv, Timeout: -1})
	var te *TimeoutError
	if !errors.As(err, &te) || res.ExitCode != TimeoutExitCode {
		t.Fatalf("%+v %v", res, err)
	}
}

func TestExecCapKeepsExactHeadAndTailAndTheTotal(t *testing.T) {
	// 100,000 numbered lines, far beyond a 1 KiB cap.
	res, err := Exec(ctxT(t), localEnv(t), ExecRequest{Argv: []string{"seq", "100000"}, Env: testEnv, OutputCap: 1024})
	if err != nil {
		t.Fatal(err)
	}
	var full bytes.Buffer
	for i := 1; i <= 100000; i++ {
		full.WriteString(strconv.Itoa(i) + "\n")
	}
	out := res.Stdout
	if len(out.Head) != 512 || len(out.Tail) != 512 || out.Total != int64(full.Len()) || out.Lines != 100000 {
		t.Fatalf("head %d tail %d total %d lines %d", len(out.Head), len(out.Tail), out.Total, out.Lines)
	}
	if !bytes.Equal(out.Head, full.Bytes()[:512]) || !bytes.Equal(out.Tail, full.Bytes()[full.Len()-512:]) {
		t.Fatal("head or tail is not the stream's first or last bytes")
	}
	if !strings.Contains(out.String(), "bytes omitted") || !strings.Contains(Format(res), "Total output lines: 100000") {
		t.Fatalf("truncation is not marked:\n%s", Format(res))
	}
}

func TestExecBackgroundChildHoldingThePipeDoesNotHang(t *testing.T) {
	start := time.Now()
	res, err := Exec(ctxT(t), localEnv(t), ExecRequest{Argv: sh("echo hi; sleep 30 &"), Env: testEnv})
	if err != nil || res.Stdout.String() != "hi\n" || res.ExitCode != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Fatalf("took %v; the drain must end after about 2 s", d)
	}
	if !strings.HasPrefix(res.HeldBy, "process group ") {
		t.Fatalf("HeldBy %q", res.HeldBy)
	}
}

func TestExecSignalDeathIsASignalError(t *testing.T) {
	res, err := Exec(ctxT(t), localEnv(t), ExecRequest{Argv: sh("echo before; kill -9 $$"), Env: testEnv})
	var se *SignalError
	if !errors.As(err, &se) || se.Signal != 9 || res.ExitCode != 137 || res.Stdout.String() != "before\n" {
		t.Fatalf("%+v %v", res, err)
	}
	// An exit status of 137 is not a signal.
	if _, err := Exec(ctxT(t), localEnv(t), ExecRequest{Argv: sh("exit 137"), Env: testEnv}); err != nil {
		t.Fatalf("exit 137: %v", err)
	}
}

func TestExecSpawnAndTransportFailures(t *testing.T) {
	env := localEnv(t)
	_, err := Exec(ctxT(t), env, ExecRequest{Argv: []string{"/nonexistent/tool"}, Env: testEnv})
	var spawn *SpawnError
	if !errors.As(err, &spawn) || !errors.Is(err, exec.ErrNotFound) || !strings.Contains(err.Error(), "/nonexistent/tool") {
		t.Fatalf("spawn: %v", err)
	}
	ex := startExecutor(t, nil)
	remote := dial(t, ex.url, Config{NoResume: true})
	go func() {
		time.Sleep(200 * time.Millisecond)
		remote.dropConnection()
	}()
	_, err = Exec(ctxT(t), remote, ExecRequest{Argv: []string{"sleep", "30"}, Env: testEnv, Timeout: -1})
	var te *TransportError
	if !errors.As(err, &te) {
		t.Fatalf("transport: %v", err)
	}
}

func TestExecSandboxDenialKeepsTheOutput(t *testing.T) {
	caps := sandbox.Probe()
	if caps.LandlockABI == 0 || !caps.Seccomp {
		testdeps.Missing(t, "sandbox", "this machine cannot enforce the sandbox")
	}
	outside, err := os.MkdirTemp("/var/tmp", "outpost-exec-test")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(outside)
	cwd := t.TempDir()
	res, err := Exec(ctxT(t), localEnv(t), ExecRequest{
		Argv: sh("echo working; echo x > " + filepath.Join(outside, "f")), Env: testEnv, Cwd: cwd,
		Sandbox: map[string]any{"mode": "workspace-write"},
	})
	var de *SandboxDeniedError
	if !errors.As(err, &de) || !res.SandboxDenied || !strings.Contains(res.Output.String(), "working") || !strings.Contains(strings.ToLower(res.Output.String()), "permission denied") {
		t.Fatalf("%+v %v", res, err)
	}
}

func TestExecStdinAndFormat(t *testing.T) {
	res, err := Exec(ctxT(t), localEnv(t), ExecRequest{Argv: []string{"tr", "a-z", "A-Z"}, Env: testEnv, Stdin: []byte("hello\n")})
	if err != nil || res.Stdout.String() != "HELLO\n" {
		t.Fatalf("%+v %v", res, err)
	}
	text := Format(res)
	if !strings.HasPrefix(text, "Exit code: 0\nWall time: ") || !strings.HasSuffix(text, "Output:\nHELLO\n") {
		t.Fatalf("%q", text)
	}
}

func TestCapBufferKeepsHeadAndTailAcrossWrites(t *testing.T) {
	b := newCapBuffer(8)
	var all []byte
	for i := 0; i < 50; i++ {
		chunk := []byte(strconv.Itoa(i))
		all = append(all, chunk...)
		b.write(chunk)
	}
	r := b.result()
	if string(r.Head) != string(all[:4]) || string(r.Tail) != string(all[len(all)-4:]) || r.Total != int64(len(all)) {
		t.Fatalf("%q %q %d", r.Head, r.Tail, r.Total)
	}
	small := newCapBuffer(100)
	small.write([]byte("abc"))
	if r := small.result(); r.Truncated() || r.String() != "abc" {
		t.Fatalf("%+v", r)
	}
}

// cancelDuringStart ends the caller's ctx while process/start is on its
// way, as an MCP client's notifications/cancelled may.
type cancelDuringStart struct {
	Environment
	cancel context.CancelFunc
}

func (c cancelDuringStart) Start(ctx context.Context, params protocol.ExecParams) (*Process, error) {
	c.cancel()
	return c.Environment.Start(ctx, params)
}

// A ctx that ends while the start is in flight must not orphan the
// command: the start completes and the command is terminated at once.
func TestExecCancelledDuringTheStartTerminatesTheCommand(t *testing.T) {
	ctx, cancel := context.WithCancel(ctxT(t))
	dir := t.TempDir()
	res, err := Exec(ctx, cancelDuringStart{localEnv(t), cancel}, ExecRequest{Argv: sh("echo $$ > " + dir + "/pid; exec sleep 30"), Env: testEnv, Timeout: -1})
	var te *TimeoutError
	if !errors.As(err, &te) || !res.TimedOut {
		t.Fatalf("%+v %v", res, err)
	}
	b, _ := os.ReadFile(dir + "/pid")
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	for deadline := time.Now().Add(testTimeout); pid > 0 && processExists(pid); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the command %d still runs after the cancellation", pid)
		}
	}
	// A ctx already ended starts nothing.
	if _, err := Exec(ctx, localEnv(t), ExecRequest{Argv: sh("touch " + dir + "/started")}); !errors.As(err, &te) {
		t.Fatalf("a cancelled Exec: %v", err)
	}
	if _, err := os.Stat(dir + "/started"); err == nil {
		t.Fatal("a cancelled Exec started its command")
	}
}
