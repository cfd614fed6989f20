package client

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/protocol"
)

// holdProxy forwards TCP connections to target; while up (or down) is
// held it swallows what the client (or the executor) sends, as a path
// dying under a request would, until cut closes every connection.
type holdProxy struct {
	ln       net.Listener
	up, down atomic.Bool
	mu       sync.Mutex
	conns    []net.Conn
}

func startHoldProxy(t *testing.T, target string) *holdProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holdProxy{ln: ln}
	t.Cleanup(func() { ln.Close(); p.cut() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go p.pipe(u, c, &p.up)
			go p.pipe(c, u, &p.down)
		}
	}()
	return p
}

func (p *holdProxy) pipe(dst, src net.Conn, hold *atomic.Bool) {
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !hold.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			dst.Close()
			return
		}
	}
}

func (p *holdProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// A connection that drops under process/start — before the executor
// answered — leaves the start settled on the resumed session, never run
// twice: when the start had arrived the process is found and is this
// one; when it was lost on the way it is sent again.
func TestAStartWhoseConnectionDropsRunsExactlyOnce(t *testing.T) {
	ex := startExecutor(t, nil)
	for _, lost := range []bool{false, true} {
		p := startHoldProxy(t, strings.TrimPrefix(strings.Split(ex.url, "#")[0], "tcp://"))
		env := dial(t, "tcp://"+p.ln.Addr().String()+"#"+ex.key.PublicKey().Fingerprint(), Config{})
		marks := filepath.Join(t.TempDir(), "runs")
		if lost {
			p.up.Store(true) // the start never reaches the executor
		} else {
			p.down.Store(true) // the executor's answer never comes back
		}
		type result struct {
			proc *Process
			err  error
		}
		done := make(chan result, 1)
		go func() {
			proc, err := env.Start(ctxT(t), protocol.ExecParams{Argv: []string{"/bin/sh", "-c", "echo run >> " + marks + "; echo ran"}, Env: testEnv})
			done <- result{proc, err}
		}()
		if lost {
			time.Sleep(100 * time.Millisecond) // the start is on its way into the hold
		} else {
			waitFor(t, "the start to run", func() bool { _, err := os.Stat(marks); return err == nil })
		}
		p.up.Store(false)
		p.down.Store(false)
		p.cut()
		var r result
		select {
		case r = <-done:
		case <-time.After(testTimeout):
			t.Fatalf("lost=%v: the start never settled", lost)
		}
		if r.err != nil {
			t.Fatalf("lost=%v: start: %v", lost, r.err)
		}
		res, err := r.proc.Wait(ctxT(t))
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("lost=%v: wait: %+v %v", lost, res, err)
		}
		if b, _ := os.ReadFile(marks); string(b) != "run\n" {
			t.Fatalf("lost=%v: the command ran %d times", lost, strings.Count(string(b), "run"))
		}
		env.Close()
	}
}
