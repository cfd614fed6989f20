package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// watchQuiet is how long a step that must not fire waits for a stray
// fs/missingChanged. It only bounds the search for a wrong notification
// (one arrives within milliseconds); a correct server passes at once.
const watchQuiet = 300 * time.Millisecond

// watchConn is a JSON-RPC client whose reader runs apart, so a step can
// wait a bounded time for a notification without closing the socket (a
// coder/websocket read whose context ends closes the connection).
type watchConn struct {
	t     *testing.T
	c     *websocket.Conn
	id    int
	msgs  chan map[string]any // every message, in order; bounded by the scenario's few dozen
	notes []map[string]any    // notifications seen while waiting for replies
}

func dialWatch(t *testing.T, url string) *watchConn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	c, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	w := &watchConn{t: t, c: c, msgs: make(chan map[string]any, 256)}
	go func() {
		defer close(w.msgs)
		for {
			_, b, err := c.Read(context.Background())
			if err != nil {
				return
			}
			var m map[string]any
			if json.Unmarshal(b, &m) == nil {
				w.msgs <- m
			}
		}
	}()
	t.Cleanup(func() { c.CloseNow() })
	return w
}

func (w *watchConn) next(timeout time.Duration) (map[string]any, bool) {
	select {
	case m, ok := <-w.msgs:
		return m, ok
	case <-time.After(timeout):
		return nil, false
	}
}

func (w *watchConn) call(method string, params any) map[string]any {
	w.t.Helper()
	w.id++
	msg := map[string]any{"id": w.id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	b, _ := json.Marshal(msg)
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	if err := w.c.Write(ctx, websocket.MessageText, b); err != nil {
		w.t.Fatal(err)
	}
	for {
		m, ok := w.next(stepTimeout)
		if !ok {
			w.t.Fatalf("no reply to %s", method)
		}
		if _, isNote := m["method"]; isNote {
			w.notes = append(w.notes, m)
			continue
		}
		if v, _ := m["id"].(float64); int(v) == w.id {
			return m
		}
		w.t.Fatalf("unexpected message %v", m)
	}
}

func (w *watchConn) init(params map[string]any) map[string]any {
	m := w.call("initialize", params)
	if m["error"] == nil {
		b, _ := json.Marshal(map[string]any{"method": "initialized", "params": map[string]any{}})
		w.c.Write(context.Background(), websocket.MessageText, b)
	}
	return m
}

// notified renders the notifications that arrive within wait (the first
// one ends the wait): "none", or each as method:watchId.
func (w *watchConn) notified(wait time.Duration) string {
	w.t.Helper()
	got := w.notes
	w.notes = nil
	if len(got) == 0 {
		if m, ok := w.next(wait); ok {
			got = append(got, m)
		}
	}
	if len(got) == 0 {
		return "none"
	}
	var parts []string
	for _, m := range got {
		b, _ := json.Marshal(m["params"])
		parts = append(parts, fmt.Sprintf("%v:%s", m["method"], b))
	}
	return strings.Join(parts, ",")
}

// watchScenario runs fs/watchMissing's cases against url, with its files
// under dir (a fresh directory at the same depth for every server).
func watchScenario(t *testing.T, url, dir string) []observation {
	var obs []observation
	see := func(step, value string) { obs = append(obs, observation{step, value}) }
	j := func(p ...string) string { return filepath.Join(append([]string{dir}, p...)...) }
	uri := func(p string) string { return "file://" + p }
	do := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	w := dialWatch(t, url)
	sid, _ := w.init(map[string]any{"clientName": "watch-diff"})["result"].(map[string]any)["sessionId"].(string)
	watch := func(step string, id uint64, missing []string, present ...string) {
		t.Helper()
		p := map[string]any{"watchId": id, "missing": missing}
		if len(present) > 0 {
			p["present"] = present[0]
		}
		see(step, shape(w.call("fs/watchMissing", p)))
	}
	one := func(p string) []string { return []string{uri(p)} }

	// A fresh connection's order starts at 0: watchId 0 is stale.
	watch("watchId 0 first", 0, one(j("z")))

	// Malformed requests: codex's messages; type errors by code only.
	for _, c := range []struct {
		name   string
		params any
		full   bool
	}{
		{"no params", nil, true},
		{"no watchId", map[string]any{}, true},
		{"no missing", map[string]any{"watchId": 1}, true},
		{"watchId a string", map[string]any{"watchId": "1", "missing": []string{}}, false},
		{"watchId negative", map[string]any{"watchId": -1, "missing": []string{}}, false},
		{"missing a string", map[string]any{"watchId": 1, "missing": "x"}, false},
		{"relative path", map[string]any{"watchId": 1, "missing": []string{"rel/x"}}, true},
		{"empty path", map[string]any{"watchId": 1, "missing": []string{""}}, true},
		{"http scheme", map[string]any{"watchId": 1, "missing": []string{"http://h/x"}}, true},
		{"drive letter", map[string]any{"watchId": 1, "missing": []string{`C:\x`}}, true},
		{"query", map[string]any{"watchId": 1, "missing": []string{"file:///x?q"}}, true},
		{"fragment", map[string]any{"watchId": 1, "missing": []string{"file:///x#f"}}, true},
		{"NUL", map[string]any{"watchId": 1, "missing": []string{"file:///nowhere/a%00b"}}, true},
		{"bad present", map[string]any{"watchId": 1, "missing": []string{uri(j("x"))}, "present": "http://h/x"}, true},
	} {
		m := w.call("fs/watchMissing", c.params)
		if c.full {
			see(c.name, shape(m))
		} else {
			see(c.name, code(m))
		}
	}

	// A missing path appears: once, with the watch's id.
	watch("watch a", 1, one(j("a")))
	do(os.WriteFile(j("a"), nil, 0o644))
	see("a made", w.notified(stepTimeout))
	watch("stale id", 1, one(j("b")))
	watch("an existing path", 2, one(j("a")))

	// A missing parent is made.
	watch("watch p/q/x", 3, one(j("p", "q", "x")))
	do(os.Mkdir(j("p"), 0o755))
	see("p made", w.notified(stepTimeout))

	// A name beside it does not fire; the path itself does.
	watch("watch p/x", 4, one(j("p", "x")))
	do(os.WriteFile(j("p", "other"), nil, 0o644))
	see("sibling made", w.notified(watchQuiet))
	do(os.Mkdir(j("p", "x"), 0o755))
	see("p/x made", w.notified(stepTimeout))

	// A newer watch replaces the older.
	watch("watch n1", 5, one(j("n1")))
	watch("watch n2", 6, one(j("n2")))
	do(os.WriteFile(j("n1"), nil, 0o644))
	see("replaced watch's path made", w.notified(watchQuiet))
	do(os.WriteFile(j("n2"), nil, 0o644))
	see("n2 made", w.notified(stepTimeout))

	// Several paths, one notification.
	watch("watch m1 m2", 7, []string{uri(j("m1")), uri(j("m2"))})
	do(os.WriteFile(j("m2"), nil, 0o644))
	see("m2 made", w.notified(stepTimeout))
	do(os.WriteFile(j("m1"), nil, 0o644))
	see("m1 made after", w.notified(watchQuiet))

	// Present: written, then removed.
	do(os.WriteFile(j("pres"), []byte("v1"), 0o644))
	watch("watch with present", 8, one(j("y")), uri(j("pres")))
	do(os.WriteFile(j("pres"), []byte("v2"), 0o644))
	see("present written", w.notified(stepTimeout))
	watch("watch with present again", 9, one(j("y")), uri(j("pres")))
	do(os.Remove(j("pres")))
	see("present removed", w.notified(stepTimeout))
	watch("present missing", 10, one(j("y")), uri(j("pres")))

	// The watched parent is removed.
	do(os.MkdirAll(j("r", "s"), 0o755))
	watch("watch r/s/x", 11, one(j("r", "s", "x")))
	do(os.RemoveAll(j("r")))
	see("r removed", w.notified(stepTimeout))

	// What cannot be watched.
	do(os.Symlink("nowhere", j("dangling")))
	do(os.Mkdir(j("dir"), 0o755))
	do(os.Symlink("dir", j("link")))
	watch("dangling symlink", 12, one(j("dangling")))
	watch("through a symlink", 13, one(j("link", "x")))
	watch("under a file", 14, one(j("a", "x")))
	watch("present a symlink", 15, one(j("y")), uri(j("link")))
	watch("no paths", 16, []string{})
	watch("another host", 17, []string{"file://otherhost/x"})
	watch("a Windows drive", 18, []string{"file:///C:/x"})

	// Bounds: 64 paths, 64 directories.
	paths := func(n int, f func(i int) string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = uri(f(i))
		}
		return out
	}
	inDir := func(i int) string { return j(fmt.Sprint("f", i)) }
	watch("64 paths", 19, paths(64, inDir))
	watch("65 paths", 20, paths(65, inDir))
	watch("65 duplicates", 21, paths(65, func(int) string { return inDir(0) }))
	room := 64 - (strings.Count(dir, "/") + 1)
	for i := 0; i <= room; i++ {
		do(os.Mkdir(j(fmt.Sprint("d", i)), 0o755))
	}
	inDirs := func(i int) string { return j(fmt.Sprint("d", i), "x") }
	watch("64 directories", 22, paths(room, inDirs))
	watch("65 directories", 23, paths(room+1, inDirs))
	do(os.MkdirAll(j("e", "f"), 0o755))
	watch("64 directories and present's own", 24, paths(room, inDirs), uri(j("d0")))
	watch("65 directories with present's parent", 25, paths(room, inDirs), uri(j("e", "f")))

	// The watch belongs to the connection: a resumed session starts anew.
	watch("watch before detach", 26, one(j("late")))
	w.c.Close(websocket.StatusNormalClosure, "")
	w2 := dialWatch(t, url)
	for deadline := time.Now().Add(stepTimeout); ; {
		m := w2.init(map[string]any{"clientName": "watch-diff", "resumeSessionId": sid})
		if m["error"] == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("resume: %v", m)
		}
		time.Sleep(10 * time.Millisecond) // the old connection is still detaching
	}
	w = w2
	watch("watchId 1 after resume", 1, one(j("late2")))
	do(os.WriteFile(j("late"), nil, 0o644))
	see("the old connection's path made", w.notified(watchQuiet))
	do(os.WriteFile(j("late2"), nil, 0o644))
	see("late2 made", w.notified(stepTimeout))
	return obs
}

func TestDifferentialWatchMissingAgainstCodexExecServer(t *testing.T) {
	ours, theirs := bothServers(t)

	// Two directories at the same depth, reached without symlinks.
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dirs := [2]string{filepath.Join(root, "o"), filepath.Join(root, "c")}
	for _, d := range dirs {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	a := watchScenario(t, ours.URL, dirs[0])
	b := watchScenario(t, theirs.URL, dirs[1])
	if len(a) != len(b) {
		t.Fatalf("outpost made %d observations, codex %d", len(a), len(b))
	}
	for i := range a {
		va := strings.ReplaceAll(a[i].value, dirs[0], "$DIR")
		vb := strings.ReplaceAll(b[i].value, dirs[1], "$DIR")
		// Under load codex's watcher sometimes fires a watch of p/x when a
		// sibling is made in p, and then not for p/x itself (seen once in
		// a loaded full run; never alone): its timing, not a rule. Outpost
		// fires for p/x only, as codex does when not loaded.
		if a[i].step == "sibling made" && i+1 < len(a) && va == "none" && vb != "none" &&
			strings.ReplaceAll(b[i+1].value, dirs[1], "$DIR") == "none" && strings.ReplaceAll(a[i+1].value, dirs[0], "$DIR") == vb {
			t.Logf("%s: codex fired early (%s), outpost on p/x itself; accepted", a[i].step, vb)
			b[i+1].value = a[i+1].value
			continue
		}
		if a[i].step != b[i].step || va != vb {
			t.Errorf("%s:\n  outpost: %s\n  codex:   %s", a[i].step, va, vb)
		} else {
			t.Logf("%s: %s", a[i].step, va)
		}
	}
}
