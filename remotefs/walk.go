//go:build linux || darwin || freebsd

package remotefs

// fs/walk: a breadth-first listing of a tree, as codex 0.171's exec-server
// answers it (protocol/fs_walk.go has the semantics), judged by the
// call's sandbox policy and bounded.
//
// Judgement. Every directory is read through a descriptor whose real
// place (/proc/self/fd) the policy judges first; every entry's place is
// that real directory plus its name, and a followed symlink's is where
// the opened target really is. Like codex's sandboxed walk: an entry the
// policy shuts ("none") inside a readable directory is listed — its name
// is readable there — but not read (an error for it, as codex reports
// one); what nothing grants, and the executor's own secrets (with or
// without a policy), are not there at all.
//
// Descriptors. A pending directory is remembered by where it really was
// and its device and inode, not by an open descriptor (a walk may hold
// ten thousand of them): it is reopened with no symlink followed
// anywhere (openat2 RESOLVE_NO_SYMLINKS), checked to be the same inode,
// and judged again by where the new descriptor is. A directory swapped
// for a symlink or another directory meanwhile is reported, never read.
//
// Bounds: codex's limits, refused above its maximums (protocol.MaxWalk*),
// and codex's output budget (walkOutputBudget, 4 MiB by its measure); the
// visited set and the queue hold at most one item per entry listed; a
// directory's names are kept in a heap of at most the entries still
// allowed plus one; and two of our own: maxWalkPathBytes of paths held
// (errors and pending directories too) and maxWalkScanned names read,
// past either the walk stops, truncated. A walk holds at most three
// descriptors at a time (its root, the directory it reads, a link's
// target).

import (
	"container/heap"
	"errors"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/outpost-exec/outpost/internal/errkind"
	"github.com/outpost-exec/outpost/pathmap"
	"github.com/outpost-exec/outpost/protocol"
)

// Our own bounds of one walk, beyond codex's limits (variables only so
// that tests can lower them).
var (
	// maxWalkPathBytes bounds the bytes of paths one walk holds (entries,
	// errors, pending directories), so its reply stays well within
	// protocol.MaxMessageBytes whatever the names' lengths.
	maxWalkPathBytes = 32 << 20
	// maxWalkScanned bounds the names one walk reads, those it leaves
	// out (symlinks, sockets, names past the entry limit) included: a
	// directory of millions of names cannot keep a call running.
	maxWalkScanned = 1 << 21
)

// direntBufBytes is the getdents buffer of a walk.
const direntBufBytes = 32 << 10

// walkOpts are a request's limits, checked.
type walkOpts struct {
	maxDepth, maxDirs, maxEntries int
	follow, prune                 bool
}

// walkLimits checks that every required option is present, in codex's
// words: its serde names the first field missing.
func walkLimits(o *protocol.FsWalkOptions) error {
	missing := func(field string) error {
		return protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "missing field `%s`", field)
	}
	switch {
	case o == nil:
		return missing("options")
	case o.MaxDepth == nil:
		return missing("maxDepth")
	case o.MaxDirectories == nil:
		return missing("maxDirectories")
	case o.MaxEntries == nil:
		return missing("maxEntries")
	case o.FollowDirectorySymlinks == nil:
		return missing("followDirectorySymlinks")
	}
	return nil
}

// walkBounds checks the limits walkLimits found present as codex does:
// none of 0 but the depth, none above codex's maximums.
func walkBounds(o *protocol.FsWalkOptions) (walkOpts, error) {
	depth, dirs, entries := *o.MaxDepth, *o.MaxDirectories, *o.MaxEntries
	if dirs == 0 || entries == 0 {
		return walkOpts{}, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidRequest, "filesystem walk limits must be greater than zero")
	}
	if depth > protocol.MaxWalkDepth || dirs > protocol.MaxWalkDirectories || entries > protocol.MaxWalkEntries {
		return walkOpts{}, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidRequest, "filesystem walk limits exceed maximums: depth=%d, directories=%d, entries=%d",
			protocol.MaxWalkDepth, protocol.MaxWalkDirectories, protocol.MaxWalkEntries)
	}
	return walkOpts{maxDepth: int(depth), maxDirs: int(dirs), maxEntries: int(entries), follow: *o.FollowDirectorySymlinks, prune: o.PruneHiddenDirectories}, nil
}

// Walk answers fs/walk.
func (s *Session) Walk(p protocol.FsWalkParams) (any, error) {
	if err := walkLimits(p.Options); err != nil {
		return nil, err
	}
	r, n, err := s.fsBegin(protocol.MethodFsWalk, p.Sandbox, p.Path)
	if err != nil {
		return nil, err
	}
	o, err := walkBounds(p.Options)
	if err != nil {
		return nil, err
	}
	w := &walker{r: r, o: o, visited: map[devIno]struct{}{},
		res: protocol.FsWalkResult{Entries: []protocol.FsWalkEntry{}, Errors: []protocol.FsWalkError{}}}
	for _, h := range s.cfg.Hidden {
		w.hidden = append(w.hidden, filepath.Clean(h))
		if real := realPath(h); real != filepath.Clean(h) {
			w.hidden = append(w.hidden, real)
		}
	}
	if err := w.walkRoot(n); err != nil {
		return nil, err
	}
	return w.res, nil
}

// devIno names a directory for the visited set.
type devIno struct{ dev, ino uint64 }

// walkDir is a directory waiting to be read.
type walkDir struct {
	shown string // where it is under the walk's path, natively
	real  string // where it really was when it was listed
	id    devIno
	depth int
	isDir bool // for a symlink's target
}

// walker is one fs/walk.
type walker struct {
	r      *fsReq
	o      walkOpts
	hidden []string // the executor's secrets, as given and resolved
	res    protocol.FsWalkResult

	dirs    int // directories read or tried, the walk's root included
	counted int // names counted toward the entry limit (listed or not)
	output  int // codex's measure of the entries listed: at most walkOutputBudget
	bytes   int // path bytes held: at most maxWalkPathBytes
	scanned int // names read: at most maxWalkScanned
	stopped bool
	// visited holds the directories queued or read, the root included:
	// at most one per entry listed, plus the root.
	visited map[devIno]struct{}
	queue   []walkDir // FIFO from head; at most one per entry listed
	head    int
	buf     []byte
}

// sight is what a call may see of a place.
type sight int

const (
	sightOpen sight = iota // readable
	sightShut              // an entry of the policy denies it: visible from a readable parent, not readable
	sightGone              // a secret of the executor, or granted by nothing: not there for this call
)

// sight judges real (a real path, from a descriptor plus at most a name)
// for reading.
func (w *walker) sight(real string) sight {
	for _, h := range w.hidden {
		if within(h, real) {
			return sightGone
		}
	}
	pol := w.r.pol
	if pol == nil || pol.AllowsReal(real, false) {
		return sightOpen
	}
	for _, e := range pol.Entries {
		if within(e.Path, real) {
			return sightShut
		}
	}
	return sightGone
}

// visible reports whether the call may learn that real exists: it is
// readable, or shut inside a readable directory (whose listing names it).
func (w *walker) visible(real string) bool {
	switch w.sight(real) {
	case sightOpen:
		return true
	case sightShut:
		return real != "/" && w.sight(filepath.Dir(real)) == sightOpen
	}
	return false
}

// errno is the system error err carries (0: none).
func errno(err error) syscall.Errno {
	var e syscall.Errno
	errors.As(err, &e)
	return e
}

// muslErrorText renders e as codex's Rust does (io::Error's Display, from
// musl's strerror, which codex's static build carries): "Permission
// denied (os error 13)", "Symbolic link loop (os error 40)" where Go
// would say "too many levels of symbolic links".
func muslErrorText(e syscall.Errno) string {
	text, ok := muslErrors[e]
	if !ok {
		text = e.Error()
		if text != "" {
			text = strings.ToUpper(text[:1]) + text[1:]
		}
	}
	return text + " (os error " + strconv.Itoa(int(e)) + ")"
}

// muslErrors are musl's texts where they differ from Go's (capitalised).
var muslErrors = map[syscall.Errno]string{
	unix.ENOENT:       "No such file or directory",
	unix.EACCES:       "Permission denied",
	unix.EPERM:        "Operation not permitted",
	unix.ENOTDIR:      "Not a directory",
	unix.ELOOP:        "Symbolic link loop",
	unix.ENAMETOOLONG: "Filename too long",
	unix.EIO:          "I/O error",
	unix.ENOMEM:       "Out of memory",
	unix.EMFILE:       "No file descriptors available",
	unix.ENFILE:       "Too many open files in system",
	unix.ESTALE:       "Stale file handle",
	unix.EINVAL:       "Invalid argument",
	unix.EBADF:        "Bad file descriptor",
	unix.EOVERFLOW:    "Value too large for data type",
}

// rootError is the error of a walk whose path cannot be walked: codex's
// code for what the system said, and its text.
func (w *walker) rootError(e syscall.Errno) error {
	if e == 0 {
		e = unix.EIO // not a system error: should not happen
	}
	code := protocol.CodeInternal
	switch e {
	case unix.ENOENT:
		code = protocol.CodeNotFound
	case unix.EACCES, unix.EPERM, unix.EINVAL:
		code = protocol.CodeInvalidRequest
	}
	return protocol.KindErrorf(errkind.Of(e, protocol.KindInternal), code, "%s", muslErrorText(e))
}

// judgeRoot is the error for a root the policy does not let the call
// read, as codex's sandbox answers: granted by nothing (or a secret) is
// missing, inside a denied directory is denied. nil: the root may be
// looked at (it is readable, or denied but named by a readable parent).
func (w *walker) judgeRoot(real string) error {
	switch w.sight(real) {
	case sightGone:
		return w.rootError(unix.ENOENT)
	case sightShut:
		if !w.visible(real) {
			return w.rootError(unix.EACCES)
		}
	}
	return nil
}

// walkRoot walks the tree at n.
func (w *walker) walkRoot(n string) error {
	fd, err := openat2(unix.AT_FDCWD, n, oPathObject)
	if err != nil {
		if w.r.pol != nil || len(w.hidden) > 0 {
			if jerr := w.judgeRoot(realPath(n)); jerr != nil {
				return jerr
			}
		}
		return w.rootError(errno(err))
	}
	defer unix.Close(fd)
	real, err := w.r.placed(n, fd, n)
	if err != nil {
		if e := errno(err); e != 0 {
			return w.rootError(e)
		}
		return err
	}
	if err := w.judgeRoot(real); err != nil {
		return err
	}
	// codex: a symlink at the path itself is not followed without the
	// option, and what is not a directory has nothing to list.
	var lst unix.Stat_t
	if !w.o.follow && unix.Lstat(n, &lst) == nil && lst.Mode&unix.S_IFMT == unix.S_IFLNK {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return w.rootError(errno(err))
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil
	}
	root := walkDir{shown: n, real: real, id: devIno{uint64(st.Dev), st.Ino}}
	w.visited[root.id] = struct{}{}
	w.dirs = 1
	if w.sight(real) != sightOpen {
		w.fail(n, unix.EACCES)
		return nil
	}
	d, err := reopen(fd, unix.O_RDONLY|unix.O_DIRECTORY, real)
	if err != nil {
		w.fail(n, errno(err))
		return nil
	}
	w.buf = make([]byte, direntBufBytes)
	w.list(root, int(d.Fd()), real)
	d.Close()
	for w.head < len(w.queue) && !w.stopped {
		item := w.queue[w.head]
		w.queue[w.head] = walkDir{} // let its strings go
		w.head++
		if w.dirs >= w.o.maxDirs {
			w.res.Truncated = true
			return nil
		}
		w.dirs++
		w.readQueued(item)
	}
	return nil
}

// stop ends the walk for a limit.
func (w *walker) stop() {
	w.res.Truncated, w.stopped = true, true
}

// hold accounts n more path bytes; false (and the walk stopped) past
// maxWalkPathBytes.
func (w *walker) hold(n int) bool {
	if w.bytes+n > maxWalkPathBytes {
		w.stop()
		return false
	}
	w.bytes += n
	return true
}

// uri is how a native path under the walk's root is reported.
func (w *walker) uri(shown string) string {
	return pathmap.URI(w.r.s.cfg.Paths.ToClient(shown))
}

// fail reports the directory shown as unreadable.
func (w *walker) fail(shown string, e syscall.Errno) {
	if e == 0 {
		e = unix.EIO
	}
	u, msg := w.uri(shown), muslErrorText(e)
	if w.hold(len(u) + len(msg)) {
		w.res.Errors = append(w.res.Errors, protocol.FsWalkError{Path: u, Message: msg})
	}
}

// readQueued reads a directory listed before: reopened without
// following anything, the same inode, judged where it is now.
func (w *walker) readQueued(item walkDir) {
	if w.sight(item.real) != sightOpen {
		w.fail(item.shown, unix.EACCES)
		return
	}
	fd, err := openat2NoSymlinks(unix.AT_FDCWD, item.real, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW)
	if err != nil {
		w.fail(item.shown, errno(err))
		return
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		w.fail(item.shown, errno(err))
		return
	}
	if (devIno{uint64(st.Dev), st.Ino}) != item.id {
		w.fail(item.shown, unix.ENOENT) // what was listed is gone from there
		return
	}
	real, err := w.r.placed(item.shown, fd, item.real)
	if err != nil {
		w.fail(item.shown, errno(err))
		return
	}
	if w.sight(real) != sightOpen {
		w.fail(item.shown, unix.EACCES)
		return
	}
	w.list(item, fd, real)
}

// What a directory's name is, once it counts toward the entry limit.
const (
	candFile  uint8 = iota // a regular file: listed
	candDir                // a directory: listed, and read in its turn
	candLink               // a symlink to a directory, followed: listed as a directory
	candOther              // counted, not listed: a fifo, a socket, a device, a symlink to a file, an unfollowed link
)

// walkCand is a name of a directory that counts toward the entry limit.
type walkCand struct {
	name string
	kind uint8
}

// candHeap is a max-heap by name: the largest of the names kept goes
// first when one more than the limit is held.
type candHeap []walkCand

func (h candHeap) Len() int           { return len(h) }
func (h candHeap) Less(i, j int) bool { return h[i].name > h[j].name }
func (h candHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *candHeap) Push(x any)        { *h = append(*h, x.(walkCand)) }
func (h *candHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	*h = old[:len(old)-1]
	return c
}

// Codex's budget for a walk's entries: each costs its URI's length plus
// walkEntryOverhead, and the walk stops, truncated, before the total
// passes walkOutputBudget (measured: 43690 entries of a 32-byte URI).
const (
	walkOutputBudget  = 4 << 20
	walkEntryOverhead = 64
)

// codexURILen is the length of path as codex spells it as a file: URI
// (the url crate's path-segment set; pathmap.URI escapes more).
func codexURILen(path string) int {
	n := len("file://")
	for i := 0; i < len(path); i++ {
		c := path[i]
		if c < 0x20 || c >= 0x7f || strings.IndexByte(" \"#<>?`{}%", c) >= 0 {
			n += 3
		} else {
			n++
		}
	}
	return n
}

// list lists the directory item (open for reading as fd, really at real)
// as codex does: in byte order of the names, every name whose target
// can be looked at counts toward the entry limit — a dangling link does
// not, a fifo does — and files and directories (and followed links to
// directories) are listed, the directories queued to be read.
func (w *walker) list(item walkDir, fd int, real string) {
	room := w.o.maxEntries - w.counted
	var kept candHeap // at most room+1
	err := readDirents(fd, w.buf, func(name string, typ uint8) bool {
		if w.scanned++; w.scanned > maxWalkScanned {
			return false
		}
		kind, ok := w.candidate(fd, real, name, typ)
		if !ok {
			return true
		}
		heap.Push(&kept, walkCand{name, kind})
		if len(kept) > room+1 {
			heap.Pop(&kept)
		}
		return true
	})
	if w.scanned > maxWalkScanned {
		w.stop()
		return
	}
	if err != nil {
		w.fail(item.shown, errno(err))
		return
	}
	sort.Slice(kept, func(i, j int) bool { return kept[i].name < kept[j].name })
	for i, c := range kept {
		if i >= room {
			w.stop() // a name past the limit
			return
		}
		w.counted++
		if c.kind != candOther && !w.emit(item, fd, real, c) {
			return
		}
	}
}

// candidate says whether name in the directory fd (really at real)
// counts toward the entry limit, and as what. A symlink counts when the
// call may look at its target; the executor's secrets never count.
func (w *walker) candidate(fd int, real, name string, typ uint8) (uint8, bool) {
	if typ == unix.DT_UNKNOWN {
		var st unix.Stat_t
		if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			return 0, false
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			typ = unix.DT_REG
		case unix.S_IFDIR:
			typ = unix.DT_DIR
		case unix.S_IFLNK:
			typ = unix.DT_LNK
		default:
			typ = unix.DT_FIFO // some other kind: counted, not listed
		}
	}
	if typ == unix.DT_LNK {
		t, ok := w.linkTarget(fd, name)
		switch {
		case !ok:
			return 0, false // dangling, a loop, or not there for this call
		case t.isDir && w.o.follow:
			return candLink, true
		}
		return candOther, true
	}
	if w.sight(filepath.Join(real, name)) == sightGone {
		return 0, false
	}
	switch typ {
	case unix.DT_REG:
		return candFile, true
	case unix.DT_DIR:
		return candDir, true
	}
	return candOther, true
}

// linkTarget opens what the symlink name in fd leads to and says where
// it really is, when the call may look at it.
func (w *walker) linkTarget(fd int, name string) (walkDir, bool) {
	tfd, err := openat2(fd, name, oPathObject)
	if err != nil {
		return walkDir{}, false
	}
	defer unix.Close(tfd)
	var st unix.Stat_t
	if unix.Fstat(tfd, &st) != nil {
		return walkDir{}, false
	}
	real, err := fdPath(tfd)
	if err != nil {
		if w.r.pol != nil || len(w.hidden) > 0 {
			return walkDir{}, false // cannot judge where it is
		}
		real = ""
	}
	if real != "" && !w.visible(real) {
		return walkDir{}, false
	}
	return walkDir{real: real, id: devIno{uint64(st.Dev), st.Ino}, isDir: st.Mode&unix.S_IFMT == unix.S_IFDIR}, true
}

// emit lists c, a name of the directory item (fd, really at real), and
// queues it when it is a directory to read; false: the walk stopped.
func (w *walker) emit(item walkDir, fd int, real string, c walkCand) bool {
	shown := filepath.Join(item.shown, c.name)
	var next walkDir
	switch c.kind {
	case candDir:
		var st unix.Stat_t
		if unix.Fstatat(fd, c.name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return true // gone or changed since it was read: not listed
		}
		next = walkDir{real: filepath.Join(real, c.name), id: devIno{uint64(st.Dev), st.Ino}}
	case candLink:
		t, ok := w.linkTarget(fd, c.name)
		if !ok || !t.isDir {
			return true
		}
		next = t
		if next.real == "" {
			next.real = shown // no /proc and no policy: the link's path stands in
		}
	}
	kind := protocol.WalkKindFile
	if c.kind != candFile {
		kind = protocol.WalkKindDirectory
	}
	client := w.r.s.cfg.Paths.ToClient(shown)
	cost := codexURILen(client) + walkEntryOverhead
	if w.output+cost > walkOutputBudget {
		w.stop()
		return false
	}
	w.output += cost
	u := pathmap.URI(client)
	if !w.hold(len(u)) {
		return false
	}
	w.res.Entries = append(w.res.Entries, protocol.FsWalkEntry{Path: u, Kind: kind})
	if c.kind == candFile || item.depth+1 > w.o.maxDepth || w.o.prune && strings.HasPrefix(c.name, ".") {
		return true
	}
	if _, seen := w.visited[next.id]; seen {
		return true // walked already (a link back, two links to one place)
	}
	if !w.hold(len(shown) + len(next.real)) {
		return false
	}
	w.visited[next.id] = struct{}{}
	next.shown, next.depth = shown, item.depth+1
	w.queue = append(w.queue, next)
	return true
}

func indexNUL(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return -1
}
