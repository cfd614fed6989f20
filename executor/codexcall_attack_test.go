package executor

// Attacks on codex/call and codex/notification (protocol/codex.go) by an
// authenticated native client, over real Noise and the real multiplexer:
// a wrapped request must not skip the lifecycle, nest, smuggle initialize,
// or make the executor hold more than its bounds; and a flood of
// notifications must not starve process events.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/pathmap"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/transport"
)

// rawNative opens an authenticated native control stream and sends
// nothing: the test drives the lifecycle itself.
func rawNative(t *testing.T) (*floodFixture, *floodClient) {
	t.Helper()
	f := startFloodListener(t, "tcp://127.0.0.1:0", nil)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c := f.dialFrom(t, "")
	nc, err := transport.NoiseInitiator(ctx, c, transport.NoiseConfig{Static: floodKey(t), Purpose: NativePurpose, PeerStatic: f.key.Public})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := transport.MuxClient(nc, transport.DefaultMuxConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	st, err := sess.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	return f, &floodClient{sess: sess, mc: transport.NewMsgpackConn(st, 0)}
}

// codexCall sends a codex/call and returns the inner result as JSON, or
// the executor's error.
func (fc *floodClient) codexCall(t *testing.T, method string, params string) (json.RawMessage, *protocol.Error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var raw []byte
	if params != "" {
		raw = []byte(params)
	}
	var res protocol.CodexCallResult
	err := fc.call(ctx, protocol.MethodCodexCall, protocol.CodexCallParams{Method: method, Params: raw}, &res)
	if err == nil {
		return res.Result, nil
	}
	var pe *protocol.Error
	if !errors.As(err, &pe) {
		t.Fatalf("codex/call %s: %v (not a protocol error: the connection failed?)", method, err)
	}
	return nil, pe
}

func wantKind(t *testing.T, what string, pe *protocol.Error, kind protocol.Kind, substr string) {
	t.Helper()
	if pe == nil {
		t.Fatalf("%s: no error, want %s %q", what, kind, substr)
	}
	if protocol.KindOf(pe) != kind || !strings.Contains(pe.Message, substr) {
		t.Fatalf("%s: %v (kind %s), want kind %s containing %q", what, pe, protocol.KindOf(pe), kind, substr)
	}
}

// A wrapped request is judged by the lifecycle as the request it carries:
// before initialize and before initialized nothing runs (a wrapped
// fs/writeFile writes nothing), and a wrapped initialize neither opens a
// session nor spoils the real one.
func TestCodexCallAttackCannotSkipTheLifecycle(t *testing.T) {
	_, fc := rawNative(t)
	dir := t.TempDir()
	target := filepath.Join(dir, "written")
	write := fmt.Sprintf(`{"path":%q,"dataBase64":"aGk="}`, pathmap.URI(target))

	_, pe := fc.codexCall(t, protocol.MethodFsWriteFile, write)
	wantKind(t, "fs/writeFile before initialize", pe, protocol.KindInvalid, "must call initialize")
	_, pe = fc.codexCall(t, protocol.MethodInitialize, `{"clientName":"smuggled"}`)
	wantKind(t, "wrapped initialize", pe, protocol.KindInvalid, "cannot carry")
	_, pe = fc.codexCall(t, protocol.MethodCodexCall, `{"method":"fs/writeFile"}`)
	wantKind(t, "nested codex/call", pe, protocol.KindInvalid, "cannot carry")
	// initialized is a notification: wrapped as a request it is unknown,
	// and it does not move the lifecycle on.
	_, pe = fc.codexCall(t, protocol.MethodInitialized, `{}`)
	wantKind(t, "wrapped initialized", pe, protocol.KindUnsupported, "not implemented")
	if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused wrapped write ran: %v", err)
	}

	// The real initialize still works: the refusals left no initErr.
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var init protocol.InitializeResult
	if err := fc.call(ctx, protocol.MethodInitialize, protocol.InitializeParams{ClientName: "attack"}, &init); err != nil || init.SessionID == "" {
		t.Fatalf("initialize after wrapped refusals: %+v %v", init, err)
	}
	_, pe = fc.codexCall(t, protocol.MethodFsWriteFile, write)
	wantKind(t, "fs/writeFile before initialized", pe, protocol.KindInvalid, "must send initialized")
	_, pe = fc.codexCall(t, protocol.MethodInitialize, `{"clientName":"again"}`)
	wantKind(t, "wrapped initialize after initialize", pe, protocol.KindInvalid, "cannot carry")
	if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a wrapped write ran before initialized: %v", err)
	}
	if err := fc.mc.WriteNotification(ctx, protocol.MethodInitialized, protocol.Empty{}); err != nil {
		t.Fatal(err)
	}
	if res, pe := fc.codexCall(t, protocol.MethodFsWriteFile, write); pe != nil || string(res) != "{}" {
		t.Fatalf("fs/writeFile once ready: %s %v", res, pe)
	}
	if b, err := os.ReadFile(target); err != nil || string(b) != "hi" {
		t.Fatalf("written: %q %v", b, err)
	}
}

// Hostile inner JSON is refused with invalid-params errors and the
// connection lives on: too deep, too many values, duplicate keys,
// trailing data, not JSON at all, a method name that is not one.
func TestCodexCallAttackHostileInnerJSON(t *testing.T) {
	f, fc := rawNative(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var init protocol.InitializeResult
	if err := fc.call(ctx, protocol.MethodInitialize, protocol.InitializeParams{ClientName: "attack"}, &init); err != nil {
		t.Fatal(err)
	}
	fc.mc.WriteNotification(ctx, protocol.MethodInitialized, protocol.Empty{})
	path := pathmap.URI(filepath.Join(f.srv.cfg.DefaultCwd, "x"))

	deep := strings.Repeat("[", 20000) + strings.Repeat("]", 20000)
	var many strings.Builder
	many.WriteString(`{"path":"` + path + `","pad":[`)
	for i := range protocol.MaxJSONValues + 1 {
		if i > 0 {
			many.WriteByte(',')
		}
		many.WriteByte('0')
	}
	many.WriteString("]}")
	for _, c := range []struct{ name, params, substr string }{
		{"deep nesting", `{"path":"` + path + `","pad":` + deep + `}`, "nests deeper"},
		{"too many values", many.String(), "more than"},
		{"duplicate keys", `{"path":"` + path + `","path":"file:///etc/passwd"}`, "duplicate key"},
		{"trailing data", `{"path":"` + path + `"} {"path":"x"}`, "trailing data"},
		{"not JSON", "\x93\xa4msgp", "invalid"},
		{"truncated", `{"path":`, "invalid params"},
	} {
		_, pe := fc.codexCall(t, protocol.MethodFsGetMetadata, c.params)
		wantKind(t, c.name, pe, protocol.KindInvalid, c.substr)
	}
	_, pe := fc.codexCall(t, "", `{}`)
	wantKind(t, "empty method", pe, protocol.KindInvalid, "method is required")
	_, pe = fc.codexCall(t, "fs/getMetadata\x00", `{}`)
	wantKind(t, "method with NUL", pe, protocol.KindUnsupported, "not implemented")
	// Absent params are "params are required", not a crash.
	_, pe = fc.codexCall(t, protocol.MethodFsGetMetadata, "")
	wantKind(t, "absent params", pe, protocol.KindInvalid, "params are required")
	// A wrapped codex/call params object that is not the wrapper's shape.
	var res protocol.CodexCallResult
	err := fc.call(ctx, protocol.MethodCodexCall, map[string]any{"method": 7}, &res)
	var perr *protocol.Error
	if !errors.As(err, &perr) || protocol.KindOf(perr) != protocol.KindInvalid {
		t.Fatalf("codex/call with a numeric method: %v", err)
	}
	// Still serving.
	if res, pe := fc.codexCall(t, protocol.MethodEnvironmentInfo, ""); pe != nil || !strings.Contains(string(res), `"cwd":"file:///`) {
		t.Fatalf("environment/info after the attacks: %s %v", res, pe)
	}
}

// A wrapped result's JSON is what the reply-byte budget counts (the
// executor holds it until written), and a codex notification's JSON
// likewise: a client that stops reading must not hold more than
// maxPendingReplyBytes of either.
func TestCodexCallAttackRepliesAndNotificationsCountAgainstTheByteBudget(t *testing.T) {
	big := make([]byte, 1<<20)
	if n := replyBytes(protocol.CodexCallResult{Result: big}); n != len(big) {
		t.Errorf("codex/call result of %d bytes counts %d", len(big), n)
	}
	if n := replyBytes(protocol.CodexNotification{Method: protocol.MethodHTTPRequestBodyDelta, Params: big}); n != len(big) {
		t.Errorf("codex/notification of %d bytes counts %d: a native client that stops reading holds up to %d of them uncounted",
			len(big), n, maxPendingReplies)
	}
}

// codex/call exists only on the native transport: on ws:// it is an
// unknown method, so nothing reaches the table twice wrapped.
func TestCodexCallAttackIsNotOnWebSocket(t *testing.T) {
	ts := newTestServer(t, nil, WSConfig{})
	r := dialRaw(t, ts.url, nil)
	r.init()
	m := r.call(protocol.MethodCodexCall, map[string]any{"method": "environment/info"})
	r.wantError(m, -32601, "not implemented")
}

// A flood of codex notifications (a streamed http/request whose upstream
// never stops) must not starve a process's events on the same
// connection: the process's output must come after a bounded number of
// deltas, not after the stream ends (never, here).
func TestCodexNotificationFloodDoesNotStarveProcessEvents(t *testing.T) {
	stop := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := []byte(strings.Repeat("d", 512))
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
	defer up.Close()
	defer close(stop)
	ts := newTestServer(t, nil, WSConfig{})
	r := dialRaw(t, ts.url, nil)
	defer r.c.CloseNow() // first: the executor's end cancels the upstream request
	r.init()
	r.result(protocol.MethodHTTPRequest, map[string]any{"method": "GET", "url": up.URL, "requestId": "flood", "streamResponse": true})
	// Let the reply queue fill with deltas.
	for range 2 * maxPendingReplies {
		if m := r.note(); m["method"] != protocol.MethodHTTPRequestBodyDelta {
			t.Fatalf("unexpected notification %v", m)
		}
	}
	r.send(map[string]any{"id": "start", "method": protocol.MethodProcessStart, "params": startParams("p1", "/bin/echo", "hello")})
	// What was queued before the start's reply, and as much again.
	const limit = 4 * maxPendingReplies
	deltas, replied := 0, false
	deadline := time.Now().Add(testTimeout)
	for deltas < limit && time.Now().Before(deadline) {
		m := r.recv()
		switch {
		case m["id"] == "start":
			replied = true
		case m["method"] == protocol.MethodHTTPRequestBodyDelta:
			deltas++
		case m["method"] == "process/output" || m["method"] == "process/exited":
			if !replied {
				t.Fatalf("p1's event overtook its start reply")
			}
			t.Logf("p1's first event after %d deltas", deltas)
			return
		}
	}
	t.Fatalf("p1's events starved: %d deltas went out after its start (reply seen: %v) and none of its events", deltas, replied)
}
