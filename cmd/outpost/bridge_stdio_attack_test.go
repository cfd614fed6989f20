package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/internal/procgroup"
)

// Attacks on `outpost bridge --listen stdio`, the real binary against a
// real executor: whatever ends the connection (stdin closing, the
// executor going away, a signal), the bridge ends in bounded time, stops
// the processes it started, and writes nothing to stdout that is not one
// JSON-RPC message a line.

// stdioBridge is a running `outpost bridge --listen stdio`.
type stdioBridge struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan map[string]any // stdout, each line decoded; closed at EOF
	mu     sync.Mutex
	bad    []string // stdout lines that are not a JSON-RPC message
	stderr *bytes.Buffer
	exited chan struct{} // closed once the bridge has exited
	err    error         // its exit status, once exited
}

func startStdioBridge(t *testing.T, target string, extra ...string) *stdioBridge {
	t.Helper()
	cmd := exec.Command(outpostBin, append([]string{"bridge", "--target", target, "--listen", "stdio"}, extra...)...)
	cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+t.TempDir())
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	b := &stdioBridge{t: t, cmd: cmd, stdin: stdin, lines: make(chan map[string]any, 1024), stderr: &bytes.Buffer{}, exited: make(chan struct{})}
	cmd.Stderr = b.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); <-b.exited })
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		defer close(b.lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 80<<20)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil || (m["id"] == nil && m["method"] == nil) {
				b.mu.Lock()
				b.bad = append(b.bad, sc.Text())
				b.mu.Unlock()
				continue
			}
			b.lines <- m
		}
	}()
	go func() { <-scanned; b.err = cmd.Wait(); close(b.exited) }()
	return b
}

func (b *stdioBridge) send(s string) {
	b.t.Helper()
	if _, err := io.WriteString(b.stdin, s+"\n"); err != nil {
		b.t.Fatalf("write stdin: %v; stderr %s", err, b.stderr)
	}
}

// next is the next stdout message; ok is false at EOF.
func (b *stdioBridge) next() (map[string]any, bool) {
	b.t.Helper()
	select {
	case m, ok := <-b.lines:
		return m, ok
	case <-time.After(30 * time.Second):
		b.t.Fatalf("no stdout message in 30 s; stderr %s", b.stderr)
	}
	return nil, false
}

// reply reads until the reply with id; notifications on the way are
// returned too.
func (b *stdioBridge) reply(id float64) (map[string]any, []map[string]any) {
	b.t.Helper()
	var notes []map[string]any
	for {
		m, ok := b.next()
		if !ok {
			b.t.Fatalf("stdout ended waiting for reply %v; stderr %s", id, b.stderr)
		}
		if m["id"] == id {
			return m, notes
		}
		notes = append(notes, m)
	}
}

func (b *stdioBridge) initialize() {
	b.t.Helper()
	b.send(`{"id":1,"method":"initialize","params":{"clientName":"attack"}}`)
	if m, _ := b.reply(1); m["error"] != nil {
		b.t.Fatalf("initialize: %v", m)
	}
	b.send(`{"method":"initialized"}`)
}

// start starts a process and returns its pid.
func (b *stdioBridge) start(id float64, pid string, argv ...string) int {
	b.t.Helper()
	a, _ := json.Marshal(argv)
	b.send(fmt.Sprintf(`{"id":%v,"method":"process/start","params":{"processId":%q,"argv":%s,"cwd":"/","env":{"PATH":"/usr/bin:/bin"},"tty":false}}`, id, pid, a))
	m, _ := b.reply(id)
	res, _ := m["result"].(map[string]any)
	p, _ := res["pid"].(float64)
	if p == 0 {
		b.t.Fatalf("process/start: %v", m)
	}
	return int(p)
}

// waitExit waits for the bridge to exit, draining stdout, and requires
// that it wrote only JSON-RPC there.
func (b *stdioBridge) waitExit(within time.Duration) ([]map[string]any, error) {
	b.t.Helper()
	var rest []map[string]any
	deadline := time.After(within)
	for {
		select {
		case m, ok := <-b.lines:
			if ok {
				rest = append(rest, m)
				continue
			}
			b.lines = nil
		case <-b.exited:
			b.mu.Lock()
			defer b.mu.Unlock()
			if len(b.bad) > 0 {
				b.t.Errorf("stdout lines that are not JSON-RPC: %q", b.bad)
			}
			return rest, b.err
		case <-deadline:
			b.t.Fatalf("the bridge did not exit within %s; stderr %s", within, b.stderr)
		}
	}
}

func waitGone(t *testing.T, pid int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for procgroup.Alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still runs %s after the bridge ended", pid, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stdin closing with a process running and a long poll in flight ends
// the bridge, and the bridge stops the process on its way out (its
// session has no one to resume it).
func TestBridgeStdioAttackStdinClosesMidCall(t *testing.T) {
	target, _ := startServe(t, "--listen", "tcp://127.0.0.1:0", "--state-dir", t.TempDir())
	b := startStdioBridge(t, target)
	b.initialize()
	pid := b.start(2, "p", "sleep", "60")
	b.send(`{"id":3,"method":"process/read","params":{"processId":"p","afterSeq":99,"waitMs":60000}}`)
	time.Sleep(200 * time.Millisecond) // the long poll is upstream
	b.stdin.Close()
	if _, err := b.waitExit(20 * time.Second); err != nil {
		t.Fatalf("exit: %v; stderr %s", err, b.stderr)
	}
	waitGone(t, pid, 10*time.Second)
}

// stdin closing before initialize ends the bridge at once.
func TestBridgeStdioAttackStdinClosesBeforeInitialize(t *testing.T) {
	target, _ := startServe(t, "--listen", "tcp://127.0.0.1:0", "--state-dir", t.TempDir())
	b := startStdioBridge(t, target)
	b.stdin.Close()
	if rest, err := b.waitExit(20 * time.Second); err != nil || len(rest) != 0 {
		t.Fatalf("exit: %v, stdout %v; stderr %s", err, rest, b.stderr)
	}
}

// Garbage on stdin is answered on stdout as JSON-RPC errors and the
// session lives on; nothing but JSON-RPC reaches stdout.
func TestBridgeStdioAttackGarbageOnStdin(t *testing.T) {
	target, _ := startServe(t, "--listen", "tcp://127.0.0.1:0", "--state-dir", t.TempDir())
	b := startStdioBridge(t, target)
	b.initialize()
	for _, g := range []string{"not json", `{"id":`, "\x00\x01\x02", `[1,2,3]`, `{"id":{"x":1},"method":"fs/getMetadata"}`, strings.Repeat("[", 50000)} {
		b.send(g)
		m, ok := b.next()
		if !ok || m["error"] == nil {
			t.Fatalf("after %.20q: %v", g, m)
		}
	}
	b.send(`{"id":9,"method":"fs/getMetadata","params":{"path":"file:///"}}`)
	if m, _ := b.reply(9); m["error"] != nil {
		t.Fatalf("fs/getMetadata after the garbage: %v", m)
	}
	b.stdin.Close()
	if _, err := b.waitExit(20 * time.Second); err != nil {
		t.Fatalf("exit: %v", err)
	}
}

// The executor going away for good: the running process gets
// process/closed on stdout, and the bridge ends (codex sees stdout
// close) instead of waiting on a connection that will not come back.
func TestBridgeStdioAttackUpstreamLost(t *testing.T) {
	target, stop := startServe(t, "--listen", "tcp://127.0.0.1:0", "--state-dir", t.TempDir())
	b := startStdioBridge(t, target, "--reconnect-for", "1s")
	b.initialize()
	b.start(2, "p", "sleep", "60")
	stop()
	rest, err := b.waitExit(30 * time.Second)
	closed := false
	for _, m := range rest {
		if m["method"] == "process/closed" {
			closed = true
		}
	}
	if !closed {
		t.Errorf("no process/closed before the end: %v; stderr %s", rest, b.stderr)
	}
	_ = err // the exit status of a lost upstream is the bridge's to choose
}

// SIGTERM ends the bridge in bounded time and stops its processes.
func TestBridgeStdioAttackSignal(t *testing.T) {
	target, _ := startServe(t, "--listen", "tcp://127.0.0.1:0", "--state-dir", t.TempDir())
	b := startStdioBridge(t, target)
	b.initialize()
	pid := b.start(2, "p", "sleep", "60")
	b.cmd.Process.Signal(syscall.SIGTERM)
	if _, err := b.waitExit(20 * time.Second); err != nil {
		t.Fatalf("exit after SIGTERM: %v; stderr %s", err, b.stderr)
	}
	waitGone(t, pid, 10*time.Second)
}
