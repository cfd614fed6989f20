package executor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/outpost-exec/outpost/pathmap"
	"github.com/outpost-exec/outpost/protocol"
)

// inotifyFDs counts this process's inotify instances: each live watch
// holds one.
func inotifyFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && l == "anon_inode:inotify" {
			n++
		}
	}
	return n
}

// waitInotifyFDs waits until the count is want (a closing connection
// winds down on its own goroutine).
func waitInotifyFDs(t *testing.T, want int) {
	t.Helper()
	for deadline := time.Now().Add(testTimeout); inotifyFDs(t) != want; {
		if time.Now().After(deadline) {
			t.Fatalf("%d inotify instances, want %d", inotifyFDs(t), want)
		}
		time.Sleep(time.Millisecond)
	}
}

func watchRoot(t *testing.T) string {
	t.Helper()
	d, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestWSWatchMissingSendsMissingChanged(t *testing.T) {
	ts := newTestServer(t, nil, WSConfig{})
	r := dialRaw(t, ts.url, nil)
	r.init()
	d := watchRoot(t)
	before := inotifyFDs(t)
	res := r.result(protocol.MethodFsWatchMissing, map[string]any{"watchId": 3, "missing": []string{pathmap.URI(filepath.Join(d, "a", "AGENTS.md"))}})
	if res["watching"] != true {
		t.Fatalf("watch: %v", res)
	}
	if got := inotifyFDs(t); got != before+1 {
		t.Fatalf("%d inotify instances for one watch (had %d)", got, before)
	}
	// The parent appears: that is a change too.
	if err := os.Mkdir(filepath.Join(d, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	n := r.note()
	if n["method"] != protocol.MethodFsMissingChanged || params(n)["watchId"] != float64(3) || len(params(n)) != 1 {
		t.Fatalf("notification %v", n)
	}
	waitInotifyFDs(t, before) // fired: gone
	// Requests go on; a stale id makes no watch.
	if res := r.result(protocol.MethodFsWatchMissing, map[string]any{"watchId": 3, "missing": []string{pathmap.URI(filepath.Join(d, "b"))}}); res["watching"] != false {
		t.Fatalf("stale watch: %v", res)
	}
}

func TestWSWatchMissingErrorsAsCodex(t *testing.T) {
	ts := newTestServer(t, nil, WSConfig{})
	r := dialRaw(t, ts.url, nil)
	r.init()
	for _, c := range []struct {
		params any
		msg    string
	}{
		{nil, "invalid type: null, expected struct FsWatchMissingParams"},
		{map[string]any{}, "missing field `watchId`"},
		{map[string]any{"watchId": 1}, "missing field `missing`"},
		{map[string]any{"watchId": "one", "missing": []string{}}, ""},
		{map[string]any{"watchId": 1, "missing": "file:///x"}, ""},
		{map[string]any{"watchId": 1, "missing": []string{"relative"}}, "invalid URI: relative URL without a base"},
		{map[string]any{"watchId": 1, "missing": []string{"file:///x"}, "present": "http://h/x"}, "unsupported path URI scheme `http`"},
	} {
		r.wantError(r.call(protocol.MethodFsWatchMissing, c.params), protocol.CodeInvalidParams, c.msg)
	}
}

// TestWSWatchMissingBelongsToTheConnection: as in codex's server, a
// resumed session starts with no watch and a fresh watchId order; the old
// connection's watch went with it.
func TestWSWatchMissingBelongsToTheConnection(t *testing.T) {
	ts := newTestServer(t, nil, WSConfig{})
	d := watchRoot(t)
	before := inotifyFDs(t)
	r1 := dialRaw(t, ts.url, nil)
	sid := r1.init()
	if res := r1.result(protocol.MethodFsWatchMissing, map[string]any{"watchId": 5, "missing": []string{pathmap.URI(filepath.Join(d, "x"))}}); res["watching"] != true {
		t.Fatalf("watch: %v", res)
	}
	r1.c.Close(websocket.StatusNormalClosure, "")
	waitInotifyFDs(t, before)

	r2 := dialRaw(t, ts.url, nil)
	for deadline := time.Now().Add(testTimeout); ; {
		m := r2.call("initialize", map[string]any{"clientName": "x", "resumeSessionId": sid})
		if m["error"] == nil {
			break
		}
		if time.Now().After(deadline) || !strings.Contains(m["error"].(map[string]any)["message"].(string), "already attached") {
			t.Fatalf("resume: %v", m)
		}
		time.Sleep(time.Millisecond)
	}
	r2.send(map[string]any{"method": "initialized"})
	if res := r2.result(protocol.MethodFsWatchMissing, map[string]any{"watchId": 1, "missing": []string{pathmap.URI(filepath.Join(d, "y"))}}); res["watching"] != true {
		t.Fatalf("watchId 1 on the new connection: %v", res)
	}
	os.WriteFile(filepath.Join(d, "x"), nil, 0o644) // the old connection's: nothing
	os.WriteFile(filepath.Join(d, "y"), nil, 0o644)
	if n := r2.note(); params(n)["watchId"] != float64(1) {
		t.Fatalf("notification %v, want watch 1's", n)
	}
	waitInotifyFDs(t, before)
}

// TestWSWatchMissingGoesWithTheConnection: a live watch's instance and
// goroutine end with the connection, also when the client stopped reading.
func TestWSWatchMissingGoesWithTheConnection(t *testing.T) {
	ts := newTestServer(t, nil, WSConfig{})
	d := watchRoot(t)
	before := inotifyFDs(t)
	for i := 0; i < 3; i++ {
		r := dialRaw(t, ts.url, nil)
		r.init()
		if res := r.result(protocol.MethodFsWatchMissing, map[string]any{"watchId": 1, "missing": []string{pathmap.URI(filepath.Join(d, "z"))}}); res["watching"] != true {
			t.Fatalf("watch: %v", res)
		}
		if i == 1 {
			os.WriteFile(filepath.Join(d, "z"), nil, 0o644) // fired, never read
			os.Remove(filepath.Join(d, "z"))
		}
		r.c.CloseNow()
	}
	waitInotifyFDs(t, before)
}
