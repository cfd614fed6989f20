package conformance

// A wire tap between `codex exec` and an exec-server: a loopback websocket
// proxy that relays every message unchanged and records it. The codex CLI
// cases read the record (what codex asked the server, e.g. the argv of
// process/start); with OUTPOST_CODEX_CAPTURE=DIR set, each run's record is
// also written to DIR/<test name>.jsonl, one line per message
// ({"ms":…, "dir":"codex->server"|"server->codex", "msg":…}), to diagnose
// a difference between two servers by diffing two files.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// captureEnv names the directory wire captures are written to.
const captureEnv = "OUTPOST_CODEX_CAPTURE"

// faultsEnv lists methods (comma-separated) the taps answer themselves
// with "method not found" instead of passing them on: a server made
// deliberately worse, to see that the cases which should fail do.
const faultsEnv = "OUTPOST_CODEXCLI_FAULTS"

// maxTapMessages bounds what a tap keeps in memory: one `codex exec` turn
// of a test script sends a few hundred messages at most; past the bound
// the tap still relays but keeps no more (and says so in the file).
const maxTapMessages = 20000

// wireMsg is one message the tap relayed.
type wireMsg struct {
	MS   int64           `json:"ms"`  // since the tap started
	Dir  string          `json:"dir"` // "codex->server" or "server->codex"
	Conn int             `json:"conn"`
	Msg  json.RawMessage `json:"msg"`
}

const (
	toServer = "codex->server"
	toCodex  = "server->codex"
)

// wireTap is a running tap.
type wireTap struct {
	URL string // for CODEX_EXEC_SERVER_URL

	upstream string
	faults   map[string]bool // methods answered with method-not-found
	limit    int             // messages kept (maxTapMessages)
	start    time.Time
	ln       net.Listener
	srv      *http.Server
	wg       sync.WaitGroup

	mu      sync.Mutex
	msgs    []wireMsg
	dropped int
	conns   int
}

// startTap proxies a loopback port to the exec-server at upstream until
// the test ends; then it writes the capture file when captureEnv is set.
func startTap(t *testing.T, upstream string) *wireTap {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tap := &wireTap{URL: "ws://" + ln.Addr().String(), upstream: upstream, start: time.Now(), ln: ln, faults: map[string]bool{}, limit: maxTapMessages}
	for _, m := range strings.Split(os.Getenv(faultsEnv), ",") {
		if m = strings.TrimSpace(m); m != "" {
			tap.faults[m] = true
		}
	}
	tap.srv = &http.Server{Handler: http.HandlerFunc(tap.serve)}
	go tap.srv.Serve(ln)
	t.Cleanup(func() {
		tap.srv.Close()
		tap.wg.Wait()
		if dir := os.Getenv(captureEnv); dir != "" {
			if err := tap.write(dir, t.Name()); err != nil {
				t.Logf("wire capture: %v", err)
			}
		}
	})
	return tap
}

func (tap *wireTap) serve(w http.ResponseWriter, r *http.Request) {
	tap.wg.Add(1)
	defer tap.wg.Done()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	// codex's bearer token goes on to the server, and its refusal (a
	// 401) comes back as it is.
	opts := &websocket.DialOptions{HTTPHeader: http.Header{}}
	if a := r.Header.Values("Authorization"); len(a) > 0 {
		opts.HTTPHeader["Authorization"] = a
	}
	up, resp, err := websocket.Dial(ctx, tap.upstream, opts)
	if err != nil {
		code := http.StatusBadGateway
		if resp != nil && resp.StatusCode >= 400 {
			code = resp.StatusCode
		}
		http.Error(w, err.Error(), code)
		return
	}
	defer up.CloseNow()
	down, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer down.CloseNow()
	up.SetReadLimit(-1)
	down.SetReadLimit(-1)
	tap.mu.Lock()
	tap.conns++
	conn := tap.conns
	tap.mu.Unlock()

	pump := func(from, to *websocket.Conn, dir string) {
		defer cancel()
		for {
			typ, b, err := from.Read(ctx)
			if err != nil {
				// Pass a close on with its status, so codex sees what
				// the server said.
				to.Close(websocket.CloseStatus(err), "")
				return
			}
			tap.record(conn, dir, b)
			if reply := tap.fault(dir, b); reply != nil {
				tap.record(conn, toCodex, reply)
				if err := from.Write(ctx, websocket.MessageText, reply); err != nil {
					return
				}
				continue
			}
			if err := to.Write(ctx, typ, b); err != nil {
				return
			}
		}
	}
	go pump(up, down, toCodex)
	pump(down, up, toServer)
}

// fault returns the error reply to a request codex sent whose method is
// one of the tap's faults, or nil to pass the message on.
func (tap *wireTap) fault(dir string, b []byte) []byte {
	if dir != toServer || len(tap.faults) == 0 {
		return nil
	}
	var req struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	if json.Unmarshal(b, &req) != nil || len(req.ID) == 0 || !tap.faults[req.Method] {
		return nil
	}
	reply, _ := json.Marshal(map[string]any{"id": req.ID, "error": map[string]any{"code": -32601, "message": "method not found: " + req.Method}})
	return reply
}

func (tap *wireTap) record(conn int, dir string, b []byte) {
	m := wireMsg{MS: time.Since(tap.start).Milliseconds(), Dir: dir, Conn: conn}
	if json.Valid(b) {
		m.Msg = append(json.RawMessage(nil), b...)
	} else {
		m.Msg, _ = json.Marshal(fmt.Sprintf("non-JSON frame of %d bytes", len(b)))
	}
	tap.mu.Lock()
	defer tap.mu.Unlock()
	if len(tap.msgs) >= tap.limit {
		tap.dropped++
		return
	}
	tap.msgs = append(tap.msgs, m)
}

// Messages returns what the tap relayed so far, in order.
func (tap *wireTap) Messages() []wireMsg {
	tap.mu.Lock()
	defer tap.mu.Unlock()
	return append([]wireMsg(nil), tap.msgs...)
}

// Requests returns the params of every request or notification codex sent
// with method, in order.
func (tap *wireTap) Requests(method string) []map[string]any {
	var out []map[string]any
	for _, m := range tap.Messages() {
		if m.Dir != toServer {
			continue
		}
		var v struct {
			Method string         `json:"method"`
			Params map[string]any `json:"params"`
		}
		if json.Unmarshal(m.Msg, &v) == nil && v.Method == method {
			out = append(out, v.Params)
		}
	}
	return out
}

// Methods counts the methods codex called (requests and notifications).
func (tap *wireTap) Methods() map[string]int {
	n := map[string]int{}
	for _, m := range tap.Messages() {
		var v struct {
			Method string `json:"method"`
		}
		if m.Dir == toServer && json.Unmarshal(m.Msg, &v) == nil && v.Method != "" {
			n[v.Method]++
		}
	}
	return n
}

// write saves the record as DIR/<test name>.jsonl.
func (tap *wireTap) write(dir, name string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	for _, m := range tap.Messages() {
		enc.Encode(m)
	}
	tap.mu.Lock()
	if tap.dropped > 0 {
		fmt.Fprintf(&b, "{\"dropped\":%d}\n", tap.dropped)
	}
	tap.mu.Unlock()
	file := filepath.Join(dir, strings.NewReplacer("/", "__", " ", "_").Replace(name)+".jsonl")
	return os.WriteFile(file, []byte(b.String()), 0o644)
}
