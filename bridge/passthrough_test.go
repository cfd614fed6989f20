package bridge_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/executor"
)

// Through the bridge codex gets what the executor's own ws front end
// answers, byte for byte: the executor decodes and judges process/start's
// params and every forwarded method's as codex wrote them, so bad input
// is refused the same way on both paths.
func TestRequestsAreJudgedByTheExecutorAsOnItsOwnFrontEnd(t *testing.T) {
	up := direct(t, nil)
	l, err := up.executor.ListenWS("127.0.0.1:0", executor.WSConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	_, url := startBridge(t, up, nil)
	via, own := dialCodex(t, url, nil), dialCodex(t, l.URL(), nil)
	via.initialize("")
	own.initialize("")
	base := func(id string) map[string]any {
		return map[string]any{"processId": id, "argv": []string{"true"}, "cwd": "/", "env": map[string]any{}, "tty": false}
	}
	cases := map[string]func(p map[string]any){
		"argv not a list":  func(p map[string]any) { p["argv"] = 5 },
		"empty argv":       func(p map[string]any) { p["argv"] = []string{} },
		"env not a map":    func(p map[string]any) { p["env"] = []int{1} },
		"relative cwd":     func(p map[string]any) { p["cwd"] = "not/absolute" },
		"sandbox garbage":  func(p map[string]any) { p["sandbox"] = map[string]any{"type": "no-such-mode"} },
		"tty not a bool":   func(p map[string]any) { p["tty"] = "yes" },
		"pipeStdin string": func(p map[string]any) { p["pipeStdin"] = "x" },
		// Fields outpost's Go types may not name: judged only where the
		// executor sees them as codex wrote them.
		"networkProxy garbage":  func(p map[string]any) { p["networkProxy"] = 5 },
		"shellSnapshot garbage": func(p map[string]any) { p["shellSnapshot"] = map[string]any{} },
		"metadata garbage":      func(p map[string]any) { p["metadata"] = "x" },
	}
	i := 0
	for name, mutate := range cases {
		i++
		p1, p2 := base(fmt.Sprintf("a%d", i)), base(fmt.Sprintf("a%d", i))
		mutate(p1)
		mutate(p2)
		a, b := via.call("process/start", p1), own.call("process/start", p2)
		if fmt.Sprint(a.Error) != fmt.Sprint(b.Error) || (a.Error == nil) != (b.Error == nil) {
			t.Errorf("%s: through the bridge %+v, on the executor's own front end %+v", name, a.Error, b.Error)
		}
	}
	for _, m := range []struct {
		method string
		params any
	}{
		{"fs/readFile", map[string]any{"path": 7}},
		{"fs/readFile", map[string]any{"path": "relative"}},
		{"fs/getMetadata", nil},
		{"fs/readDirectory", map[string]any{"path": "file:///nonexistent-dir"}},
		{"environment/info", map[string]any{"unexpected": true}},
	} {
		a, b := via.call(m.method, m.params), own.call(m.method, m.params)
		if fmt.Sprint(a.Error) != fmt.Sprint(b.Error) || string(a.Result) != string(b.Result) {
			t.Errorf("%s %v: through the bridge %+v %s, on the executor's own %+v %s", m.method, m.params, a.Error, a.Result, b.Error, b.Result)
		}
	}
}

// The executor's notifications that are not process events reach codex
// through the bridge, in the executor's order, after the reply that
// started them: an http/request's streamed body (the bridge names neither
// the method nor the notification) and fs/watchMissing's fs/missingChanged.
func TestExecutorNotificationsReachCodexInOrder(t *testing.T) {
	const chunks = 200
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i := range chunks {
			fmt.Fprintf(w, "chunk %03d\n", i)
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(web.Close)
	topologies(t, func(t *testing.T, up *upstream) {
		_, url := startBridge(t, up, nil)
		c := dialCodex(t, url, nil)
		c.initialize("")
		var head struct {
			Status int `json:"status"`
		}
		c.ok("http/request", map[string]any{"method": "GET", "url": web.URL, "requestId": "r1", "streamResponse": true}, &head)
		if head.Status != 200 {
			t.Fatalf("status %d", head.Status)
		}
		var body []byte
		for seq := uint64(1); ; seq++ {
			n := c.nextNote()
			if n.Method != "http/request/bodyDelta" {
				t.Fatalf("got %s %s", n.Method, n.Params)
			}
			var d struct {
				RequestID string `json:"requestId"`
				Seq       uint64 `json:"seq"`
				Delta     []byte `json:"deltaBase64"`
				Done      bool   `json:"done"`
				Error     *string
			}
			if err := json.Unmarshal(n.Params, &d); err != nil || d.RequestID != "r1" || d.Seq != seq {
				t.Fatalf("delta %s (%v), want seq %d", n.Params, err, seq)
			}
			body = append(body, d.Delta...)
			if d.Done {
				break
			}
		}
		var want bytes.Buffer
		for i := range chunks {
			fmt.Fprintf(&want, "chunk %03d\n", i)
		}
		if !bytes.Equal(body, want.Bytes()) {
			t.Fatalf("body through the bridge: %d bytes, want %d", len(body), want.Len())
		}

		dir := t.TempDir()
		missing := filepath.Join(dir, "later")
		var w struct {
			Watching bool `json:"watching"`
		}
		c.ok("fs/watchMissing", map[string]any{"watchId": 1, "missing": []string{"file://" + missing}}, &w)
		if !w.Watching {
			t.Fatal("not watching")
		}
		if err := os.WriteFile(missing, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if n := c.nextNote(); n.Method != "fs/missingChanged" || !strings.Contains(string(n.Params), `"watchId":1`) {
			t.Fatalf("got %s %s", n.Method, n.Params)
		}
	})
}

// nextNote is the next notification, whatever it is.
func (c *codex) nextNote() note {
	c.t.Helper()
	select {
	case n := <-c.notes:
		return n
	case <-time.After(testTimeout):
		c.t.Fatal("no notification")
	}
	return note{}
}
