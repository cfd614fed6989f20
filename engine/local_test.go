//go:build linux || darwin || freebsd

package engine

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/protocol"
)

// testTimeout bounds every wait in these tests; a hang fails, not stalls.
const testTimeout = 20 * time.Second

var testEnv = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C"}

func startLocal(t *testing.T, b *LocalBackend, spec Spec) Process {
	t.Helper()
	if spec.Dir == "" {
		spec.Dir = t.TempDir()
	}
	if spec.Env == nil {
		spec.Env = testEnv
	}
	p, err := b.Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Kill()
		select {
		case <-p.Log().Closed():
		case <-time.After(testTimeout):
			t.Error("process did not close after kill")
		}
	})
	return p
}

// collect returns every event of p until it closes.
func collect(t *testing.T, p Process) []Event {
	t.Helper()
	sub := p.Log().Subscribe(0, false, nil)
	defer sub.Close()
	deadline := time.After(testTimeout)
	var all []Event
	for {
		evs, gap, done := sub.Next(1000, 1<<30)
		if gap != nil {
			t.Fatalf("unexpected gap %+v", gap)
		}
		all = append(all, evs...)
		if done {
			return all
		}
		select {
		case <-sub.Ready():
		case <-deadline:
			t.Fatalf("process did not close; events so far: %v", summarize(all))
		}
	}
}

func summarize(evs []Event) string {
	var b strings.Builder
	for _, e := range evs {
		switch e.Kind {
		case EventOutput:
			b.WriteString("out(" + string(e.Stream) + "," + string(e.Data) + ") ")
		default:
			b.WriteString(e.Kind.String() + " ")
		}
	}
	return b.String()
}

func output(evs []Event, stream protocol.Stream) string {
	var b bytes.Buffer
	for _, e := range evs {
		if e.Kind == EventOutput && (stream == "" || e.Stream == stream) {
			b.Write(e.Data)
		}
	}
	return b.String()
}

func exitCode(t *testing.T, evs []Event) int32 {
	t.Helper()
	for _, e := range evs {
		if e.Kind == EventExited {
			return e.ExitCode
		}
	}
	t.Fatal("no exit event")
	return 0
}

// waitOutput waits until p's output contains want.
func waitOutput(t *testing.T, p Process, want string) string {
	t.Helper()
	sub := p.Log().Subscribe(0, false, nil)
	defer sub.Close()
	var got bytes.Buffer
	deadline := time.After(testTimeout)
	for {
		evs, _, done := sub.Next(1000, 1<<30)
		for _, e := range evs {
			got.Write(e.Data)
		}
		if strings.Contains(got.String(), want) {
			return got.String()
		}
		if done {
			t.Fatalf("closed without %q; output %q", want, got.String())
		}
		select {
		case <-sub.Ready():
		case <-deadline:
			t.Fatalf("no %q; output %q", want, got.String())
		}
	}
}

func TestLocalProcessStartsAndExits(t *testing.T) {
	p := startLocal(t, NewLocalBackend(), Spec{Argv: []string{"true"}})
	evs := collect(t, p)
	if code := exitCode(t, evs); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

func TestLocalProcessEventOrderIsOutputOutputExitedClosed(t *testing.T) {
	p := startLocal(t, NewLocalBackend(), Spec{Argv: []string{"/bin/sh", "-c", "printf out; sleep 0.05; printf err >&2; sleep 0.05; exit 7"}})
	evs := collect(t, p)
	want := []struct {
		kind   EventKind
		seq    uint64
		stream protocol.Stream
		data   string
	}{
		{EventOutput, 1, protocol.StreamStdout, "out"},
		{EventOutput, 2, protocol.StreamStderr, "err"},
		{EventExited, 3, "", ""},
		{EventClosed, 4, "", ""},
	}
	if len(evs) != len(want) {
		t.Fatalf("events: %s", summarize(evs))
	}
	for i, w := range want {
		e := evs[i]
		if e.Kind != w.kind || e.Seq != w.seq || e.Stream != w.stream || string(e.Data) != w.data {
			t.Errorf("event %d: %+v, want %+v", i, e, w)
		}
	}
	if evs[2].ExitCode != 7 {
		t.Errorf("exit code %d", evs[2].ExitCode)
	}
}

func TestLocalProcessReplaysEventsAfterClose(t *testing.T) {
	p := startLocal(t, NewLocalBackend(), Spec{Argv: []string{"/bin/sh", "-c", "echo one; echo two >&2"}})
	<-p.Log().Closed()
	evs := collect(t, p)
	if output(evs, protocol.StreamStdout) != "one\n" || output(evs, protocol.StreamStderr) != "two\n" {
		t.Fatalf("replay: %s", summarize(evs))
	}
	if evs[len(evs)-1].Kind != EventClosed || evs[len(evs)-2].Kind != EventExited {
		t.Fatalf("replay must end with exited, closed: %s", summarize(evs))
	}
}

func TestLocalProcessKeepsGrandchildOutputAfterExit(t *testing.T) {
	dir := t.TempDir()
	gate := filepath.Join(dir, "gate")
	// The shell exits at once; its background child waits for the gate
	// file, then writes to the inherited stdout.
	script := `(while [ ! -e ` + gate + ` ]; do sleep 0.01; done; echo late) & exit 0`
	p := startLocal(t, NewLocalBackend(), Spec{Argv: []string{"/bin/sh", "-c", script}, Dir: dir})
	res, err := p.Log().Read(context.Background(), ReadRequest{MaxBytes: -1, Wait: testTimeout})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Exited || res.Closed || len(res.Chunks) != 0 {
		t.Fatalf("after parent exit: %+v", res)
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	evs := collect(t, p)
	if got := output(evs, ""); got != "late\n" {
		t.Fatalf("late output %q", got)
	}
	if evs[0].Kind != EventExited || evs[1].Kind != EventOutput || evs[2].Kind != EventClosed {
		t.Fatalf("order: %s", summarize(evs))
	}
}

func TestLocalTTYWriteReachesChild(t *testing.T) {
	p := startLocal(t, NewLocalBackend(), Spec{Argv: []string{"/bin/sh", "-c", "read line; echo from-stdin:$line"}, Tty: true})
	st, err := p.Write([]byte("hello\n"), "w1", false)
	if err != nil || st != protocol.WriteAccepted {
		t.Fatalf("write: %v %v", st, err)
	}
	evs := collect(t, p)
	if !strings.Contains(output(evs, protocol.StreamPty), "from-stdin:hello") {
		t.Fatalf("output %q", output(evs, ""))
	}
	for _, e := range evs {
		if e.Kind == EventOutput && e.Stream != protocol.StreamPty {
			t.Fatalf("tty chunk labelled %q", e.Stream)
		}
	}
}

func TestLocalPipeStdinWriteIsExact(t *testing.T) {
	p := startLocal(t, NewLocalBackend(), Spec{Argv: []string{"/bin/sh", "-c", "read line; echo from-stdin:$line"}, PipeStdin: true})
	st, err := p.Write([]byte("hello\n"), "w1", false)
	if err != nil || st != protocol.WriteAccepted {
		t.Fatalf("write: %v %v", st, err)
	}
	evs := collect(t, p)
	if got := output(evs, protocol.StreamStdout); got != "from-stdin:hello\n" {
		t.Fatalf("output %q", got)
	}
}

func TestLocalWriteWithoutPipeStdinIsRefusedAndChildSeesEOF(t *testing.T) {
	p := startLocal(t, NewLocalBackend(), Spec{Argv: []string{"/bin/sh", "-c", "if read line; then echo got:$line; else echo eof; fi"}})
	st, err := p.Write([]byte("hello\n"), "w1", false)
	if err != nil || st != protocol.WriteStdinClosed {
		t.Fatalf("write: %v %v", st, err)
	}
	if got := output(collect(t, p), ""); got != "eof\n" {
		t.Fatalf("output %q", got)
	}
}

func TestLocalCloseStdinDeliversEOF(t *testing.T) {
	p := startLocal(t, NewLocalBackend(), Spec{Argv: []string{"cat"}, PipeStdin: true})
	if st, err := p.Write([]byte("abc"), "w1", true); err != nil || st != protocol.WriteAccepted {
		t.Fatalf("write: %v %v", st, err)
	}
	evs := collect(t, p)
	if got := output(evs, ""); got != "abc" {
		t.Fatalf("output %q", got)
	}
	if st, _ := p.Write([]byte("more"), "w2", false); st != protocol.WriteStdinClosed {
		t.Fatalf("write after close: %v", st)
	}
}

func TestLocalCloseStdinOnTTYSendsEOF(t *testing.T) {
	p := startLocal(t, NewLocalBackend(), Spec{Argv: []string{"/bin/sh", "-c", "cat >/dev/null; echo done"}, Tty: true})
	if st, err := p.Write([]byte("x\n"), "", true); err != nil || st != protocol.WriteAccepted {
		t.Fatalf("write: %v %v", st, err)
	}
	evs := collect(t, p)
	if !strings.Contains(output(evs, ""), "done") {
		t.Fatalf("output %q", output(evs, ""))
	}
}

func TestLocalDuplicateWriteIDWritesOnce(t *testing.T) {
	p := startLocal(t, NewLocalBackend(), Spec{Argv: []string{"cat"}, PipeStdin: true})
	for i := 0; i < 3; i++ {
		if st, err := p.Write([]byte("once\n"), "same-id", false); err != nil || st != protocol.WriteAccepted {
			t.Fatalf("write %d: %v %v", i, st, err)
		}
	}
	p.Write(nil, "close", true)
	if got := output(collect(t, p), ""); got != "once\n" {
		t.Fatalf("output %q", got)
	}
}

func TestLocalInterruptReachesShellTrap(t *testing.T) {
	p := startLocal(t, NewLocalBackend(), Spec{Argv: []string{"/bin/sh", "-c", `trap 'echo signal:2; exit 7' INT; echo ready; while :; do sleep 0.01; done`}})
	waitOutput(t, p, "ready")
	if err := p.Signal(protocol.SignalInterrupt); err != nil {
		t.Fatal(err)
	}
	evs := collect(t, p)
	if got := output(evs, ""); got != "ready\nsignal:2\n" {
		t.Fatalf("output %q", got)
	}
	if code := exitCode(t, evs); code != 7 {
		t.Fatalf("exit %d", code)
	}
}

func TestLocalSignalsBeyondInterrupt(t *testing.T) {
	for _, c := range []struct {
		sig  protocol.Signal
		trap string
	}{
		{protocol.SignalTerminate, "TERM"},
		{protocol.SignalHangup, "HUP"},
		{protocol.SignalQuit, "QUIT"},
		{protocol.SignalUser1, "USR1"},
		{protocol.SignalUser2, "USR2"},
	} {
		t.Run(string(c.sig), func(t *testing.T) {
			p := startLocal(t, NewLocalBackend(), Spec{Argv: []string{"/bin/sh", "-c", `trap 'echo got:` + c.trap + `; exit 5' ` + c.trap + `; echo ready; while :; do sleep 0.01; done`}})
			waitOutput(t, p, "ready")
			if err := p.Signal(c.sig); err != nil {
				t.Fatal(err)
			}
			evs := collect(t, p)
			// The group's sleep dies of the signal too, and the shell may
			// report that; the trap's line is what matters.
			if got := output(evs, ""); !strings.Contains(got, "ready\n") || !strings.Contains(got, "got:"+c.trap+"\n") {
				t.Fatalf("output %q", got)
			}
			if code := exitCode(t, evs); code != 5 {
				t.Fatalf("exit %d, want 5 from the trap", code)
			}
		})
	}
	t.Run("kill", func(t *testing.T) {
		p := startLocal(t, NewLocalBackend(), Spec{Argv: []string{"sleep", "60"}})
		if err := p.Signal(protocol.SignalKill); err != nil {
			t.Fatal(err)
		}
		if code := exitCode(t, collect(t, p)); code != 128+9 {
			t.Fatalf("exit %d, want 137", code)
		}
	})
}

func TestLocalInterruptOnTTYReachesForegroundJob(t *testing.T) {
	p := startLocal(t, NewLocalBackend(), Spec{Argv: []string{"/bin/sh", "-c", `trap 'echo signal:2; exit 7' INT; echo ready; while :; do sleep 0.01; done`}, Tty: true})
	waitOutput(t, p, "ready")
	if err := p.Signal(protocol.SignalInterrupt); err != nil {
		t.Fatal(err)
	}
	evs := collect(t, p)
	if !strings.Contains(output(evs, ""), "signal:2") || exitCode(t, evs) != 7 {
		t.Fatalf("output %q", output(evs, ""))
	}
}

func TestLocalTerminateKillsGroupThatIgnoresTERM(t *testing.T) {
	b := NewLocalBackend()
	b.TerminateGrace = 50 * time.Millisecond
	// The child ignores TERM and holds stdout; only the KILL after the
	// grace ends it, and with it the process's streams.
	p := startLocal(t, b, Spec{Argv: []string{"/bin/sh", "-c", `trap '' TERM; sh -c 'trap "" TERM; echo ready; sleep 60' ; sleep 60`}})
	waitOutput(t, p, "ready")
	if !p.Terminate() {
		t.Fatal("terminate reported not running")
	}
	evs := collect(t, p)
	if code := exitCode(t, evs); code != 128+9 {
		t.Fatalf("exit %d, want 137 (killed after grace)", code)
	}
}

func TestLocalTerminateAfterExitReportsNotRunning(t *testing.T) {
	p := startLocal(t, NewLocalBackend(), Spec{Argv: []string{"true"}})
	<-p.Log().Closed()
	if p.Terminate() {
		t.Fatal("terminate after exit reported running")
	}
	if err := p.Signal(protocol.SignalInterrupt); err != nil {
		t.Fatalf("signal after exit must be a silent no-op: %v", err)
	}
}

func TestLocalResizeChangesPTYSize(t *testing.T) {
	p := startLocal(t, NewLocalBackend(), Spec{Argv: []string{"/bin/sh", "-c", `stty size; trap 'stty size; exit 0' WINCH; echo ready; while :; do sleep 0.01; done`}, Tty: true})
	waitOutput(t, p, "ready")
	if err := p.Resize(40, 120); err != nil {
		t.Fatal(err)
	}
	out := output(collect(t, p), "")
	if !strings.Contains(out, "24 80") || !strings.Contains(out, "40 120") {
		t.Fatalf("output %q: want default 24 80, then 40 120", out)
	}
}

func TestLocalResizeOfPipeProcessIsRefused(t *testing.T) {
	p := startLocal(t, NewLocalBackend(), Spec{Argv: []string{"sleep", "60"}})
	if err := p.Resize(10, 10); err != ErrNotTTY {
		t.Fatalf("err = %v", err)
	}
}

func TestLocalArg0AndExactEnvAndCwd(t *testing.T) {
	dir := t.TempDir()
	p := startLocal(t, NewLocalBackend(), Spec{
		Argv: []string{"/bin/sh", "-c", `echo "$0|$FOO|$(pwd)|$(env | wc -l)"`},
		Arg0: "custom-name",
		Dir:  dir,
		Env:  []string{"FOO=bar", "PATH=/usr/bin:/bin"},
	})
	real, _ := filepath.EvalSymlinks(dir)
	// env also lists PWD, set by the shell; nothing else is inherited.
	want := "custom-name|bar|" + real + "|3\n"
	if got := output(collect(t, p), ""); got != want {
		t.Fatalf("output %q, want %q", got, want)
	}
}

func TestLocalResolvesProgramWithChildPATH(t *testing.T) {
	dir := t.TempDir()
	tool := filepath.Join(dir, "mytool")
	if err := os.WriteFile(tool, []byte("#!/bin/sh\necho mine\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := startLocal(t, NewLocalBackend(), Spec{Argv: []string{"mytool"}, Env: []string{"PATH=" + dir}})
	if got := output(collect(t, p), ""); got != "mine\n" {
		t.Fatalf("output %q", got)
	}
}

func TestLocalSpawnFailureIsAnError(t *testing.T) {
	b := NewLocalBackend()
	for _, argv := range [][]string{{"/nonexistent/program"}, {"no-such-program-xyz"}, {"/etc/passwd"}, {"/"}} {
		_, err := b.Start(context.Background(), Spec{Argv: argv, Dir: "/", Env: testEnv})
		if err == nil {
			t.Errorf("%v: started", argv)
		}
	}
}

func TestLocalChildIsInItsOwnProcessGroup(t *testing.T) {
	p := startLocal(t, NewLocalBackend(), Spec{Argv: []string{"/bin/sh", "-c", "ps -o pgid= -p $$; echo $$"}})
	out := strings.Fields(output(collect(t, p), ""))
	if len(out) != 2 || out[0] != out[1] {
		t.Fatalf("pgid/pid %v: child must lead its own group", out)
	}
	if out[0] == strconv.Itoa(syscall.Getpgrp()) {
		t.Fatal("child shares the executor's group")
	}
}

func TestLocalStdinQueueRefusesWhenFull(t *testing.T) {
	b := NewLocalBackend()
	b.StdinQueueWrites = 2
	b.StdinQueueBytes = 1 << 20
	// sleep never reads stdin: after the pipe fills, writes queue up.
	p := startLocal(t, b, Spec{Argv: []string{"sleep", "60"}, PipeStdin: true})
	big := make([]byte, 256<<10)
	var full bool
	for i := 0; i < 10; i++ {
		_, err := p.Write(big, "", false)
		if err == ErrStdinQueueFull {
			full = true
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if !full {
		t.Fatal("stdin queue never reported full")
	}
}
