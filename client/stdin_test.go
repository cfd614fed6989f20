package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/protocol"
)

// stdinSize is what the large-stdin tests send: four times the executor's
// stdin queue (StdinQueueBytes, 16 MiB), so the queue fills many times.
const stdinSize = 64 << 20

// patternReader yields n deterministic, non-repeating-looking bytes and
// hashes them as they go, so the test knows the digest without holding
// the data. after, if set, is called once every read with the running
// count (to cut connections mid-stream).
type patternReader struct {
	n, off int64
	h      interface {
		io.Writer
		Sum([]byte) []byte
	}
	after func(off int64)
}

func newPatternReader(n int64) *patternReader { return &patternReader{n: n, h: sha256.New()} }

func (r *patternReader) Read(b []byte) (int, error) {
	if r.off >= r.n {
		return 0, io.EOF
	}
	b = b[:min(int64(len(b)), r.n-r.off)]
	for i := range b {
		x := uint64(r.off + int64(i))
		b[i] = byte(x*0x9e3779b97f4a7c15>>56) ^ byte(x)
	}
	r.h.Write(b)
	r.off += int64(len(b))
	if r.after != nil {
		r.after(r.off)
	}
	return len(b), nil
}

func (r *patternReader) sum() string { return hex.EncodeToString(r.h.Sum(nil)) }

// relayEnv is an executor joined to a relay in this process, reached
// through the relay.
func relayEnv(t *testing.T) *Remote {
	t.Helper()
	relayURL, _, clientToken, _ := joinedRelay(t, "stdin-1", "stdin-*")
	return dial(t, relayURL, Config{Executor: "stdin-1", Token: clientToken})
}

// sha256Through runs sha256sum on env with r as its stdin and returns the
// digest it printed and the throughput in MB/s.
func sha256Through(t *testing.T, env Environment, r io.Reader) (string, float64) {
	t.Helper()
	cmd := CommandContext(ctxT(t), env, "sha256sum")
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	cmd.Stdin = r
	start := time.Now()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("sha256sum: %v (output %q)", err, out)
	}
	mbs := float64(stdinSize) / 1e6 / time.Since(start).Seconds()
	digest, _, _ := strings.Cut(string(out), " ")
	return digest, mbs
}

// 64 MiB through Cmd.Stdin reaches sha256sum whole, in order, once, and
// its stdin is closed after the last byte (or sha256sum would not print),
// on every way of reaching an executor.
func TestCmdStdinLargerThanTheQueueReachesTheCommandWhole(t *testing.T) {
	envs := map[string]func(t *testing.T) Environment{
		"in-process": func(t *testing.T) Environment { return localFiles(t, nil) },
		"direct":     func(t *testing.T) Environment { return dial(t, startExecutor(t, nil).url, Config{}) },
		"relay":      func(t *testing.T) Environment { return relayEnv(t) },
	}
	for _, name := range []string{"in-process", "direct", "relay"} {
		t.Run(name, func(t *testing.T) {
			in := newPatternReader(stdinSize)
			got, mbs := sha256Through(t, envs[name](t), in)
			if in.off != stdinSize {
				t.Fatalf("only %d of %d bytes were read from Stdin", in.off, stdinSize)
			}
			if want := in.sum(); got != want {
				t.Fatalf("sha256sum saw %s, want %s", got, want)
			}
			t.Logf("%s: 64 MiB of stdin at %.0f MB/s", name, mbs)
		})
	}
}

// Connections cut while stdin streams: the session resumes and every
// write is resent under its write id, so the command sees each byte once.
func TestCmdStdinSurvivesReconnectsWithoutLossOrDuplication(t *testing.T) {
	ex := startExecutor(t, nil)
	px := startProxy(t, ex.url[len("tcp://"):strings.Index(ex.url, "#")])
	env := dial(t, px.url(ex), Config{})
	in := newPatternReader(stdinSize)
	cuts := []int64{5 << 20, 21 << 20, 40 << 20, 63 << 20}
	in.after = func(off int64) {
		if len(cuts) > 0 && off >= cuts[0] {
			cuts = cuts[1:]
			px.cut()
		}
	}
	got, _ := sha256Through(t, env, in)
	if want := in.sum(); got != want {
		t.Fatalf("sha256sum saw %s, want %s", got, want)
	}
	if env.Reconnects() == 0 {
		t.Fatal("the connection was never cut: the test proved nothing")
	}
}

// stdinGoroutines counts goroutines inside the client's stdin writing.
func stdinGoroutines() int {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "client.(*Process).write") || strings.Contains(g, "client.(*Cmd).feedStdin") {
			n++
		}
	}
	return n
}

// startIdle starts a command that never reads its piped stdin.
func startIdle(t *testing.T, env Environment) *Process {
	t.Helper()
	p, err := env.Start(ctxT(t), protocol.ExecParams{Argv: []string{"sleep", "1000"}, Env: testEnv, PipeStdin: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Terminate(context.Background()) })
	return p
}

// fillStdin writes 64 KiB chunks to p from a goroutine until a write does
// not return; it reports the bytes accepted and the blocked write's
// outcome.
func fillStdin(ctx context.Context, p *Process) (accepted *atomic.Int64, result chan error) {
	accepted, result = new(atomic.Int64), make(chan error, 1)
	chunk := make([]byte, 64<<10)
	go func() {
		for {
			st, err := p.Write(ctx, chunk)
			if err != nil || st != protocol.WriteAccepted {
				if err == nil {
					err = errors.New(string(st))
				}
				result <- err
				return
			}
			accepted.Add(int64(len(chunk)))
		}
	}()
	return accepted, result
}

// A command that never reads: the writer waits (memory bounded by the
// executor's queue and the pipe), and is released when the command exits.
func TestProcessWriteWaitsForAnIdleCommandAndIsReleasedByItsExit(t *testing.T) {
	env := localEnv(t)
	p := startIdle(t, env)
	accepted, result := fillStdin(ctxT(t), p)
	waitFor(t, "a write to wait for room", func() bool { return p.stdinWaits.Load() > 0 })
	// Queue: 128 writes (StdinQueueWrites; 8 MiB of 64 KiB chunks, under
	// StdinQueueBytes); plus one being written and the pipe's capacity.
	if got, bound := accepted.Load(), int64(128+2)<<16+1<<20; got > bound {
		t.Fatalf("%d bytes accepted for a command that reads nothing; the bound is %d", got, bound)
	}
	select {
	case err := <-result:
		t.Fatalf("the write returned while the queue was full: %v", err)
	default:
	}
	if _, err := p.Terminate(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-result:
		if err.Error() != string(protocol.WriteStdinClosed) {
			t.Fatalf("blocked write after the exit: %v, want status %s", err, protocol.WriteStdinClosed)
		}
	case <-ctxT(t).Done():
		t.Fatal("the blocked write was not released by the command's exit")
	}
	waitFor(t, "the writer goroutines to end", func() bool { return stdinGoroutines() == 0 })
}

// The same, released by its context: a clear error wrapping ctx.Err().
func TestProcessWriteWaitingForRoomEndsWithItsContext(t *testing.T) {
	env := localEnv(t)
	p := startIdle(t, env)
	ctx, cancel := context.WithCancel(ctxT(t))
	_, result := fillStdin(ctx, p)
	waitFor(t, "a write to wait for room", func() bool { return p.stdinWaits.Load() > 0 })
	cancel()
	select {
	case err := <-result:
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "waiting for the command to read") {
			t.Fatalf("blocked write after cancel: %v", err)
		}
	case <-ctxT(t).Done():
		t.Fatal("the blocked write was not released by its context")
	}
	waitFor(t, "the writer goroutines to end", func() bool { return stdinGoroutines() == 0 })
}

// Cmd with an endless Stdin and a command that never reads: Wait returns
// when the command is killed, and the stdin feeder ends too.
func TestCmdStdinToAnIdleCommandEndsWithTheCommand(t *testing.T) {
	env := localEnv(t)
	cmd := Command(env, "sleep", "1000")
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	in := newPatternReader(1 << 62)
	cmd.Stdin = in
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the feeder to wait for room", func() bool { return cmd.Process.stdinWaits.Load() > 0 })
	if err := cmd.Process.Signal(ctxT(t), protocol.SignalKill); err != nil {
		t.Fatal(err)
	}
	var ee *ExitError
	if err := cmd.Wait(); !errors.As(err, &ee) {
		t.Fatalf("Wait: %v, want the kill's exit status", err)
	}
	waitFor(t, "the stdin feeder to end", func() bool { return stdinGoroutines() == 0 })
	select {
	case err := <-cmd.copyDone:
		if err != nil {
			t.Fatalf("feeder: %v (a command that stops reading is not a copy failure)", err)
		}
	default: // Wait took its report
	}
}

// Errors other than a full queue are not waited on: a write on a closed
// connection fails at once.
func TestProcessWriteSurfacesOtherErrors(t *testing.T) {
	ex := startExecutor(t, nil)
	env := dial(t, ex.url, Config{NoResume: true})
	p := startIdle(t, env)
	env.Close()
	if _, err := p.Write(ctxT(t), []byte("x")); err == nil {
		t.Fatal("a write on a closed client succeeded")
	}
	if n := p.stdinWaits.Load(); n != 0 {
		t.Fatalf("%d waits for a failure that waiting cannot cure", n)
	}
}

// The resend delay doubles from stdinRetryMin to stdinRetryMax and stays
// there.
func TestStdinRetryDelaySchedule(t *testing.T) {
	var got []time.Duration
	d := time.Duration(0)
	for range 8 {
		d = nextStdinDelay(d)
		got = append(got, d)
	}
	want := []time.Duration{1, 2, 4, 8, 16, 20, 20, 20}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("delays %v, want %v ms", got, want)
		}
	}
}
