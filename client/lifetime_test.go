package client

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/protocol"
)

// gateProxy forwards TCP connections to target. It can cut every
// connection, as a network failure would, and hold new ones at a gate
// (accepted, not yet forwarded) until they are let through.
type gateProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns []net.Conn
	gate  chan struct{} // non-nil: new connections wait for it to close
	held  chan struct{} // one value per connection that reached a closed gate
}

func startGateProxy(t *testing.T, target string) *gateProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &gateProxy{ln: ln, target: target, held: make(chan struct{}, 64)}
	t.Cleanup(func() { ln.Close(); p.open(); p.cut() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.forward(c)
		}
	}()
	return p
}

func (p *gateProxy) forward(c net.Conn) {
	p.mu.Lock()
	p.conns = append(p.conns, c)
	gate := p.gate
	p.mu.Unlock()
	if gate != nil {
		p.held <- struct{}{}
		<-gate
	}
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns = append(p.conns, u)
	p.mu.Unlock()
	pipe := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		dst.Close()
		src.Close()
	}
	go pipe(c, u)
	go pipe(u, c)
}

// close makes new connections wait at the gate.
func (p *gateProxy) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gate == nil {
		p.gate = make(chan struct{})
	}
}

// open lets the waiting connections, and new ones, through.
func (p *gateProxy) open() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gate != nil {
		close(p.gate)
		p.gate = nil
	}
}

// cut closes every connection forwarded so far.
func (p *gateProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *gateProxy) url(ex *testExecutor) string {
	return "tcp://" + p.ln.Addr().String() + "#" + ex.key.PublicKey().Fingerprint()
}

// readPid waits for a command to write its pid to path.
func readPid(t *testing.T, path string) int {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(path)
		if err == nil && strings.HasSuffix(string(b), "\n") {
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatal(err)
			}
			return pid
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the command never wrote its pid")
	return 0
}

// waitReaped waits until pid no longer exists (its parent, the executor,
// has reaped it).
func waitReaped(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for processExists(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d is still there", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A command killed by a signal while the client is disconnected: its exit
// reaches the client through the catch-up read after the resume, and must
// still say which signal killed it — Exec returns a *SignalError and the
// exit event carries the signal, as when it arrives pushed.
func TestSignalDeathWhileDetachedIsReportedAfterResume(t *testing.T) {
	ex := startExecutor(t, nil)
	px := startGateProxy(t, ex.ln.Addr().String())
	env := dial(t, px.url(ex), Config{RecoveryTimeout: 20 * time.Second})
	check := func(t *testing.T, run func(pidFile string) (exit Event, execErr error)) {
		// The previous case's recovery may still be under way: a retried
		// call waits for the connection before this case starts.
		if _, err := env.Info(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		pidFile := filepath.Join(t.TempDir(), "pid")
		type outcome struct {
			exit Event
			err  error
		}
		done := make(chan outcome, 1)
		go func() {
			exit, err := run(pidFile)
			done <- outcome{exit, err}
		}()
		pid := readPid(t, pidFile)
		// The command runs; let its start's answer arrive too (a start
		// cut off before its answer is failed, not resumed: the client
		// cannot know it ran). Under load the pid file can come first.
		waitStartAnswered(t, env)
		// Disconnect, and keep the client out while the command dies.
		px.close()
		px.cut()
		if err := killProcess(pid); err != nil {
			t.Fatal(err)
		}
		waitReaped(t, pid)
		time.Sleep(300 * time.Millisecond) // the executor logs the exit
		px.open()
		var o outcome
		select {
		case o = <-done:
		case <-time.After(testTimeout):
			t.Fatal("no outcome")
		}
		if o.exit.Kind != EventExited || o.exit.Signal != int32(syscall.SIGKILL) || o.exit.ExitCode != 128+int32(syscall.SIGKILL) {
			t.Errorf("exit event %+v, want signal 9 and exit code 137", o.exit)
		}
		if o.err != nil {
			var se *SignalError
			if !errors.As(o.err, &se) || se.Signal != int(syscall.SIGKILL) {
				t.Errorf("Exec: %v, want *SignalError with signal 9", o.err)
			}
		}
	}
	t.Run("Exec", func(t *testing.T) {
		check(t, func(pidFile string) (Event, error) {
			res, err := Exec(ctxT(t), env, ExecRequest{Argv: sh("echo $$ > " + pidFile + "; exec sleep 60"), Env: testEnv, Timeout: -1})
			if err == nil {
				err = errors.New("Exec returned no error")
			}
			return Event{Kind: EventExited, ExitCode: int32(res.ExitCode), Signal: int32(res.Signal)}, err
		})
	})
	t.Run("Wait", func(t *testing.T) {
		check(t, func(pidFile string) (Event, error) {
			p, err := env.Start(ctxT(t), protocol.ExecParams{Argv: sh("echo $$ > " + pidFile + "; exec sleep 60"), Env: testEnv})
			if err != nil {
				return Event{}, err
			}
			res, err := p.Wait(ctxT(t))
			return Event{Kind: EventExited, ExitCode: res.ExitCode, Signal: res.Signal}, err
		})
	})
	t.Run("Events", func(t *testing.T) {
		check(t, func(pidFile string) (Event, error) {
			p, err := env.Start(ctxT(t), protocol.ExecParams{Argv: sh("echo $$ > " + pidFile + "; exec sleep 60"), Env: testEnv})
			if err != nil {
				return Event{}, err
			}
			var exit Event
			for ev := range p.Events() {
				switch ev.Kind {
				case EventExited:
					exit = ev
				case EventFailed:
					return exit, ev.Err
				}
			}
			return exit, nil
		})
	})
}

// clientGoroutines counts the goroutines running the client's connection
// machinery: RPC readers, event stream acceptors, watchers and recoveries.
func clientGoroutines() int {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		for _, fn := range []string{"client.(*RPC).readLoop", "client.acceptEventStreams", "client.(*Remote).watch", "client.(*Remote).recover", "client.muxConn.func"} {
			if strings.Contains(g, "outpost/"+fn) {
				n++
				break
			}
		}
	}
	return n
}

// Close while the client is resuming a dropped connection: the resume
// must stop, and nothing of it may live on — no connection, no goroutine,
// and no hold on the executor's session (which another client can then
// resume).
func TestCloseDuringRecoveryLeavesNoConnectionBehind(t *testing.T) {
	ex := startExecutor(t, nil)
	px := startGateProxy(t, ex.ln.Addr().String())
	before := clientGoroutines()
	env := dial(t, px.url(ex), Config{RecoveryTimeout: 20 * time.Second})
	if _, err := env.Start(ctxT(t), protocol.ExecParams{Argv: []string{"sleep", "60"}, Env: testEnv}); err != nil {
		t.Fatal(err)
	}
	sid := env.SessionID()
	px.close()
	px.cut()
	select {
	case <-px.held: // the resume is dialling
	case <-time.After(testTimeout):
		t.Fatal("the client did not try to reconnect")
	}
	if err := env.Close(); err != nil {
		t.Logf("Close: %v", err)
	}
	px.open() // the resume's connection reaches the executor now

	deadline := time.Now().Add(3 * time.Second)
	for clientGoroutines() > before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := clientGoroutines(); n > before {
		t.Errorf("%d connection goroutines still run after Close (%d before Dial)", n, before)
	}
	env.mu.Lock()
	live := env.cur != nil
	env.mu.Unlock()
	if live {
		t.Error("the closed Remote holds a live connection")
	}

	// The session is free: another client resumes it (the executor refuses
	// a session still attached to a connection).
	other := dial(t, ex.url, Config{})
	var err error
	for time.Now().Before(deadline.Add(2 * time.Second)) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var c *conn
		c, _, err = other.connect(ctx, sid)
		cancel()
		if err == nil {
			c.close()
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Errorf("the session is still held after Close: resuming it: %v", err)
	}
}

// waitStartAnswered waits until a process of r has had its process/start
// answered.
func waitStartAnswered(t *testing.T, r *Remote) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		r.mu.Lock()
		answered := false
		for _, p := range r.procs {
			answered = answered || p.started.Load()
		}
		r.mu.Unlock()
		if answered {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("process/start was never answered")
		}
		time.Sleep(time.Millisecond)
	}
}
