package remotefs

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/outpost-exec/outpost/protocol"
)

// Missing-path watches (fs/watchMissing; the semantics are in
// protocol/fs_watch.go). A MissingWatcher is one connection's state on its
// session: the highest watchId seen and at most one live watch. Each live
// watch has its own inotify instance, holding one watch per directory it
// needs, and one goroutine reading it; replacing, firing or closing the
// watch closes the instance, which drops its kernel watches and queued
// events at once, so no event of an old watch is ever mistaken for a new
// one's. A session that has ended refuses new watchers and watches; a
// watch already live goes when its connection closes its watcher.
//
// Paths go through Config.Paths like every fs call's; with a sandbox policy
// each must be readable under it.
//
// Bounds:
//   - per watch: protocol.MaxWatchMissingPaths paths and
//     protocol.MaxWatchMissingDirs inotify watches (codex's bounds; past
//     them the answer is watching false, as codex's);
//   - per connection: one live watch, one goroutine, one inotify instance;
//   - per session: maxMissingWatchers watchers (one per connection that
//     used fs/watchMissing and has not yet wound down; a session has one
//     connection at a time), refused past it as exhausted;
//   - per watcher: its goroutines, which Close waits for (at most one reads
//     events; one that fired may still be handing its notification over);
//   - per process: maxInotifyInstances live watches over every session
//     (the kernel allows a user 128 inotify instances by default), refused
//     past it as exhausted, as is the kernel's own refusal (EMFILE, ENOSPC).
const (
	maxMissingWatchers  = 4
	maxInotifyInstances = 64
)

// inotifySlots holds a token per live watch in this process.
var inotifySlots = make(chan struct{}, maxInotifyInstances)

// watchMask is what fires a watch: a directory entry made, removed,
// renamed, written or changed in attributes, and the directory itself
// removed or renamed. IN_ONLYDIR|IN_DONT_FOLLOW: a name that is no longer
// a directory, or is now a symlink, is not watched through.
const watchMask = unix.IN_ATTRIB | unix.IN_CREATE | unix.IN_DELETE | unix.IN_CLOSE_WRITE | unix.IN_MODIFY |
	unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR | unix.IN_DONT_FOLLOW

// MissingWatcher is one connection's fs/watchMissing state. Notify is
// called, from the watch's goroutine, once per watch that fires; it may
// block (the connection's send queue), and must return once the
// connection closes.
type MissingWatcher struct {
	s      *Session
	notify func(watchID uint64)

	mu     sync.Mutex
	last   uint64 // the highest watchId seen: a request must name a higher one
	cur    *missingWatch
	closed bool
	wg     sync.WaitGroup // the watches' goroutines
}

// watchers counts each session's live MissingWatchers (the per-session
// bound). It lives here, not in Session, so that a watcher's lifetime is
// its connection's alone: Close removes it.
var watchers struct {
	sync.Mutex
	n map[*Session]int
}

// NewMissingWatcher adds a watcher to the session, for one connection. It
// holds no resources until a watch is made; Close it when the connection
// ends.
func (s *Session) NewMissingWatcher(notify func(watchID uint64)) (*MissingWatcher, error) {
	if s.hasEnded() {
		return nil, protocol.KindErrorf(protocol.KindUnknownSession, protocol.CodeInvalidRequest, "session %s has ended", s.id)
	}
	watchers.Lock()
	defer watchers.Unlock()
	if watchers.n[s] >= maxMissingWatchers {
		return nil, protocol.KindErrorf(protocol.KindExhausted, protocol.CodeInvalidRequest,
			"%s: too many connections of session %s watch missing paths (limit %d)", protocol.MethodFsWatchMissing, s.id, maxMissingWatchers)
	}
	if watchers.n == nil {
		watchers.n = make(map[*Session]int)
	}
	watchers.n[s]++
	return &MissingWatcher{s: s, notify: notify}, nil
}

func (s *Session) hasEnded() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended
}

// Close drops the watch and the watcher, and waits until the watch's
// goroutine has returned: the connection must have stopped blocking
// notify first (its send queue shut down). Closing twice is a no-op.
func (w *MissingWatcher) Close() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	m := w.cur
	w.cur = nil
	if m != nil {
		m.cancel()
	}
	w.mu.Unlock()
	watchers.Lock()
	if watchers.n[w.s]--; watchers.n[w.s] <= 0 {
		delete(watchers.n, w.s)
	}
	watchers.Unlock()
	w.wg.Wait()
}

// WatchMissing answers fs/watchMissing. When it makes a watch, start (not
// nil) begins reading its events; the caller calls it once the reply is
// queued, so fs/missingChanged never overtakes the reply. Events that
// come meanwhile wait in the kernel's queue.
func (w *MissingWatcher) WatchMissing(p protocol.FsWatchMissingParams) (res protocol.FsWatchMissingResult, start func(), err error) {
	const method = protocol.MethodFsWatchMissing
	// Every path first, as codex parses them: a bad one changes nothing.
	targets := make([]string, 0, len(p.Missing)+1)
	watchable := true
	for _, raw := range p.Missing {
		n, ok, err := w.s.watchPath(raw)
		if err != nil {
			return res, nil, err
		}
		watchable = watchable && ok
		targets = append(targets, n)
	}
	present := ""
	if p.Present != nil {
		n, ok, err := w.s.watchPath(*p.Present)
		if err != nil {
			return res, nil, err
		}
		watchable = watchable && ok
		present = n
	}
	if p.Sandbox != nil {
		r, err := w.s.fsRequest(method, p.Sandbox)
		if err != nil {
			return res, nil, err
		}
		shown := append(append([]string(nil), p.Missing...), derefOr(p.Present))
		for i, n := range append(targets, present) {
			if n == "" {
				continue // a path that names nothing here: nothing is looked at
			}
			if err := r.check(shown[i], n, false); err != nil {
				return res, nil, err
			}
		}
	}

	if w.s.hasEnded() {
		return res, nil, protocol.KindErrorf(protocol.KindUnknownSession, protocol.CodeInvalidRequest, "session %s has ended", w.s.id)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return res, nil, protocol.KindErrorf(protocol.KindUnavailable, protocol.CodeInvalidRequest, "%s: the connection is closing", method)
	}
	if p.WatchID <= w.last {
		return res, nil, nil // stale: an older request overtaken by a newer one
	}
	w.last = p.WatchID
	if w.cur != nil {
		w.cur.cancel()
		w.cur = nil
	}
	if !watchable || len(p.Missing) == 0 || len(p.Missing) > protocol.MaxWatchMissingPaths {
		return res, nil, nil
	}
	if present != "" {
		targets = append(targets, present)
	}
	dirs, ok := watchDirs(targets, len(p.Missing))
	if !ok {
		return res, nil, nil
	}
	m, err := newMissingWatch(w, p.WatchID, targets, dirs)
	if err != nil || m == nil {
		return res, nil, err
	}
	// Verify after the watches are in place: whatever changed between the
	// first look and now would otherwise go unseen.
	if again, ok := watchDirs(targets, len(p.Missing)); !ok || !sameStrings(again, dirs) {
		m.cancel()
		return res, nil, nil
	}
	w.cur = m
	return protocol.FsWatchMissingResult{Watching: true}, m.start, nil
}

func derefOr(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func sameStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// watchPath maps one wire path of fs/watchMissing: ok is false for a
// well-formed URI that names no path on this host.
func (s *Session) watchPath(raw string) (native string, ok bool, err error) {
	if err := checkWatchPath(raw); err != nil {
		return "", false, err
	}
	n, err := s.cfg.Paths.ToExecutor(raw)
	if err != nil {
		return "", false, nil
	}
	return n, true, nil
}

// watchDirs is the directories a watch of targets needs, sorted and
// distinct: every existing proper ancestor of each. The first missing
// targets must be absent, the rest (Present) must exist and not be a
// symlink; no existing ancestor may be a symlink or a non-directory, and
// there may be at most MaxWatchMissingDirs of them. ok is false when a
// rule fails or a path cannot be examined (EACCES, ENAMETOOLONG): such a
// path cannot be watched.
func watchDirs(targets []string, missing int) ([]string, bool) {
	seen := make(map[string]struct{}, protocol.MaxWatchMissingDirs)
	for i, t := range targets {
		exists, ok := walkAncestors(t, seen)
		if !ok || len(seen) > protocol.MaxWatchMissingDirs {
			return nil, false
		}
		if i < missing && exists {
			return nil, false
		}
		if i >= missing {
			var st unix.Stat_t
			if !exists || unix.Lstat(t, &st) != nil || st.Mode&unix.S_IFMT == unix.S_IFLNK {
				return nil, false
			}
		}
	}
	dirs := make([]string, 0, len(seen))
	for d := range seen {
		dirs = append(dirs, d)
	}
	sortStrings(dirs)
	return dirs, true
}

// walkAncestors adds t's existing proper ancestors to seen, from "/" down,
// and reports whether t itself exists (lstat: a dangling symlink does).
// It stops adding once seen passes the bound.
func walkAncestors(t string, seen map[string]struct{}) (exists, ok bool) {
	if t == "/" {
		return true, true
	}
	cur := "/"
	rest := strings.TrimPrefix(t, "/")
	for {
		seen[cur] = struct{}{}
		if len(seen) > protocol.MaxWatchMissingDirs {
			return false, true
		}
		name, tail, more := strings.Cut(rest, "/")
		next := filepath.Join(cur, name)
		var st unix.Stat_t
		err := unix.Lstat(next, &st)
		switch {
		case err == unix.ENOENT:
			return false, true
		case err != nil:
			return false, false
		case !more:
			return true, true
		case st.Mode&unix.S_IFMT != unix.S_IFDIR:
			return false, false // a symlink or a file on the way
		}
		cur, rest = next, tail
	}
}

func sortStrings(s []string) {
	// insertion sort: at most MaxWatchMissingDirs entries
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// missingWatch is one live watch: its inotify instance and what its
// events are judged against.
type missingWatch struct {
	w       *MissingWatcher
	id      uint64
	targets []string           // native paths; an event on one or on an ancestor of one fires
	dirs    map[int32][]string // inotify watch descriptor -> directories (bind mounts share one)
	f       *os.File           // the instance, non-blocking, so Close wakes a Read

	mu       sync.Mutex
	started  bool
	canceled bool
	released bool
}

// newMissingWatch makes the inotify instance and its watches. A
// directory that vanished meanwhile yields (nil, nil): a change, so no
// watch.
func newMissingWatch(w *MissingWatcher, id uint64, targets, dirs []string) (*missingWatch, error) {
	const method = protocol.MethodFsWatchMissing
	select {
	case inotifySlots <- struct{}{}:
	default:
		return nil, protocol.KindErrorf(protocol.KindExhausted, protocol.CodeInvalidRequest,
			"%s: too many missing-path watches on this executor (limit %d); try again later", method, maxInotifyInstances)
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		<-inotifySlots
		return nil, inotifyError(err)
	}
	m := &missingWatch{w: w, id: id, targets: targets, dirs: make(map[int32][]string, len(dirs)),
		f: os.NewFile(uintptr(fd), "inotify")}
	for _, d := range dirs {
		wd, err := unix.InotifyAddWatch(fd, d, watchMask)
		if err != nil {
			m.cancel()
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EACCES) {
				return nil, nil
			}
			return nil, inotifyError(err)
		}
		m.dirs[int32(wd)] = append(m.dirs[int32(wd)], d)
	}
	return m, nil
}

func inotifyError(err error) error {
	kind := protocol.KindInternal
	if errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE) || errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.ENOMEM) {
		kind = protocol.KindExhausted
	}
	return protocol.KindErrorf(kind, protocol.CodeInternal, "%s: cannot watch: %v", protocol.MethodFsWatchMissing, err)
}

// start runs the goroutine that waits for the watch's first relevant
// event (once; nothing after cancel).
func (m *missingWatch) start() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.started || m.canceled {
		return
	}
	m.started = true
	m.w.wg.Add(1)
	go m.run()
}

// cancel closes the instance (its watches and queued events go with it)
// and gives back its slot. The goroutine, if any, returns without
// notifying.
func (m *missingWatch) cancel() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.canceled = true
	m.releaseLocked()
	m.started = true // never now, if not yet
}

func (m *missingWatch) releaseLocked() {
	if m.released {
		return
	}
	m.released = true
	m.f.Close()
	<-inotifySlots
}

func (m *missingWatch) run() {
	defer m.w.wg.Done()
	// Room for at least one event with the longest name (16 + NAME_MAX + 1).
	buf := make([]byte, 4096)
	for {
		n, err := m.f.Read(buf)
		if err != nil {
			if errors.Is(err, os.ErrClosed) {
				return // cancelled
			}
			break // the instance failed: the client must not go on trusting its cache
		}
		if m.fires(buf[:n]) {
			break
		}
	}
	if !m.w.take(m) {
		return
	}
	m.mu.Lock()
	m.releaseLocked()
	m.mu.Unlock()
	m.w.notify(m.id)
}

// take makes m no longer the watcher's watch; false when it no longer
// was (replaced or closed meanwhile), when nothing may be sent for it.
func (w *MissingWatcher) take(m *missingWatch) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cur != m {
		return false
	}
	w.cur = nil
	return true
}

// fires reports whether a batch of inotify events holds one that changes
// a target: one on a target or on an ancestor of one, or an overflow
// (events were lost, so one might have).
func (m *missingWatch) fires(b []byte) bool {
	for len(b) >= unix.SizeofInotifyEvent {
		wd := int32(binary.NativeEndian.Uint32(b[0:4]))
		mask := binary.NativeEndian.Uint32(b[4:8])
		nameLen := int(binary.NativeEndian.Uint32(b[12:16]))
		if unix.SizeofInotifyEvent+nameLen > len(b) {
			return true // a torn event: cannot happen; be safe
		}
		name := strings.TrimRight(string(b[unix.SizeofInotifyEvent:unix.SizeofInotifyEvent+nameLen]), "\x00")
		b = b[unix.SizeofInotifyEvent+nameLen:]
		if mask&(unix.IN_Q_OVERFLOW|unix.IN_UNMOUNT) != 0 {
			return true
		}
		for _, d := range m.dirs[wd] {
			p := d
			if name != "" {
				p = filepath.Join(d, name)
			}
			if m.concerns(p) {
				return true
			}
		}
	}
	return false
}

// concerns reports whether p is a target or an ancestor of one.
func (m *missingWatch) concerns(p string) bool {
	for _, t := range m.targets {
		if t == p || p == "/" || strings.HasPrefix(t, p) && t[len(p)] == '/' {
			return true
		}
	}
	return false
}
