//go:build linux

package remotefs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/outpost-exec/outpost/pathmap"
	"github.com/outpost-exec/outpost/protocol"
)

// watchDir is a temporary directory reached without symlinks (a watch
// refuses paths through them).
func watchDir(t *testing.T) string {
	t.Helper()
	d, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// testWatcher is a watcher whose notifications land in a channel.
type testWatcher struct {
	*MissingWatcher
	fired chan uint64
}

func newTestWatcher(t *testing.T, s *Session) *testWatcher {
	t.Helper()
	// Room for every notification a test can cause: each watch fires once.
	fired := make(chan uint64, 64)
	w, err := s.NewMissingWatcher(func(id uint64) { fired <- id })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return &testWatcher{w, fired}
}

// watch makes a watch and starts it, as the executor does once the reply
// is queued.
func (w *testWatcher) watch(t *testing.T, id uint64, missing []string, present ...string) bool {
	t.Helper()
	p := protocol.FsWatchMissingParams{WatchID: id, Missing: missing}
	if len(present) > 0 {
		p.Present = &present[0]
	}
	res, start, err := w.WatchMissing(p)
	if err != nil {
		t.Fatalf("watch %d: %v", id, err)
	}
	if res.Watching != (start != nil) {
		t.Fatalf("watch %d: watching %v but start %v", id, res.Watching, start != nil)
	}
	if start != nil {
		start()
	}
	return res.Watching
}

// next waits for the next notification; the timeout only bounds a
// failing test.
func (w *testWatcher) next(t *testing.T) uint64 {
	t.Helper()
	select {
	case id := <-w.fired:
		return id
	case <-time.After(10 * time.Second):
		t.Fatal("no fs/missingChanged")
		return 0
	}
}

func uris(paths ...string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = pathmap.URI(p)
	}
	return out
}

func TestWatchMissingFiresOnceWhenAPathAppears(t *testing.T) {
	s := fsTestSession(t)
	w := newTestWatcher(t, s)
	d := watchDir(t)
	if !w.watch(t, 7, uris(filepath.Join(d, "a"), filepath.Join(d, "b"))) {
		t.Fatal("not watching two missing paths")
	}
	if err := os.WriteFile(filepath.Join(d, "b"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if id := w.next(t); id != 7 {
		t.Fatalf("fired watch %d, want 7", id)
	}
	// Once: the watch is gone, its instance closed.
	w.mu.Lock()
	cur := w.cur
	w.mu.Unlock()
	if cur != nil {
		t.Fatal("a fired watch is still the current one")
	}
	// A newer watch works on the same watcher.
	if !w.watch(t, 8, uris(filepath.Join(d, "a"))) {
		t.Fatal("not watching after the first fired")
	}
	if err := os.Mkdir(filepath.Join(d, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	if id := w.next(t); id != 8 {
		t.Fatalf("fired watch %d, want 8", id)
	}
}

func TestWatchMissingFiresWhenAParentIsMadeOrRemoved(t *testing.T) {
	d := watchDir(t)
	for _, c := range []struct {
		name   string
		before func()
		change func() error
	}{
		{"parent made", nil, func() error { return os.Mkdir(filepath.Join(d, "p"), 0o755) }},
		{"existing parent removed", func() { os.MkdirAll(filepath.Join(d, "p", "q"), 0o755) },
			func() error { return os.RemoveAll(filepath.Join(d, "p")) }},
		{"grandparent renamed", func() { os.MkdirAll(filepath.Join(d, "p", "q"), 0o755) },
			func() error { return os.Rename(filepath.Join(d, "p"), filepath.Join(d, "p2")) }},
		{"parent's attributes", func() { os.MkdirAll(filepath.Join(d, "p", "q"), 0o755) },
			func() error { return os.Chmod(filepath.Join(d, "p", "q"), 0o700) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			os.RemoveAll(filepath.Join(d, "p"))
			os.RemoveAll(filepath.Join(d, "p2"))
			if c.before != nil {
				c.before()
			}
			w := newTestWatcher(t, fsTestSession(t))
			if !w.watch(t, 1, uris(filepath.Join(d, "p", "q", "x"))) {
				t.Fatal("not watching")
			}
			if err := c.change(); err != nil {
				t.Fatal(err)
			}
			if id := w.next(t); id != 1 {
				t.Fatalf("fired %d", id)
			}
		})
	}
}

// pending reads the events queued on m's instance without blocking.
func pending(t *testing.T, m *missingWatch) []byte {
	t.Helper()
	rc, err := m.f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	var n int
	var rerr error
	if err := rc.Control(func(fd uintptr) { n, rerr = unix.Read(int(fd), buf) }); err != nil {
		t.Fatal(err)
	}
	if rerr == unix.EAGAIN {
		return nil
	}
	if rerr != nil {
		t.Fatal(rerr)
	}
	return buf[:n]
}

// TestWatchMissingJudgesEventsByTheWatchedPaths reads the real events of
// an unstarted watch and judges each batch: names beside the watched
// ones, and changes inside Present, do not fire.
func TestWatchMissingJudgesEventsByTheWatchedPaths(t *testing.T) {
	d := watchDir(t)
	os.MkdirAll(filepath.Join(d, "sub", "present"), 0o755)
	os.WriteFile(filepath.Join(d, "sub", "file"), []byte("x"), 0o644)
	targets := []string{filepath.Join(d, "sub", "x"), filepath.Join(d, "sub", "present")}
	dirs, ok := watchDirs(targets, 1)
	if !ok {
		t.Fatal("not watchable")
	}
	w := &MissingWatcher{s: fsTestSession(t)}
	m, err := newMissingWatch(w, 1, targets, dirs)
	if err != nil || m == nil {
		t.Fatalf("newMissingWatch: %v", err)
	}
	defer m.cancel()
	for _, c := range []struct {
		name  string
		do    func() error
		fires bool
	}{
		{"sibling made", func() error { return os.WriteFile(filepath.Join(d, "sub", "y"), nil, 0o644) }, false},
		{"sibling written", func() error { return os.WriteFile(filepath.Join(d, "sub", "file"), []byte("more"), 0o644) }, false},
		{"sibling dir made and removed", func() error {
			os.Mkdir(filepath.Join(d, "sub", "x.d"), 0o755)
			return os.Remove(filepath.Join(d, "sub", "x.d"))
		}, false},
		{"inside present", func() error { return os.WriteFile(filepath.Join(d, "sub", "present", "in"), nil, 0o644) }, false},
		{"beside the top", func() error { return os.WriteFile(filepath.Join(d, "other"), nil, 0o644) }, false},
		{"present's attributes", func() error { return os.Chmod(filepath.Join(d, "sub", "present"), 0o700) }, true},
		{"the missing path made", func() error { return os.Symlink("nowhere", filepath.Join(d, "sub", "x")) }, true},
		{"the missing path removed again", func() error { return os.Remove(filepath.Join(d, "sub", "x")) }, true},
	} {
		if err := c.do(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		// Inside Present nothing is watched: no event at all.
		ev := pending(t, m)
		if len(ev) == 0 && c.fires {
			t.Fatalf("%s: no inotify event at all", c.name)
		}
		if got := m.fires(ev); got != c.fires {
			t.Errorf("%s: fires %v, want %v", c.name, got, c.fires)
		}
	}
}

func TestWatchMissingOrdersByWatchIDAndReplaces(t *testing.T) {
	s := fsTestSession(t)
	w := newTestWatcher(t, s)
	d := watchDir(t)
	x, y := filepath.Join(d, "x"), filepath.Join(d, "y")
	if w.watch(t, 0, uris(x)) {
		t.Fatal("watchId 0 is not above the initial 0, as in codex")
	}
	if !w.watch(t, 5, uris(x)) {
		t.Fatal("not watching 5")
	}
	first := w.cur
	if w.watch(t, 5, uris(y)) || w.watch(t, 3, uris(y)) {
		t.Fatal("a stale watchId made a watch")
	}
	if w.cur != first {
		t.Fatal("a stale request replaced the watch")
	}
	// A newer id replaces it, even when it makes no watch.
	if w.watch(t, 6, uris(d)) {
		t.Fatal("watching a path that exists")
	}
	if w.cur != nil || !first.released {
		t.Fatal("the replaced watch is still live")
	}
	if !w.watch(t, 7, uris(y)) {
		t.Fatal("not watching 7")
	}
	os.WriteFile(x, nil, 0o644) // was watch 5's
	os.WriteFile(y, nil, 0o644)
	if id := w.next(t); id != 7 {
		t.Fatalf("fired %d, want 7 (5 was replaced)", id)
	}
	if got := len(inotifySlots); got != 0 {
		t.Fatalf("%d inotify instances still held", got)
	}
}

func TestWatchMissingRefusesWhatCannotBeWatched(t *testing.T) {
	d := watchDir(t)
	os.Mkdir(filepath.Join(d, "dir"), 0o755)
	os.WriteFile(filepath.Join(d, "file"), nil, 0o644)
	os.Symlink("dir", filepath.Join(d, "link"))
	os.Symlink("nowhere", filepath.Join(d, "dangling"))
	j := func(p ...string) string { return filepath.Join(append([]string{d}, p...)...) }
	for _, c := range []struct {
		name    string
		missing []string
		present string
	}{
		{"no paths", nil, ""},
		{"an existing path", []string{j("dir")}, ""},
		{"a dangling symlink", []string{j("dangling")}, ""},
		{"through a symlink", []string{j("link", "x")}, ""},
		{"under a file", []string{j("file", "x")}, ""},
		{"one exists among missing", []string{j("x"), j("file")}, ""},
		{"present missing", []string{j("x")}, j("nope")},
		{"present a symlink", []string{j("x")}, j("link")},
		{"a name too long", []string{j(strings.Repeat("n", 300))}, ""},
	} {
		w := newTestWatcher(t, fsTestSession(t))
		if w.watch(t, 1, uris(c.missing...), uris(c.present)...) {
			t.Errorf("%s: watching", c.name)
		}
	}
	// Another host, and a Windows drive, name nothing here: no watch, no error.
	w := newTestWatcher(t, fsTestSession(t))
	for i, u := range []string{"file://otherhost/x", "file:///C:/x", "file:"} {
		if w.watch(t, uint64(i+1), []string{u}) {
			t.Errorf("%s: watching", u)
		}
	}
}

func TestWatchMissingRefusesMalformedPathsAsCodexDoes(t *testing.T) {
	w := newTestWatcher(t, fsTestSession(t))
	for _, c := range []struct{ path, msg string }{
		{"", "invalid URI: relative URL without a base"},
		{"rel/x", "invalid URI: relative URL without a base"},
		{"//server/share", "invalid URI: relative URL without a base"},
		{"http://host/x", "unsupported path URI scheme `http`"},
		{"HTTP://host/x", "unsupported path URI scheme `http`"},
		{`C:\x`, "unsupported path URI scheme `c`"},
		{"file:///tmp/x?q", "query parameters are not allowed in path URIs"},
		{"file:///tmp/x#f", "fragments are not allowed in path URIs"},
		{"file:///tmp/a%00b", "'file:///tmp/a%00b' is invalid on 'linux'"},
	} {
		_, _, err := w.WatchMissing(protocol.FsWatchMissingParams{WatchID: 9, Missing: []string{"file:///tmp/fine", c.path}})
		var pe *protocol.Error
		if !errors.As(err, &pe) || pe.Code != protocol.CodeInvalidParams || pe.Message != c.msg || pe.Kind() != protocol.KindInvalid {
			t.Errorf("%q: %v, want -32602 %q", c.path, err, c.msg)
		}
		p := "http://x"
		if _, _, err := w.WatchMissing(protocol.FsWatchMissingParams{WatchID: 9, Missing: []string{"file:///tmp/fine"}, Present: &p}); err == nil {
			t.Error("a malformed present passed")
		}
	}
	// An error changes nothing: watchId 9 is still new.
	if !w.watch(t, 9, uris(filepath.Join(watchDir(t), "x"))) {
		t.Fatal("a refused request used up its watchId")
	}
}

func TestWatchMissingBounds(t *testing.T) {
	d := watchDir(t)
	w := newTestWatcher(t, fsTestSession(t))
	id := uint64(0)
	watch := func(missing []string, present ...string) bool {
		id++
		return w.watch(t, id, missing, present...)
	}
	names := func(n int, f func(i int) string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = pathmap.URI(f(i))
		}
		return out
	}
	// Paths: MaxWatchMissingPaths, duplicates counted.
	inD := func(i int) string { return filepath.Join(d, fmt.Sprint("m", i)) }
	if !watch(names(protocol.MaxWatchMissingPaths, inD)) {
		t.Error("not watching the most paths")
	}
	if watch(names(protocol.MaxWatchMissingPaths+1, inD)) {
		t.Error("watching one path too many")
	}
	if watch(names(protocol.MaxWatchMissingPaths+1, func(int) string { return inD(0) })) {
		t.Error("duplicates are not counted")
	}
	// Directories: d's own ancestors, d, then one directory per path.
	above := strings.Count(d, "/") + 1 // "/" ... d
	room := protocol.MaxWatchMissingDirs - above
	for i := 0; i <= room; i++ {
		os.Mkdir(filepath.Join(d, fmt.Sprint("d", i)), 0o755)
	}
	inDirs := func(i int) string { return filepath.Join(d, fmt.Sprint("d", i), "x") }
	if !watch(names(room, inDirs)) {
		t.Errorf("not watching %d directories", protocol.MaxWatchMissingDirs)
	}
	if watch(names(room+1, inDirs)) {
		t.Error("watching one directory too many")
	}
	// Present's parent counts, Present itself does not.
	if !watch(names(room, inDirs), filepath.Join(d, "d0")) {
		t.Error("present's own directory was counted")
	}
	os.MkdirAll(filepath.Join(d, "e", "f"), 0o755)
	if watch(names(room, inDirs), filepath.Join(d, "e", "f")) {
		t.Error("present's parent was not counted")
	}
	// Depth counts the same way.
	deep := d
	for i := 0; i < room; i++ {
		deep = filepath.Join(deep, "l")
	}
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	if !watch(uris(filepath.Join(deep, "x"))) {
		t.Error("not watching the deepest path")
	}
	os.Mkdir(filepath.Join(deep, "l"), 0o755)
	if watch(uris(filepath.Join(deep, "l", "x"))) {
		t.Error("watching a path one directory too deep")
	}
}

func TestWatchMissingProcessBoundIsExhausted(t *testing.T) {
	w := newTestWatcher(t, fsTestSession(t))
	d := watchDir(t)
	held := 0
	for len(inotifySlots) < cap(inotifySlots) {
		inotifySlots <- struct{}{}
		held++
	}
	defer func() {
		for ; held > 0; held-- {
			<-inotifySlots
		}
	}()
	_, _, err := w.WatchMissing(protocol.FsWatchMissingParams{WatchID: 1, Missing: uris(filepath.Join(d, "x"))})
	if protocol.KindOf(err) != protocol.KindExhausted {
		t.Fatalf("past %d watches: %v, want exhausted", maxInotifyInstances, err)
	}
	<-inotifySlots
	held--
	if !w.watch(t, 2, uris(filepath.Join(d, "x"))) {
		t.Fatal("not watching once a slot is free")
	}
}

func TestWatchMissingSessionBoundAndEnd(t *testing.T) {
	base := runtime.NumGoroutine()
	s := fsTestSession(t)
	d := watchDir(t)
	var ws []*MissingWatcher
	for i := 0; i < maxMissingWatchers; i++ {
		w, err := s.NewMissingWatcher(func(uint64) {})
		if err != nil {
			t.Fatal(err)
		}
		res, start, err := w.WatchMissing(protocol.FsWatchMissingParams{WatchID: 1, Missing: uris(filepath.Join(d, fmt.Sprint("x", i)))})
		if err != nil || !res.Watching {
			t.Fatalf("watch: %v %v", res, err)
		}
		start()
		ws = append(ws, w)
	}
	if _, err := s.NewMissingWatcher(func(uint64) {}); protocol.KindOf(err) != protocol.KindExhausted {
		t.Fatalf("watcher past the bound: %v, want exhausted", err)
	}
	if got := len(inotifySlots); got != maxMissingWatchers {
		t.Fatalf("%d instances for %d watches", got, maxMissingWatchers)
	}
	// The session ends: no new watcher, no new watch.
	s.End()
	if _, err := s.NewMissingWatcher(func(uint64) {}); protocol.KindOf(err) != protocol.KindUnknownSession {
		t.Fatalf("watcher after End: %v", err)
	}
	if _, _, err := ws[0].WatchMissing(protocol.FsWatchMissingParams{WatchID: 2, Missing: uris(filepath.Join(d, "y"))}); protocol.KindOf(err) != protocol.KindUnknownSession {
		t.Fatalf("watch after End: %v", err)
	}
	// Their connections close them: every instance and goroutine goes.
	for _, w := range ws {
		w.Close()
		w.Close()
	}
	if got := len(inotifySlots); got != 0 {
		t.Fatalf("%d instances left", got)
	}
	watchers.Lock()
	left := watchers.n[s]
	watchers.Unlock()
	if left != 0 {
		t.Fatalf("%d watchers still counted", left)
	}
	waitGoroutines(t, base)
}

// waitGoroutines waits until the goroutine count is back to base; a
// goroutine that has signalled its end may still be on its way out.
func waitGoroutines(t *testing.T, base int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		runtime.Gosched()
		time.Sleep(time.Millisecond)
	}
}

func TestWatchMissingCloseWaitsForTheGoroutine(t *testing.T) {
	base := runtime.NumGoroutine()
	d := watchDir(t)
	for i := 0; i < 20; i++ {
		w, err := fsTestSession(t).NewMissingWatcher(func(uint64) {})
		if err != nil {
			t.Fatal(err)
		}
		res, start, err := w.WatchMissing(protocol.FsWatchMissingParams{WatchID: 1, Missing: uris(filepath.Join(d, "x"))})
		if err != nil || !res.Watching {
			t.Fatal(res, err)
		}
		start()
		if i%2 == 0 {
			os.WriteFile(filepath.Join(d, "x"), nil, 0o644) // fire, racing Close
		}
		w.Close()
		os.Remove(filepath.Join(d, "x"))
	}
	waitGoroutines(t, base)
	if got := len(inotifySlots); got != 0 {
		t.Fatalf("%d instances left", got)
	}
}

func TestWatchMissingJudgesBySandboxPolicy(t *testing.T) {
	w := newTestWatcher(t, fsTestSession(t))
	d := watchDir(t)
	secret := filepath.Join(d, "secret")
	os.Mkdir(secret, 0o755)
	policy := map[string]any{"entries": []map[string]any{{"path": ":root", "access": "read"}, {"path": secret, "access": "none"}}, "cwd": d}
	_, _, err := w.WatchMissing(protocol.FsWatchMissingParams{WatchID: 1, Missing: uris(filepath.Join(d, "x"), filepath.Join(secret, "x")), Sandbox: policy})
	if protocol.KindOf(err) != protocol.KindPermission {
		t.Fatalf("a denied path: %v, want permission", err)
	}
	res, start, err := w.WatchMissing(protocol.FsWatchMissingParams{WatchID: 1, Missing: uris(filepath.Join(d, "x")), Sandbox: policy})
	if err != nil || !res.Watching {
		t.Fatalf("an allowed path: %v %v", res, err)
	}
	start()
}

// The kernel's own refusals are told by kind.
func TestWatchMissingInotifyErrorKinds(t *testing.T) {
	for _, c := range []struct {
		err  error
		kind protocol.Kind
	}{{unix.EMFILE, protocol.KindExhausted}, {unix.ENOSPC, protocol.KindExhausted}, {syscall.EIO, protocol.KindInternal}} {
		if got := protocol.KindOf(inotifyError(c.err)); got != c.kind {
			t.Errorf("%v: %s, want %s", c.err, got, c.kind)
		}
	}
}
