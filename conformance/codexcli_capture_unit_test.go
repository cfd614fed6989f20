package conformance

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestWireTap: the tap relays both ways unchanged and records each
// message, answers a fault method itself (the server never sees it),
// keeps at most its limit and says how many it dropped.
func TestWireTap(t *testing.T) {
	var mu sync.Mutex
	var seen []string // methods the upstream got
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			_, b, err := c.Read(r.Context())
			if err != nil {
				return
			}
			var req struct {
				ID     int    `json:"id"`
				Method string `json:"method"`
			}
			json.Unmarshal(b, &req)
			mu.Lock()
			seen = append(seen, req.Method)
			mu.Unlock()
			reply, _ := json.Marshal(map[string]any{"id": req.ID, "result": map[string]any{"echo": req.Method}})
			c.Write(r.Context(), websocket.MessageText, reply)
		}
	}))
	defer up.Close()

	tap := startTap(t, "ws"+strings.TrimPrefix(up.URL, "http"))
	tap.faults["fs/walk"] = true
	tap.limit = 5
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, tap.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	call := func(id int, method string) map[string]any {
		b, _ := json.Marshal(map[string]any{"id": id, "method": method, "params": map[string]any{"n": id}})
		if err := c.Write(ctx, websocket.MessageText, b); err != nil {
			t.Fatal(err)
		}
		_, reply, err := c.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		json.Unmarshal(reply, &m)
		return m
	}
	if r := call(1, "initialize"); r["result"] == nil {
		t.Fatalf("initialize reply %v", r)
	}
	r := call(2, "fs/walk")
	if e, _ := r["error"].(map[string]any); e["code"] != float64(-32601) || r["id"] != float64(2) {
		t.Fatalf("fault reply %v, want -32601 for id 2", r)
	}
	call(3, "process/start")
	call(4, "fs/readFile")

	mu.Lock()
	got := strings.Join(seen, " ")
	mu.Unlock()
	if got != "initialize process/start fs/readFile" {
		t.Errorf("upstream got %q; the fault method must not reach it", got)
	}
	if starts := tap.Requests("process/start"); len(starts) != 1 || starts[0]["n"] != float64(3) {
		t.Errorf("Requests(process/start) = %v", starts)
	}
	msgs := tap.Messages()
	if len(msgs) != 5 {
		t.Fatalf("kept %d messages, want the limit 5", len(msgs))
	}
	dirs := []string{toServer, toCodex, toServer, toCodex, toServer}
	for i, m := range msgs {
		if m.Dir != dirs[i] {
			t.Errorf("message %d went %s, want %s: %s", i, m.Dir, dirs[i], m.Msg)
		}
	}
	dir := t.TempDir()
	if err := tap.write(dir, "Test/x y"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "Test__x_y.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 6 || lines[5] != `{"dropped":3}` {
		t.Errorf("capture file:\n%s\nwant 5 messages and {\"dropped\":3}", b)
	}
}
