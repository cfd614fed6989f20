package bridge_test

// Attacks on the bridge's one front end: a codex client that never reads,
// an executor that floods notifications while codex is away, and a
// hostile executor that stalls or floods the bridge's upstream
// connection. Each must cost only its own session, and an ending session
// must still stop its processes.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/zap/zaptest"

	"github.com/outpost-exec/outpost/bridge"
	"github.com/outpost-exec/outpost/client"
	"github.com/outpost-exec/outpost/internal/procgroup"
	"github.com/outpost-exec/outpost/protocol"
)

// endlessBody serves a response body that never ends (until the request
// is cancelled): a streamed http/request through it floods
// http/request/bodyDelta notifications as fast as they can be sent.
func endlessBody(t *testing.T) string {
	t.Helper()
	stop := make(chan struct{})
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := []byte(strings.Repeat("x", 4096))
		for {
			select {
			case <-stop:
				return
			case <-r.Context().Done():
				return
			default:
			}
			if _, err := w.Write(chunk); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(func() { close(stop); web.CloseClientConnections(); web.Close() })
	return web.URL
}

// An expiring detached session terminates its processes on the executor
// even when the executor is flooding it with notifications nobody reads:
// the flood fills the session's queue and blocks the upstream
// connection's reader, which must not keep process/terminate's replies
// (and so the terminates after the first) from getting through.
func TestAttackNotificationFloodWhileDetachedStillTerminatesProcesses(t *testing.T) {
	up := direct(t, nil)
	// Long enough for the flood to fill every buffer on the way: the
	// executor's reply queue, the stream's window, the session's queue.
	b, url := startBridge(t, up, func(c *bridge.Config) { c.DetachedTTL = 4 * time.Second })
	web := endlessBody(t)
	c := dialCodex(t, url, nil)
	c.initialize("")
	var pids []int
	for _, id := range []string{"a", "b", "c"} {
		var res protocol.StartResult
		c.ok("process/start", startParams(id, "sleep", "60"), &res)
		pids = append(pids, res.Pid)
	}
	c.ok("http/request", map[string]any{"method": "GET", "url": web, "requestId": "flood", "streamResponse": true}, nil)
	c.ws.Close(websocket.StatusNormalClosure, "")
	waitFor(t, func() bool { return b.Stats().Sessions == 0 })
	// The bridge's terminates are bounded by 3 s; the executor's own
	// detached TTL (5 min) must not be what ends them.
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for procgroup.Alive(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("process %d outlived its expired bridge session (of %v)", pid, pids)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// A codex client that stops reading while its session floods holds its
// own session only: another codex connection on the same bridge is
// served, and Close still ends everything.
func TestAttackCodexThatNeverReadsHoldsOnlyItsOwnSession(t *testing.T) {
	up := direct(t, nil)
	b, url := startBridge(t, up, nil)
	web := endlessBody(t)

	ws, _, err := websocket.Dial(ctxT(t), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.CloseNow() })
	write := func(v any) {
		raw, _ := json.Marshal(v)
		if err := ws.Write(ctxT(t), websocket.MessageText, raw); err != nil {
			t.Fatal(err)
		}
	}
	write(map[string]any{"id": 1, "method": "initialize", "params": map[string]any{"clientName": "deaf"}})
	write(map[string]any{"method": "initialized"})
	write(map[string]any{"id": 2, "method": "http/request", "params": map[string]any{"method": "GET", "url": web, "requestId": "flood", "streamResponse": true}})
	write(map[string]any{"id": 3, "method": "process/start", "params": startParams("loud", "sh", "-c", "yes flood")})
	// Let both floods back up into the bridge.
	time.Sleep(time.Second)

	c := dialCodex(t, url, nil)
	c.initialize("")
	done := make(chan struct{})
	go func() {
		defer close(done)
		var meta map[string]any
		c.ok("fs/getMetadata", map[string]any{"path": "file:///"}, &meta)
		c.ok("process/start", startParams("quiet", "echo", "hi"), nil)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("a deaf codex connection held up another session")
	}
	if r := c.collect("quiet"); !strings.Contains(r.stdout.String(), "hi") {
		t.Fatalf("quiet: %q", r.stdout.String())
	}
	closed := make(chan struct{})
	go func() { b.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(20 * time.Second):
		t.Fatal("Close hung on a connection that never reads")
	}
}

// hostileExecutor is a codex exec-server over ws:// that answers
// initialize and then misbehaves as told; the bridge's upstream
// client.Remote speaks to it as to any ws:// executor.
type hostileExecutor struct {
	url string
	// stallInfo: environment/info is never answered on the first
	// connection.
	stallInfo bool
	conns     atomic.Int32
	mu        sync.Mutex
	seen      []string // methods received, in order
}

func startHostile(t *testing.T, h *hostileExecutor) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer ws.CloseNow()
		n := h.conns.Add(1)
		ctx := r.Context()
		for {
			_, data, err := ws.Read(ctx)
			if err != nil {
				return
			}
			var m struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
			}
			if json.Unmarshal(data, &m) != nil || m.ID == nil {
				continue
			}
			h.mu.Lock()
			h.seen = append(h.seen, m.Method)
			h.mu.Unlock()
			var result any = map[string]any{}
			switch m.Method {
			case "initialize":
				result = map[string]any{"sessionId": "hostile-" + string(rune('0'+n))}
			case "environment/info":
				if h.stallInfo && n == 1 {
					continue // never answered
				}
				result = map[string]any{"cwd": "file:///", "capabilities": map[string]any{}}
			}
			raw, _ := json.Marshal(map[string]any{"id": m.ID, "result": result})
			if ws.Write(ctx, websocket.MessageText, raw) != nil {
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	h.url = "ws" + strings.TrimPrefix(srv.URL, "http")
}

// An executor that never answers environment/info stalls only the
// initialize of the connection it serves: another codex connection
// initializes meanwhile, and Close does not wait for the stalled fetch.
func TestAttackStalledEnvironmentInfoStallsOnlyItsConnection(t *testing.T) {
	h := &hostileExecutor{stallInfo: true}
	startHostile(t, h)
	b, err := bridge.New(bridge.Config{Logger: zaptest.NewLogger(t), Dial: func(ctx context.Context, _ string) (*client.Remote, error) {
		return client.Dial(ctx, h.url, client.Config{NoResume: true})
	}})
	if err != nil {
		t.Fatal(err)
	}
	l, err := b.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(); b.Close() })

	stalled := dialCodex(t, l.URL(), nil)
	stalled.send(map[string]any{"id": 1, "method": "initialize", "params": map[string]any{"clientName": "first"}})
	waitFor(t, func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return strings.Contains(strings.Join(h.seen, ","), "environment/info")
	})

	other := dialCodex(t, l.URL(), nil)
	got := make(chan string, 1)
	go func() {
		var res struct {
			SessionID       string          `json:"sessionId"`
			EnvironmentInfo json.RawMessage `json:"environmentInfo"`
		}
		other.ok("initialize", map[string]any{"clientName": "second"}, &res)
		got <- string(res.EnvironmentInfo)
	}()
	select {
	case info := <-got:
		if !strings.Contains(info, `"cwd":"file:///"`) {
			t.Fatalf("second connection's environment info: %s", info)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a stalled environment/info on one connection held up another's initialize")
	}

	closed := make(chan struct{})
	go func() { l.Close(); b.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(20 * time.Second):
		t.Fatal("Close waited for a stalled environment/info")
	}
	select {
	case <-stalled.done:
	case <-time.After(testTimeout):
		t.Fatal("the stalled connection stayed open after Close")
	}
}

// Methods that must never reach the executor's table as codex sends
// them through the bridge: a codex/call smuggled by codex (it would nest),
// initialized sent as a request, and initialize a second time.
func TestAttackSmuggledMethodsAreRefused(t *testing.T) {
	up := direct(t, nil)
	_, url := startBridge(t, up, nil)
	c := dialCodex(t, url, nil)
	c.initialize("")
	if e := c.fails("codex/call", map[string]any{"method": "initialize", "params": []byte(`{}`)}); protocol.KindOf(e) == "" {
		t.Fatalf("codex/call through the bridge: %+v", e)
	}
	if e := c.fails("initialized", map[string]any{}); e.Code != protocol.CodeMethodNotFound {
		t.Fatalf("initialized as a request: %+v", e)
	}
	if e := c.fails("initialize", map[string]any{"clientName": "twice"}); e.Code != protocol.CodeInvalidRequest {
		t.Fatalf("second initialize: %+v", e)
	}
	// The session is unharmed.
	c.ok("fs/getMetadata", map[string]any{"path": "file:///"}, nil)
}

// stdioPeer is codex's end of a ServeStdio connection.
type stdioPeer struct {
	t   *testing.T
	in  io.WriteCloser // the bridge's stdin
	out *bufio.Scanner // the bridge's stdout
}

func (p *stdioPeer) send(s string) {
	p.t.Helper()
	if _, err := io.WriteString(p.in, s+"\n"); err != nil {
		p.t.Fatal(err)
	}
}

func (p *stdioPeer) next() map[string]any {
	p.t.Helper()
	if !p.out.Scan() {
		p.t.Fatalf("stdout ended: %v", p.out.Err())
	}
	var m map[string]any
	if err := json.Unmarshal(p.out.Bytes(), &m); err != nil {
		p.t.Fatalf("stdout line %q is not JSON", p.out.Text())
	}
	return m
}

func bridgeGoroutines() int {
	buf := make([]byte, 4<<20)
	return bytes.Count(buf[:runtime.Stack(buf, true)], []byte("outpost/bridge."))
}

// ServeStdio returns when its stdin ends, and the connection leaves no
// goroutine behind once the bridge is closed.
func TestAttackServeStdioEndsWithStdinAndLeaksNothing(t *testing.T) {
	up := direct(t, nil)
	b, _ := startBridge(t, up, nil)
	before := runtime.NumGoroutine()
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer outR.Close()
	served := make(chan error, 1)
	go func() { served <- b.ServeStdio(context.Background(), inR, outW) }()
	p := &stdioPeer{t: t, in: inW, out: bufio.NewScanner(outR)}
	p.send(`{"id":1,"method":"initialize","params":{"clientName":"stdio"}}`)
	if m := p.next(); m["result"] == nil {
		t.Fatalf("initialize: %v", m)
	}
	p.send(`{"method":"initialized"}`)
	p.send(`{"id":2,"method":"process/read","params":{"processId":"nope","waitMs":60000}}`)
	inW.Close()
	select {
	case err := <-served:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("ServeStdio did not return when stdin ended")
	}
	b.Close()
	waitFor(t, func() bool { return bridgeGoroutines() == 0 && runtime.NumGoroutine() <= before+2 })
}

// ServeStdio on a reader that cannot be closed (a bufio.Reader over
// stdin, say) still returns when the bridge closes, and Close does not
// wait forever for it.
func TestAttackServeStdioOnAnUnclosableReaderEndsWithClose(t *testing.T) {
	up := direct(t, nil)
	b, err := bridge.New(bridge.Config{Logger: zaptest.NewLogger(t), Dial: func(ctx context.Context, _ string) (*client.Remote, error) {
		return client.Dial(ctx, up.url, up.opts)
	}})
	if err != nil {
		t.Fatal(err)
	}
	inR, inW := io.Pipe()
	defer inW.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer outR.Close()
	served := make(chan error, 1)
	go func() { served <- b.ServeStdio(context.Background(), struct{ io.Reader }{inR}, outW) }()
	time.Sleep(100 * time.Millisecond) // reading stdin
	closed := make(chan struct{})
	go func() { b.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		inW.Close() // let the test end
		t.Fatal("Bridge.Close hung on a stdio connection whose reader cannot be closed")
	}
	select {
	case <-served:
	case <-time.After(10 * time.Second):
		t.Fatal("ServeStdio did not return after Close")
	}
}
