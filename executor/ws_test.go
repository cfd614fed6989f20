package executor

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/zap/zaptest"

	"github.com/outpost-exec/outpost/engine"
	"github.com/outpost-exec/outpost/protocol"
)

// recordingBackend remembers the processes it started, so tests can
// watch them directly.
type recordingBackend struct {
	engine.Backend
	mu      sync.Mutex
	started []engine.Process
}

func (b *recordingBackend) Start(ctx context.Context, spec engine.Spec) (engine.Process, error) {
	p, err := b.Backend.Start(ctx, spec)
	if err == nil {
		b.mu.Lock()
		b.started = append(b.started, p)
		b.mu.Unlock()
	}
	return p, err
}

func (b *recordingBackend) last(t *testing.T) engine.Process {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.started) == 0 {
		t.Fatal("no process started")
	}
	return b.started[len(b.started)-1]
}

type testServer struct {
	srv     *Server
	url     string
	backend *recordingBackend
}

func newTestServer(t *testing.T, tweak func(*Config), opts WSConfig) *testServer {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Logger = zaptest.NewLogger(t)
	cfg.DefaultCwd = t.TempDir()
	rb := &recordingBackend{Backend: engine.NewLocalBackend()}
	cfg.Backend = rb
	if tweak != nil {
		tweak(&cfg)
		if cfg.Backend != rb {
			rb.Backend = cfg.Backend
			cfg.Backend = rb
		}
	}
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := srv.ListenWS("127.0.0.1:0", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		l.Close()
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return &testServer{srv: srv, url: l.URL(), backend: rb}
}

// rawClient speaks JSON text frames, so tests see the exact wire.
type rawClient struct {
	t     *testing.T
	c     *websocket.Conn
	notes []map[string]any // notifications received while waiting for replies
}

func dialRaw(t *testing.T, url string, hdr http.Header) *rawClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: hdr})
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadLimit(-1)
	t.Cleanup(func() { c.CloseNow() })
	return &rawClient{t: t, c: c}
}

func (r *rawClient) sendRaw(typ websocket.MessageType, s string) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := r.c.Write(ctx, typ, []byte(s)); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rawClient) send(v any) {
	r.t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		r.t.Fatal(err)
	}
	r.sendRaw(websocket.MessageText, string(b))
}

func (r *rawClient) recv() map[string]any {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	typ, b, err := r.c.Read(ctx)
	if err != nil {
		r.t.Fatalf("read: %v", err)
	}
	if typ != websocket.MessageText {
		r.t.Fatalf("server sent a %v frame, want text", typ)
	}
	if _, ok := any(b).([]byte); ok && strings.Contains(string(b), `"jsonrpc"`) {
		r.t.Fatalf("server sent a jsonrpc member: %s", b)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		r.t.Fatalf("bad JSON from server: %s", b)
	}
	return m
}

// reply reads until the response with id arrives; notifications on the
// way are kept in r.notes.
func (r *rawClient) reply(id any) map[string]any {
	r.t.Helper()
	want, _ := json.Marshal(id)
	for {
		m := r.recv()
		if _, isNote := m["method"]; isNote {
			r.notes = append(r.notes, m)
			continue
		}
		got, _ := json.Marshal(m["id"])
		if string(got) == string(want) {
			return m
		}
		r.t.Fatalf("reply for id %s while waiting for %s: %v", got, want, m)
	}
}

var nextID = struct {
	sync.Mutex
	n int
}{}

func newID() int {
	nextID.Lock()
	defer nextID.Unlock()
	nextID.n++
	return nextID.n
}

func (r *rawClient) call(method string, params any) map[string]any {
	r.t.Helper()
	id := newID()
	msg := map[string]any{"id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	r.send(msg)
	return r.reply(id)
}

func (r *rawClient) result(method string, params any) map[string]any {
	r.t.Helper()
	m := r.call(method, params)
	if e, ok := m["error"]; ok {
		r.t.Fatalf("%s: error %v", method, e)
	}
	res, _ := m["result"].(map[string]any)
	return res
}

func (r *rawClient) wantError(m map[string]any, code int, substr string) {
	r.t.Helper()
	e, ok := m["error"].(map[string]any)
	if !ok {
		r.t.Fatalf("want error %d %q, got %v", code, substr, m)
	}
	if int(e["code"].(float64)) != code || !strings.Contains(e["message"].(string), substr) {
		r.t.Fatalf("error %v, want code %d containing %q", e, code, substr)
	}
}

func (r *rawClient) init() string {
	r.t.Helper()
	res := r.result("initialize", map[string]any{"clientName": "test"})
	r.send(map[string]any{"method": "initialized", "params": map[string]any{}})
	return res["sessionId"].(string)
}

// note returns the next notification, from r.notes first.
func (r *rawClient) note() map[string]any {
	r.t.Helper()
	if len(r.notes) > 0 {
		m := r.notes[0]
		r.notes = r.notes[1:]
		return m
	}
	for {
		m := r.recv()
		if _, ok := m["method"]; ok {
			return m
		}
		r.t.Fatalf("unexpected reply %v", m)
	}
}

// untilClosed collects pid's notifications until its process/closed;
// other processes' notifications are kept for later.
func (r *rawClient) untilClosed(pid string) []map[string]any {
	r.t.Helper()
	var mine, others []map[string]any
	defer func() { r.notes = append(others, r.notes...) }()
	for {
		m := r.note()
		if params(m)["processId"] != pid {
			others = append(others, m)
			continue
		}
		mine = append(mine, m)
		if m["method"] == "process/closed" {
			return mine
		}
	}
}

func params(m map[string]any) map[string]any {
	p, _ := m["params"].(map[string]any)
	return p
}

func decodedOutput(notes []map[string]any) string {
	var b strings.Builder
	for _, m := range notes {
		if m["method"] == "process/output" {
			data, _ := base64.StdEncoding.DecodeString(params(m)["chunk"].(string))
			b.Write(data)
		}
	}
	return b.String()
}

func startParams(pid string, argv ...string) map[string]any {
	return map[string]any{"processId": pid, "argv": argv, "cwd": "file:///tmp", "env": map[string]string{"PATH": "/usr/bin:/bin"}, "tty": false}
}

func TestWSStartStreamsOutputExitedClosedInSeqOrderAfterTheReply(t *testing.T) {
	ts := newTestServer(t, nil, WSConfig{})
	r := dialRaw(t, ts.url, nil)
	r.init()
	id := newID()
	r.send(map[string]any{"id": id, "method": "process/start", "params": startParams("p1", "/bin/sh", "-c", "printf out; sleep 0.05; printf err >&2; exit 7")})
	first := r.recv()
	if first["method"] != nil {
		t.Fatalf("a notification overtook the start reply: %v", first)
	}
	if res := first["result"].(map[string]any); res["processId"] != "p1" {
		t.Fatalf("start reply %v", first)
	}
	notes := r.untilClosed("p1")
	var got []string
	for _, m := range notes {
		p := params(m)
		s := fmt.Sprintf("%s/%v", m["method"], p["seq"])
		switch m["method"] {
		case "process/output":
			data, _ := base64.StdEncoding.DecodeString(p["chunk"].(string))
			s += "/" + p["stream"].(string) + "/" + string(data)
		case "process/exited":
			s += fmt.Sprintf("/%v/%v", p["exitCode"], p["sandboxDenied"])
		}
		got = append(got, s)
	}
	want := []string{"process/output/1/stdout/out", "process/output/2/stderr/err", "process/exited/3/7/false", "process/closed/4"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("events\n got %v\nwant %v", got, want)
	}
	res := r.result("process/read", map[string]any{"processId": "p1", "afterSeq": 0})
	if res["nextSeq"].(float64) != 5 || res["closed"] != true || res["exitCode"].(float64) != 7 || len(res["chunks"].([]any)) != 2 {
		t.Fatalf("read after close: %v", res)
	}
}

func TestWSMalformedJSONAnswersIDMinusOneAndKeepsRunning(t *testing.T) {
	ts := newTestServer(t, nil, WSConfig{})
	r := dialRaw(t, ts.url, nil)
	for _, bad := range []string{`{"id":42,"method":`, `not json`, `[1,2]`, `{"id":1,"id":2,"method":"initialize"}`, `{"id":45}`, `{"id":1.5,"method":"x"}`} {
		r.sendRaw(websocket.MessageText, bad)
		m := r.recv()
		if m["id"].(float64) != -1 {
			t.Fatalf("%s: reply %v, want id -1", bad, m)
		}
		r.wantError(m, protocol.CodeInvalidRequest, "failed to parse JSON-RPC message")
	}
	if sid := r.init(); len(sid) != 36 {
		t.Fatalf("session id %q is not a UUID", sid)
	}
}

func TestWSAcceptsBinaryFramesAndStringIDs(t *testing.T) {
	ts := newTestServer(t, nil, WSConfig{})
	r := dialRaw(t, ts.url, nil)
	r.sendRaw(websocket.MessageBinary, `{"id":"abc","method":"initialize","params":{"clientName":"x"},"jsonrpc":"2.0"}`)
	m := r.reply("abc")
	if _, ok := m["result"].(map[string]any)["sessionId"]; !ok {
		t.Fatalf("%v", m)
	}
}

func TestWSRefusesUpgradeWithOrigin(t *testing.T) {
	ts := newTestServer(t, nil, WSConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	for _, origin := range []string{"http://127.0.0.1", "null", "https://evil.example"} {
		_, resp, err := websocket.Dial(ctx, ts.url, &websocket.DialOptions{HTTPHeader: http.Header{"Origin": {origin}}})
		if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
			t.Fatalf("origin %q: err %v resp %v, want 403", origin, err, resp)
		}
	}
}

func TestWSTokenGatesUpgradeButNotReadyz(t *testing.T) {
	ts := newTestServer(t, nil, WSConfig{Token: "s3cret"})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	for _, auth := range []string{"", "Bearer wrong", "Basic s3cret", "Bearer s3cret2", "Bearer s3cre"} {
		h := http.Header{}
		if auth != "" {
			h.Set("Authorization", auth)
		}
		_, resp, err := websocket.Dial(ctx, ts.url, &websocket.DialOptions{HTTPHeader: h})
		if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("auth %q: err %v, want 401", auth, err)
		}
	}
	r := dialRaw(t, ts.url, http.Header{"Authorization": {"Bearer s3cret"}})
	r.init()
	// The scheme in any case, as codex 0.171's server takes it.
	dialRaw(t, ts.url, http.Header{"Authorization": {"bearer s3cret"}}).init()
	resp, err := http.Get("http" + strings.TrimPrefix(ts.url, "ws") + "/readyz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("readyz: %v %v", resp, err)
	}
	resp.Body.Close()
}

func TestWSLifecycleErrors(t *testing.T) {
	ts := newTestServer(t, nil, WSConfig{})
	r := dialRaw(t, ts.url, nil)
	r.wantError(r.call("process/read", map[string]any{"processId": "x"}), protocol.CodeInvalidRequest, "client must call initialize before using exec methods")
	r.wantError(r.call("environment/info", nil), protocol.CodeInvalidRequest, "client must call initialize before using environment info methods")
	// A failed initialize does not count: the client may retry.
	r.wantError(r.call("initialize", map[string]any{"clientName": "x", "resumeSessionId": "00000000-0000-4000-8000-000000000000"}), protocol.CodeInvalidRequest, "unknown session id 00000000-0000-4000-8000-000000000000")
	r.result("initialize", map[string]any{"clientName": "x"})
	r.wantError(r.call("process/read", map[string]any{"processId": "x"}), protocol.CodeInvalidRequest, "client must send initialized before using exec methods")
	r.wantError(r.call("initialize", map[string]any{"clientName": "x"}), protocol.CodeInvalidRequest, "initialize may only be sent once per connection")
	r.send(map[string]any{"method": "initialized", "params": map[string]any{}})
	info := r.result("environment/info", nil)
	if info["shell"] == nil || !strings.HasPrefix(info["cwd"].(string), "file:///") {
		t.Fatalf("environment/info %v", info)
	}
}

func TestWSUnknownMethodAndNotification(t *testing.T) {
	ts := newTestServer(t, nil, WSConfig{})
	r := dialRaw(t, ts.url, nil)
	r.wantError(r.call("foo/bar", nil), protocol.CodeMethodNotFound, "foo/bar")
	r.init()
	r.wantError(r.call("fs/nope", map[string]any{"path": "file:///etc/hostname"}), protocol.CodeMethodNotFound, "fs/nope")
	r.send(map[string]any{"method": "foo/notify", "params": map[string]any{}})
	m := r.recv()
	if m["id"].(float64) != -1 {
		t.Fatalf("%v", m)
	}
	r.wantError(m, protocol.CodeMethodNotFound, "foo/notify")
	r.send(map[string]any{"id": 77, "result": map[string]any{}})
	r.wantError(r.recv(), protocol.CodeInvalidRequest, "unexpected response")
	r.result("environment/info", nil) // still usable
}

func TestWSBadParamsNameTheField(t *testing.T) {
	ts := newTestServer(t, nil, WSConfig{})
	r := dialRaw(t, ts.url, nil)
	r.init()
	cases := []struct {
		method string
		params any
		substr string
	}{
		{"process/start", nil, "params are required"},
		{"process/start", map[string]any{"processId": "p", "argv": 5}, "argv"},
		{"process/start", map[string]any{"processId": "p", "argv": []string{}}, "argv must not be empty"},
		{"process/start", map[string]any{"processId": "", "argv": []string{"true"}}, "processId must not be empty"},
		{"process/start", map[string]any{"processId": "p", "argv": []string{"true"}, "tty": "yes"}, "tty"},
		{"process/start", map[string]any{"processId": "p", "argv": []string{"true"}, "env": map[string]any{"A": 1}}, "env"},
		{"process/start", map[string]any{"processId": "p", "argv": []string{"true"}, "cwd": "file:///C:/Users"}, "is not valid on this exec-server host"},
		{"process/start", map[string]any{"processId": "p", "argv": []string{"true"}, "cwd": "file:///nonexistent-dir"}, "nonexistent-dir"},
		{"process/start", map[string]any{"processId": "p", "argv": []string{"a\x00b"}}, "NUL"},
		{"process/start", map[string]any{"processId": "p", "argv": []string{"true"}, "envPolicy": map[string]any{"inherit": "most"}}, "inherit"},
		{"process/read", map[string]any{"processId": "p", "afterSeq": -1}, "afterSeq"},
		{"process/read", map[string]any{}, "processId is required"},
		{"process/write", map[string]any{"processId": "p", "chunk": "!!notbase64"}, "chunk"},
		{"process/write", map[string]any{"processId": "p", "chunk": "", "writeId": ""}, "writeId must not be empty"},
		{"process/signal", map[string]any{"processId": "p", "signal": "explode"}, "unknown signal"},
		{"process/resize", map[string]any{"processId": "p", "rows": 0, "cols": 80}, "rows and cols"},
	}
	for _, c := range cases {
		r.wantError(r.call(c.method, c.params), protocol.CodeInvalidParams, c.substr)
	}
}

func TestWSSandboxRequestIsRefusedNotIgnored(t *testing.T) {
	ts := newTestServer(t, nil, WSConfig{})
	r := dialRaw(t, ts.url, nil)
	r.init()
	p := startParams("p", "true")
	p["sandbox"] = map[string]any{"mode": "no-such-mode"}
	r.wantError(r.call("process/start", p), protocol.CodeInvalidParams, "unknown sandbox mode")
	p = startParams("p", "true")
	p["enforceManagedNetwork"] = true
	r.wantError(r.call("process/start", p), protocol.CodeInvalidRequest, "managed network")
}

func TestWSProcessErrorsAndStatuses(t *testing.T) {
	ts := newTestServer(t, nil, WSConfig{})
	r := dialRaw(t, ts.url, nil)
	r.init()
	r.wantError(r.call("process/read", map[string]any{"processId": "nope"}), protocol.CodeInvalidRequest, "unknown process id nope")
	if st := r.result("process/write", map[string]any{"processId": "nope", "chunk": "", "writeId": "w"}); st["status"] != "unknownProcess" {
		t.Fatalf("%v", st)
	}
	if res := r.result("process/signal", map[string]any{"processId": "nope", "signal": "interrupt"}); len(res) != 0 {
		t.Fatalf("signal to unknown process: %v", res)
	}
	if res := r.result("process/terminate", map[string]any{"processId": "nope"}); res["running"] != false {
		t.Fatalf("%v", res)
	}
	r.result("process/start", startParams("s", "sleep", "60"))
	if st := r.result("process/write", map[string]any{"processId": "s", "chunk": "aGkK", "writeId": "w"}); st["status"] != "stdinClosed" {
		t.Fatalf("write without pipeStdin: %v", st)
	}
	r.wantError(r.call("process/resize", map[string]any{"processId": "s", "rows": 10, "cols": 10}), protocol.CodeInvalidRequest, "is not a tty")
	r.wantError(r.call("process/start", startParams("s", "true")), protocol.CodeInvalidRequest, "process s already exists")
	r.wantError(r.call("process/start", startParams("x", "/nonexistent/bin")), protocol.CodeInternal, "/nonexistent/bin")
	r.wantError(r.call("process/read", map[string]any{"processId": "x"}), protocol.CodeInvalidRequest, "unknown process id x")
	if res := r.result("process/terminate", map[string]any{"processId": "s"}); res["running"] != true {
		t.Fatalf("%v", res)
	}
	notes := r.untilClosed("s")
	exited := notes[len(notes)-2]
	if params(exited)["exitCode"].(float64) != 128+15 {
		t.Fatalf("terminated process exit %v, want 143", exited)
	}
	if res := r.result("process/terminate", map[string]any{"processId": "s"}); res["running"] != false {
		t.Fatalf("terminate after exit: %v", res)
	}
}

func TestWSWriteCloseStdinAndResizeOverTheWire(t *testing.T) {
	ts := newTestServer(t, nil, WSConfig{})
	r := dialRaw(t, ts.url, nil)
	r.init()
	p := startParams("cat", "cat")
	p["pipeStdin"] = true
	r.result("process/start", p)
	chunk := base64.StdEncoding.EncodeToString([]byte("hello"))
	for i := 0; i < 2; i++ { // the retry is de-duplicated
		if st := r.result("process/write", map[string]any{"processId": "cat", "chunk": chunk, "writeId": "w1"}); st["status"] != "accepted" {
			t.Fatalf("%v", st)
		}
	}
	r.result("process/write", map[string]any{"processId": "cat", "chunk": "", "writeId": "w2", "closeStdin": true})
	if got := decodedOutput(r.untilClosed("cat")); got != "hello" {
		t.Fatalf("cat output %q", got)
	}

	p = startParams("tty", "/bin/sh", "-c", `trap 'stty size; exit 0' WINCH; echo ready; while :; do sleep 0.01; done`)
	p["tty"] = true
	r.result("process/start", p)
	for !strings.Contains(decodedOutput(r.notes), "ready") {
		r.notes = append(r.notes, r.note())
	}
	r.result("process/resize", map[string]any{"processId": "tty", "rows": 33, "cols": 99})
	if got := decodedOutput(r.untilClosed("tty")); !strings.Contains(got, "33 99") {
		t.Fatalf("tty output %q", got)
	}
}

func TestWSLongPollDoesNotBlockOtherRequests(t *testing.T) {
	ts := newTestServer(t, nil, WSConfig{})
	r := dialRaw(t, ts.url, nil)
	r.init()
	r.result("process/start", startParams("s", "sleep", "60"))
	readID := newID()
	r.send(map[string]any{"id": readID, "method": "process/read", "params": map[string]any{"processId": "s", "afterSeq": 0, "waitMs": 60000}})
	// The long poll is parked; this is answered meanwhile.
	r.result("environment/info", nil)
	// Terminating wakes the long poll, so the two replies may come in
	// either order.
	termID := newID()
	r.send(map[string]any{"id": termID, "method": "process/terminate", "params": map[string]any{"processId": "s"}})
	got := map[float64]map[string]any{}
	for len(got) < 2 {
		m := r.recv()
		if id, ok := m["id"].(float64); ok {
			got[id] = m
		}
	}
	if res := got[float64(readID)]["result"].(map[string]any); res["exited"] != true {
		t.Fatalf("long poll: %v", got[float64(readID)])
	}
	if res := got[float64(termID)]["result"].(map[string]any); res["running"] != true {
		t.Fatalf("terminate: %v", got[float64(termID)])
	}
}

func TestWSResumeReplaysOutputProducedWhileDetached(t *testing.T) {
	ts := newTestServer(t, nil, WSConfig{})
	dir := t.TempDir()
	gate := filepath.Join(dir, "gate")
	r1 := dialRaw(t, ts.url, nil)
	sid := r1.init()
	r1.result("process/start", startParams("p", "/bin/sh", "-c", "echo before; while [ ! -e "+gate+" ]; do sleep 0.01; done; echo during"))
	if n := r1.note(); decodedOutput([]map[string]any{n}) != "before\n" {
		t.Fatalf("first output %v", n)
	}
	r1.c.Close(websocket.StatusNormalClosure, "")
	proc := ts.backend.last(t)
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	<-proc.Log().Closed() // ran to completion while detached

	r2 := dialRaw(t, ts.url, nil)
	var res map[string]any
	// The first connection's detach may race with this resume.
	for deadline := time.Now().Add(testTimeout); ; {
		m := r2.call("initialize", map[string]any{"clientName": "x", "resumeSessionId": sid})
		if m["error"] == nil {
			res = m["result"].(map[string]any)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("resume: %v", m)
		}
		time.Sleep(time.Millisecond)
	}
	if res["sessionId"] != sid {
		t.Fatalf("resumed %v, want %s", res, sid)
	}
	r2.send(map[string]any{"method": "initialized"})
	rd := r2.result("process/read", map[string]any{"processId": "p", "afterSeq": 1})
	chunks := rd["chunks"].([]any)
	if len(chunks) != 1 || rd["closed"] != true {
		t.Fatalf("read after resume: %v", rd)
	}
	data, _ := base64.StdEncoding.DecodeString(chunks[0].(map[string]any)["chunk"].(string))
	if string(data) != "during\n" {
		t.Fatalf("replayed %q", data)
	}
}

func TestWSResumeWhileAttachedIsRefused(t *testing.T) {
	ts := newTestServer(t, nil, WSConfig{})
	r1 := dialRaw(t, ts.url, nil)
	sid := r1.init()
	r2 := dialRaw(t, ts.url, nil)
	r2.wantError(r2.call("initialize", map[string]any{"clientName": "x", "resumeSessionId": sid}), protocol.CodeSessionAlreadyAttached, "is already attached to another connection")
	r1.result("environment/info", nil) // the first connection is unaffected
}

func TestWSDetachedSessionExpiresAndItsProcessesAreKilled(t *testing.T) {
	ts := newTestServer(t, func(c *Config) { c.DetachedTTL = 20 * time.Millisecond }, WSConfig{})
	r := dialRaw(t, ts.url, nil)
	sid := r.init()
	r.result("process/start", startParams("s", "sleep", "60"))
	proc := ts.backend.last(t)
	r.c.Close(websocket.StatusNormalClosure, "")
	select {
	case <-proc.Log().Closed():
	case <-time.After(testTimeout):
		t.Fatal("process survived its session's TTL")
	}
	if snap := proc.Log().Snapshot(); snap.ExitCode != 128+9 {
		t.Fatalf("exit %d, want 137", snap.ExitCode)
	}
	r2 := dialRaw(t, ts.url, nil)
	r2.wantError(r2.call("initialize", map[string]any{"clientName": "x", "resumeSessionId": sid}), protocol.CodeInvalidRequest, "unknown session id")
}

func TestWSProcessLimitPerSession(t *testing.T) {
	ts := newTestServer(t, func(c *Config) { c.MaxProcessesPerSession = 2 }, WSConfig{})
	r := dialRaw(t, ts.url, nil)
	r.init()
	r.result("process/start", startParams("a", "sleep", "60"))
	r.result("process/start", startParams("b", "sleep", "60"))
	r.wantError(r.call("process/start", startParams("c", "sleep", "60")), protocol.CodeInvalidRequest, "too many processes in this session (limit 2")
}

// A client running many short commands is bounded by what runs, not by
// the closed processes still retained: a full table gives up the oldest
// closed process, and refuses only when every slot is running.
func TestWSFullProcessTableEvictsTheOldestClosedProcess(t *testing.T) {
	ts := newTestServer(t, func(c *Config) { c.MaxProcessesPerSession = 2 }, WSConfig{})
	r := dialRaw(t, ts.url, nil)
	r.init()
	r.result("process/start", startParams("a", "true"))
	r.untilClosed("a")
	r.result("process/start", startParams("b", "true"))
	r.untilClosed("b")
	r.result("process/start", startParams("c", "sleep", "60")) // evicts a
	r.wantError(r.call("process/read", map[string]any{"processId": "a"}), protocol.CodeInvalidRequest, "unknown process id a")
	r.result("process/read", map[string]any{"processId": "b"}) // still retained
	r.result("process/start", startParams("d", "sleep", "60")) // evicts b
	r.wantError(r.call("process/start", startParams("e", "sleep", "60")), protocol.CodeInvalidRequest, "too many processes in this session (limit 2 running")
}

func TestWSClosedProcessIsEvictedAndItsIDReusable(t *testing.T) {
	ts := newTestServer(t, func(c *Config) { c.ClosedRetention = 10 * time.Millisecond }, WSConfig{})
	r := dialRaw(t, ts.url, nil)
	r.init()
	r.result("process/start", startParams("p", "true"))
	r.untilClosed("p")
	for deadline := time.Now().Add(testTimeout); ; {
		m := r.call("process/start", startParams("p", "true"))
		if m["error"] == nil {
			break
		}
		r.wantError(m, protocol.CodeInvalidRequest, "already exists")
		if time.Now().After(deadline) {
			t.Fatal("closed process never evicted")
		}
		time.Sleep(2 * time.Millisecond)
	}
	r.untilClosed("p")
}

func TestWSOversizedMessageIsRefusedAndConnectionSurvives(t *testing.T) {
	ts := newTestServer(t, nil, WSConfig{MaxMessageBytes: 1 << 20})
	r := dialRaw(t, ts.url, nil)
	big := `{"id":1,"method":"initialize","params":{"clientName":"` + strings.Repeat("x", 1<<20) + `"}}`
	r.sendRaw(websocket.MessageText, big)
	m := r.recv()
	r.wantError(m, protocol.CodeInvalidRequest, "exceeds the size limit")
	r.init()
}

func TestWSFloodingProcessDoesNotDelayAnotherOrReplies(t *testing.T) {
	ts := newTestServer(t, nil, WSConfig{})
	r := dialRaw(t, ts.url, nil)
	r.init()
	r.result("process/start", startParams("flood", "head", "-c", "200000000", "/dev/zero"))
	// Wait until the flood is streaming.
	for r.note()["method"] != "process/output" {
	}
	r.result("process/start", startParams("quick", "echo", "hi"))
	notes := r.untilClosed("quick")
	if decodedOutput(notes) != "hi\n" {
		t.Fatalf("quick output %q", decodedOutput(notes))
	}
	for _, m := range r.notes {
		if m["method"] == "process/closed" {
			t.Fatal("the flood finished before the quick process could report")
		}
	}
	r.result("process/terminate", map[string]any{"processId": "flood"})
}

func TestWSSlowReaderLosesNothing(t *testing.T) {
	// Retention far below the output: only backpressure (not eviction)
	// can deliver every byte to a client that reads slowly.
	ts := newTestServer(t, func(c *Config) {
		lb := engine.NewLocalBackend()
		lb.Retention = engine.Retention{MaxBytes: 256 << 10, MaxChunks: 64}
		c.Backend = lb
	}, WSConfig{})
	r := dialRaw(t, ts.url, nil)
	r.init()
	const total = 16 << 20
	r.result("process/start", startParams("p", "/bin/sh", "-c", fmt.Sprintf("head -c %d /dev/urandom | tee /dev/stderr | sha256sum", total)))
	h := sha256.New()
	var n int
	var lastSeq float64
	var stdout strings.Builder
	for {
		m := r.note()
		p := params(m)
		if seq := p["seq"].(float64); seq != lastSeq+1 {
			t.Fatalf("seq %v after %v: events lost", seq, lastSeq)
		} else {
			lastSeq = seq
		}
		if m["method"] == "process/closed" {
			break
		}
		if m["method"] == "process/output" {
			data, _ := base64.StdEncoding.DecodeString(p["chunk"].(string))
			if p["stream"] == "stderr" {
				h.Write(data)
				n += len(data)
				if n%(1<<20) < len(data) {
					time.Sleep(time.Millisecond) // a slow consumer
				}
			} else {
				stdout.Write(data)
			}
		}
	}
	if n != total {
		t.Fatalf("received %d bytes, want %d", n, total)
	}
	if want := strings.Fields(stdout.String()); len(want) == 0 || want[0] != fmt.Sprintf("%x", h.Sum(nil)) {
		t.Fatalf("checksum mismatch: process says %q", stdout.String())
	}
}

func TestStdioServesInitializeAndProcesses(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Logger = zaptest.NewLogger(t)
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- srv.ServeStdio(context.Background(), inR, outW) }()
	dec := json.NewDecoder(outR)
	send := func(s string) {
		if _, err := inW.Write([]byte(s + "\n")); err != nil {
			t.Fatal(err)
		}
	}
	recv := func() map[string]any {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	send(`{"id":1,"method":"initialize","params":{"clientName":"stdio"}}`)
	if m := recv(); m["result"] == nil {
		t.Fatalf("%v", m)
	}
	send("")
	send(`{"method":"initialized"}`)
	send(`{"id":2,"method":"process/start","params":{"processId":"p","argv":["echo","over stdio"],"cwd":"file:///tmp","env":{},"tty":false}}`)
	var notes []map[string]any
	for {
		m := recv()
		if m["method"] != nil {
			notes = append(notes, m)
			if m["method"] == "process/closed" {
				break
			}
		}
	}
	if got := decodedOutput(notes); got != "over stdio\n" {
		t.Fatalf("output %q", got)
	}
	inW.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	outW.Close()
}

func TestShutdownTerminatesEveryProcess(t *testing.T) {
	ts := newTestServer(t, nil, WSConfig{})
	r := dialRaw(t, ts.url, nil)
	r.init()
	r.result("process/start", startParams("s", "sleep", "60"))
	proc := ts.backend.last(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := ts.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if snap := proc.Log().Snapshot(); !snap.Closed || snap.ExitCode != 128+15 {
		t.Fatalf("after shutdown: %+v", snap)
	}
	r2 := dialRaw(t, ts.url, nil)
	r2.wantError(r2.call("initialize", map[string]any{"clientName": "late"}), protocol.CodeInvalidRequest, "shutting down")
}
