package executor

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/outpost-exec/outpost/engine"
	"github.com/outpost-exec/outpost/protocol"
)

func newTestSession(t *testing.T, b engine.Backend) (*Server, *Session) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Logger = zaptest.NewLogger(t)
	cfg.Backend = b
	cfg.DefaultCwd = t.TempDir()
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sess, err := srv.newSession()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return srv, sess
}

func TestDuplicateProcessIDsAllowOnlyOneSuccessfulStart(t *testing.T) {
	release := make(chan struct{})
	mb := &MockBackend{
		BeforeStart: func(ctx context.Context, spec engine.Spec) error { <-release; return nil },
		Script:      func(engine.Spec) []MockStep { return []MockStep{{AwaitSignal: true}} },
	}
	_, sess := newTestSession(t, mb)
	const n = 16
	var wg sync.WaitGroup
	var ok, dup atomic.Int32
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := sess.Start(context.Background(), protocol.ExecParams{ProcessID: "proc-1", Argv: []string{"x"}})
			var pe *protocol.Error
			switch {
			case err == nil:
				ok.Add(1)
			case errors.As(err, &pe) && pe.Code == protocol.CodeInvalidRequest && pe.Message == "process proc-1 already exists":
				dup.Add(1)
			default:
				t.Errorf("unexpected error %v", err)
			}
		}()
	}
	// Let the losers fail while the winner's start is held open.
	for dup.Load() < n-1 {
		runtime.Gosched()
	}
	close(release)
	wg.Wait()
	if ok.Load() != 1 || dup.Load() != n-1 {
		t.Fatalf("%d starts succeeded, %d were duplicates; want 1 and %d", ok.Load(), dup.Load(), n-1)
	}
	if got := len(mb.Started()); got != 1 {
		t.Fatalf("%d processes spawned", got)
	}
}

func TestTerminateDuringStartCancelsTheStart(t *testing.T) {
	entered := make(chan struct{})
	release := make(chan struct{})
	var first sync.Once
	mb := &MockBackend{
		BeforeStart: func(ctx context.Context, spec engine.Spec) error {
			first.Do(func() { close(entered); <-release })
			return nil
		},
		Script: func(engine.Spec) []MockStep { return []MockStep{{AwaitSignal: true}} },
	}
	_, sess := newTestSession(t, mb)
	errc := make(chan error, 1)
	go func() {
		_, err := sess.Start(context.Background(), protocol.ExecParams{ProcessID: "p", Argv: []string{"x"}})
		errc <- err
	}()
	<-entered
	if st, _ := sess.Write(protocol.WriteParams{ProcessID: "p", Chunk: []byte("x")}); st.Status != protocol.WriteStarting {
		t.Fatalf("write while starting: %v", st.Status)
	}
	if _, err := sess.Read(context.Background(), protocol.ReadParams{ProcessID: "p"}, nil); err == nil || err.Error() != "process id p is starting" {
		t.Fatalf("read while starting: %v", err)
	}
	if res := sess.Terminate(protocol.TerminateParams{ProcessID: "p"}); !res.Running {
		t.Fatal("terminate of a starting process reported not running")
	}
	close(release)
	err := <-errc
	if err == nil || err.Error() != "process p start was cancelled" {
		t.Fatalf("start: %v", err)
	}
	started := mb.Started()
	if len(started) != 1 {
		t.Fatalf("%d started", len(started))
	}
	select {
	case <-started[0].Log().Closed():
	case <-time.After(testTimeout):
		t.Fatal("the cancelled start's process was not killed")
	}
	// The id is free again.
	if _, err := sess.Start(context.Background(), protocol.ExecParams{ProcessID: "p", Argv: []string{"x"}}); err != nil {
		t.Fatal(err)
	}
}

func TestFailedStartRemovesOnlyItsOwnPlaceholder(t *testing.T) {
	// Start A fails; meanwhile a terminate removed A's placeholder and
	// start B took the id. A's failure must not remove B's entry.
	enteredA := make(chan struct{})
	releaseA := make(chan struct{})
	var calls atomic.Int32
	mb := &MockBackend{
		BeforeStart: func(ctx context.Context, spec engine.Spec) error {
			if calls.Add(1) == 1 {
				close(enteredA)
				<-releaseA
				return errors.New("spawn failed")
			}
			return nil
		},
		Script: func(engine.Spec) []MockStep { return []MockStep{{AwaitSignal: true}} },
	}
	_, sess := newTestSession(t, mb)
	errc := make(chan error, 1)
	go func() {
		_, err := sess.Start(context.Background(), protocol.ExecParams{ProcessID: "p", Argv: []string{"x"}})
		errc <- err
	}()
	<-enteredA
	sess.Terminate(protocol.TerminateParams{ProcessID: "p"})
	if _, err := sess.Start(context.Background(), protocol.ExecParams{ProcessID: "p", Argv: []string{"x"}}); err != nil {
		t.Fatal(err)
	}
	close(releaseA)
	if err := <-errc; err == nil {
		t.Fatal("failed start reported success")
	}
	if e := sess.lookup("p"); e == nil || e.proc == nil {
		t.Fatal("the failed start removed the other start's process")
	}
}

func TestMockBackendScriptsOutputStdinAndSignals(t *testing.T) {
	mb := &MockBackend{Script: func(spec engine.Spec) []MockStep {
		return []MockStep{
			{Output: []byte("hello\n")},
			{Output: []byte("oops\n"), Stream: protocol.StreamStderr},
			{EchoStdin: true},
			{AwaitSignal: true},
			{Exit: true, Code: 3},
			{Output: []byte("late\n")},
		}
	}}
	_, sess := newTestSession(t, mb)
	if _, err := sess.Start(context.Background(), protocol.ExecParams{ProcessID: "m", Argv: []string{"x"}, PipeStdin: true}); err != nil {
		t.Fatal(err)
	}
	id := "w1"
	if res, err := sess.Write(protocol.WriteParams{ProcessID: "m", Chunk: []byte("in\n"), WriteID: &id, CloseStdin: true}); err != nil || res.Status != protocol.WriteAccepted {
		t.Fatalf("write %v %v", res, err)
	}
	if err := sess.Signal(protocol.SignalParams{ProcessID: "m", Signal: "user1"}); err != nil {
		t.Fatal(err)
	}
	p := mb.Started()[0]
	evs := collect(t, p)
	if got := summarize(evs); got != "out(stdout,hello\n) out(stderr,oops\n) out(stdout,in\n) exited out(stdout,late\n) closed " {
		t.Fatalf("events %q", got)
	}
	if exitCode(t, evs) != 3 || string(p.Stdin()) != "in\n" || len(p.Signals()) != 1 || p.Signals()[0] != protocol.SignalUser1 {
		t.Fatalf("mock record: stdin %q signals %v", p.Stdin(), p.Signals())
	}
}

func TestSessionCapBoundsSessions(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxSessions = 2
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if _, err := srv.newSession(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := srv.newSession(); err == nil || err.Error() != "too many sessions on this executor (limit 2)" {
		t.Fatalf("third session: %v", err)
	}
}

func TestConfigValidationRejectsNonsense(t *testing.T) {
	for name, tweak := range map[string]func(*Config){
		"no backend": func(c *Config) { c.Backend = nil },
		"zero ttl":   func(c *Config) { c.DetachedTTL = 0 },
		"zero procs": func(c *Config) { c.MaxProcessesPerSession = 0 },
		"zero reads": func(c *Config) { c.MaxConcurrentReads = 0 },
		"tiny retain": func(c *Config) {
			c.Backend = &engine.LocalBackend{Retention: engine.Retention{MaxBytes: 1, MaxChunks: 1}}
		},
		"no sessions":  func(c *Config) { c.MaxSessions = 0 },
		"zero closing": func(c *Config) { c.ClosedRetention = 0 },
	} {
		cfg := DefaultConfig()
		tweak(&cfg)
		if _, err := NewServer(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestConnectionCloseLeaksNoGoroutines(t *testing.T) {
	ts := newTestServer(t, func(c *Config) { c.DetachedTTL = 10 * time.Millisecond }, WSConfig{})
	before := runtime.NumGoroutine()
	for i := 0; i < 5; i++ {
		r := dialRaw(t, ts.url, nil)
		r.init()
		r.result("process/start", startParams("p", "echo", "x"))
		r.untilClosed("p")
		r.result("process/start", startParams("long", "sleep", "60"))
		// Leave a long poll in flight and a process running.
		r.send(map[string]any{"id": 999, "method": "process/read", "params": map[string]any{"processId": "long", "waitMs": 60000}})
		r.c.CloseNow()
	}
	deadline := time.Now().Add(testTimeout)
	for {
		// Once the detached sessions expire and their processes are
		// killed, nothing of them may remain.
		n := runtime.NumGoroutine()
		if n <= before {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines before, %d after:\n%s", before, n, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type nopSink struct{}

func (nopSink) follow(string, string, engine.Process, uint64, bool) {}

func TestLongPollReadFailsAfterSessionResume(t *testing.T) {
	mb := &MockBackend{Script: func(engine.Spec) []MockStep { return []MockStep{{AwaitSignal: true}} }}
	_, sess := newTestSession(t, mb)
	old, err := sess.attach(nopSink{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sess.Start(context.Background(), protocol.ExecParams{ProcessID: "p", Argv: []string{"x"}}); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	wait := uint64(60000)
	go func() {
		_, err := sess.Read(context.Background(), protocol.ReadParams{ProcessID: "p", WaitMs: &wait}, old.ended)
		errc <- err
	}()
	// The transport drops, and a new connection resumes at once: the
	// resume must not wait for the old long poll, which fails.
	sess.detach(old)
	if _, err := sess.attach(nopSink{}); err != nil {
		t.Fatalf("resume blocked by the old connection: %v", err)
	}
	err = <-errc
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.Code != protocol.CodeInvalidRequest || pe.Message != "session has been resumed by another connection" {
		t.Fatalf("old long poll: %v", err)
	}
}
