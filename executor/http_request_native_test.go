package executor_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/outpost-exec/outpost/client"
	"github.com/outpost-exec/outpost/executor"
	"github.com/outpost-exec/outpost/identity"
	"github.com/outpost-exec/outpost/protocol"
)

// On the native transport http/request travels inside codex/call and its
// deltas inside codex/notification: the same reply first, then the
// deltas in order.
func TestHTTPRequestStreamedOverNativeTransport(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i := range 3 {
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
		}
	}))
	defer up.Close()
	key, err := identity.Generate()
	if err != nil {
		t.Fatal(err)
	}
	cfg := executor.DefaultConfig()
	cfg.Logger = zaptest.NewLogger(t)
	srv, err := executor.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := srv.ListenNative("tcp://127.0.0.1:0", executor.NativeConfig{Key: key.Keypair()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	defer func() { ln.Close(); srv.Shutdown(ctx) }()
	ck, err := identity.Generate()
	if err != nil {
		t.Fatal(err)
	}
	r, err := client.Dial(ctx, ln.URL()+"#"+key.PublicKey().Fingerprint(), client.Config{Key: ck, KnownExecutors: filepath.Join(t.TempDir(), "known")})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	replied := make(chan struct{})
	deltas := make(chan protocol.HTTPBodyDelta, 16)
	r.OnCodexNotification(func(method string, params json.RawMessage) {
		if method != protocol.MethodHTTPRequestBodyDelta {
			return
		}
		select {
		case <-replied:
		default:
			t.Errorf("a delta came before the reply")
		}
		var d protocol.HTTPBodyDelta
		if err := json.Unmarshal(params, &d); err != nil {
			t.Errorf("delta %s: %v", params, err)
		}
		deltas <- d
	})
	params, _ := json.Marshal(map[string]any{"method": "GET", "url": up.URL, "requestId": "n1", "streamResponse": true})
	// The deltas are held back until the reply has been handled.
	res, err := r.CallCodexThen(ctx, protocol.MethodHTTPRequest, params, func(json.RawMessage, error) { close(replied) })
	if err != nil {
		t.Fatal(err)
	}
	var result protocol.HTTPRequestResult
	if err := json.Unmarshal(res, &result); err != nil || result.Status != 200 {
		t.Fatalf("result %s: %v", res, err)
	}
	var body string
	for seq := uint64(1); ; seq++ {
		select {
		case d := <-deltas:
			if d.Seq != seq || d.RequestID != "n1" {
				t.Fatalf("delta %+v, want seq %d", d, seq)
			}
			body += string(d.Delta)
			if d.Done {
				if body != "data: 0\n\ndata: 1\n\ndata: 2\n\n" || d.Error != nil {
					t.Fatalf("streamed %q, error %v", body, d.Error)
				}
				return
			}
		case <-ctx.Done():
			t.Fatalf("stream did not end; got %q", base64.StdEncoding.EncodeToString([]byte(body)))
		}
	}
}
