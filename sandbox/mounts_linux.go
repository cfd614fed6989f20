//go:build linux

package sandbox

// The sandbox's view of the file system, built in two halves.
//
// The executor half (setup, run as the executor just before the fork):
//   - when the executor is root and commands run as an unprivileged host id
//     (User), every workspace and writable root is cloned as a detached
//     mount (open_tree OPEN_TREE_CLONE) and, unless that id already owns
//     it or it is a sticky world-writable directory such as /tmp, ID-mapped
//     (mount_setattr MOUNT_ATTR_IDMAP) so that its owner's ids on disk are
//     the command's ids in the mount: the command may write its workspace
//     and what it creates lands with the owner's ids. Read-only workspaces
//     get the same clone, read-only. nosuid and nodev always. The
//     descriptors pass to the helper as fds 3, 4, …;
//   - a placeholder directory (mode 000, owned by the executor) is made for
//     each protected name missing at the top of a writable root, so that a
//     read-only mount can hold its place while the command runs; it is
//     removed when the last command using it has exited.
//
// The helper half (applyMounts, run as root of the command's own user
// namespace, which is the unprivileged id on the host):
//   - each workspace mount is moved into place (shallow first). When a
//     directory above it is not searchable by the command's id (a 0700
//     home or t.TempDir's parent), an empty tmpfs stands in for that
//     directory, holding only the path down to the mounts below it; what
//     else the directory holds stays out of reach, as the ids say;
//   - writable roots become mount points (a clone moved onto itself when
//     no descriptor was passed), so they cannot be renamed away or replaced;
//   - protected names (the entry itself — a directory, file or symlink —
//     and a symlink's target) get read-only clones of themselves on top;
//   - a /proc of the command's PID namespace; "none" paths hidden;
//   - with the network off, every pathname Unix socket bound on this
//     network namespace (/proc/net/unix) outside the writable roots is
//     covered with /dev/null.

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// usernsAttr puts the helper into its own user, mount and PID namespace.
// With user nil the executor's own ids map to themselves (a non-root
// executor); otherwise root inside the namespace is user on the host, with
// no supplementary groups.
func usernsAttr(attr *syscall.SysProcAttr, user *User) {
	attr.Cloneflags |= unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID
	if user == nil {
		// Root inside, so the helper keeps the namespace's capabilities
		// across its exec for the set-up; the executor's ids outside.
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}
		attr.GidMappingsEnableSetgroups = false
		return
	}
	attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: user.UID, Size: 1}}
	attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: user.GID, Size: 1}}
	// Allowed so the child can drop the executor's supplementary groups
	// (root's group 0 among them); inside, only gid 0 is mapped, so there
	// is nothing else it could take.
	attr.GidMappingsEnableSetgroups = true
	attr.Credential = &syscall.Credential{Uid: 0, Gid: 0, Groups: []uint32{}}
}

// --- executor half -----------------------------------------------------------

// idmaps caches one user namespace per (owner uid, owner gid, user): the
// mapping an ID-mapped mount takes. Bound: maxIdmaps; past it the oldest
// is closed (mounts made with it keep their mapping).
var idmaps struct {
	sync.Mutex
	fds   map[[4]int]int
	order [][4]int
}

const maxIdmaps = 64

// idmapFD returns a user namespace mapping the on-disk owner (uid, gid) to
// user's ids.
func idmapFD(uid, gid int, user User) (int, error) {
	key := [4]int{uid, gid, user.UID, user.GID}
	idmaps.Lock()
	defer idmaps.Unlock()
	if fd, ok := idmaps.fds[key]; ok {
		return fd, nil
	}
	bin, err := self()
	if err != nil {
		return -1, err
	}
	// A helper that holds its new user namespace until its stdin closes.
	cmd := exec.Command(bin, holdArg)
	cmd.Args[0] = HelperName
	cmd.Env = []string{}
	in, err := cmd.StdinPipe()
	if err != nil {
		return -1, err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  unix.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: uid, HostID: user.UID, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: gid, HostID: user.GID, Size: 1}},
		Pdeathsig:   syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		return -1, fmt.Errorf("creating the id mapping %d:%d→%s: %w", uid, gid, user, err)
	}
	fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	in.Close()
	cmd.Wait()
	if err != nil {
		return -1, fmt.Errorf("opening the id mapping's namespace: %w", err)
	}
	if idmaps.fds == nil {
		idmaps.fds = map[[4]int]int{}
	}
	if len(idmaps.order) >= maxIdmaps {
		old := idmaps.order[0]
		idmaps.order = idmaps.order[1:]
		unix.Close(idmaps.fds[old])
		delete(idmaps.fds, old)
	}
	idmaps.fds[key] = fd
	idmaps.order = append(idmaps.order, key)
	return fd, nil
}

// holdArg makes the helper binary wait for its stdin to close.
const holdArg = "--hold-namespace"

// placeholders counts the commands using each placeholder directory.
var placeholders struct {
	sync.Mutex
	m map[string]*placeholder
}

type placeholder struct {
	refs     int
	dev, ino uint64
}

// acquirePlaceholder makes sure a placeholder stands at path (absent when
// the policy was resolved). It reports false when something else appeared
// there meanwhile (then it is protected as found).
func acquirePlaceholder(path string) (bool, error) {
	placeholders.Lock()
	defer placeholders.Unlock()
	if ph := placeholders.m[path]; ph != nil {
		ph.refs++
		return true, nil
	}
	dir, err := unix.Open(filepath.Dir(path), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return false, err
	}
	defer unix.Close(dir)
	name := filepath.Base(path)
	if err := unix.Mkdirat(dir, name, 0); err != nil {
		if errors.Is(err, unix.EEXIST) {
			return false, nil
		}
		return false, err
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return false, err
	}
	if st.Mode&0o7777 != 0 {
		unix.Fchmodat(dir, name, 0, 0) // a default ACL gave it bits
	}
	if placeholders.m == nil {
		placeholders.m = map[string]*placeholder{}
	}
	placeholders.m[path] = &placeholder{refs: 1, dev: st.Dev, ino: st.Ino}
	return true, nil
}

// retainPlaceholder takes another reference to the placeholder at path,
// if one of ours stands there.
func retainPlaceholder(path string) bool {
	placeholders.Lock()
	defer placeholders.Unlock()
	if ph := placeholders.m[path]; ph != nil {
		ph.refs++
		return true
	}
	return false
}

// releasePlaceholder removes the placeholder when its last user is done,
// if it is still the empty directory made for it.
func releasePlaceholder(path string) {
	placeholders.Lock()
	defer placeholders.Unlock()
	ph := placeholders.m[path]
	if ph == nil {
		return
	}
	if ph.refs--; ph.refs > 0 {
		return
	}
	delete(placeholders.m, path)
	dir, err := unix.Open(filepath.Dir(path), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return
	}
	defer unix.Close(dir)
	var st unix.Stat_t
	name := filepath.Base(path)
	if unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Dev == ph.dev && st.Ino == ph.ino {
		unix.Unlinkat(dir, name, unix.AT_REMOVEDIR) // fails, harmlessly, if someone filled it
	}
}

// setup materialises the prepared spec at the moment of the fork.
func (p Prepared) setup() (Launch, error) {
	sp := p.sp
	var l Launch
	fail := func(err error) (Launch, error) {
		for _, f := range l.Files {
			f.Close()
		}
		return Launch{}, err
	}
	holds := &placeholderHolds{}
	if sp.MountNamespace {
		holds.present = append([]string(nil), sp.Protected...)
		holds.absent = p.absent
		// Absent names are protected whether their placeholder is made
		// (by Hold) or something else appears there first; where nothing
		// can stand (the root is gone), the helper finds nothing to
		// protect.
		sp.Protected = append(sp.Protected, p.absent...)
		for _, m := range p.mounts {
			ms := mountSpec{Path: m.Path, ReadOnly: m.ReadOnly}
			if m.ReadOnly && depth(m.Path) <= 1 {
				continue // "/" or /var as a read-only cwd: read with the user's own rights
			}
			if p.user != nil && !m.between && needsIDMap(m.Path, *p.user) {
				f, err := cloneForUser(m.Path, m.ReadOnly, *p.user)
				switch {
				case err == nil:
					ms.FD = 3 + len(l.Files)
					l.Files = append(l.Files, f)
				case !worldWritableDir(m.Path):
					return fail(fmt.Errorf("%w: %v", ErrCannotEnforce, err))
				}
				// A world-writable directory the executor cannot ID-map
				// is bound as it is: the command may add to it, as any
				// user may, and no more.
			}
			if ms.FD == 0 && !insideOtherRoot(sp.ReadWrite, m.Path) {
				// Reachable as it is, and its parent is read-only to the
				// command (Landlock), so it cannot be renamed away: no
				// mount needed.
				continue
			}
			sp.Mounts = append(sp.Mounts, ms)
		}
	}
	l.sp, l.namespaced = sp, sp.MountNamespace
	user := p.user
	l.User = user
	l.apply = func(attr *syscall.SysProcAttr) {
		if sp.MountNamespace {
			usernsAttr(attr, user)
		}
	}
	l.hold, l.Release = holds.hold, holds.release
	return l, nil
}

// placeholderHolds are the placeholders one command holds (Launch.Hold),
// released after it (Launch.Release).
type placeholderHolds struct {
	present []string // protected names found present when resolving
	absent  []string // protected names found absent

	mu     sync.Mutex
	held   bool
	placed []string
}

// hold makes sure a placeholder stands for every absent name, and holds
// any placeholder of another command's among the names found present: it
// could be removed while this command runs (if it is gone already, this
// command makes its own).
func (h *placeholderHolds) hold() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held {
		return
	}
	h.held = true
	for _, pr := range h.present {
		if retainPlaceholder(pr) {
			h.placed = append(h.placed, pr)
		} else if _, err := os.Lstat(pr); errors.Is(err, os.ErrNotExist) {
			if ok, err := acquirePlaceholder(pr); err == nil && ok {
				h.placed = append(h.placed, pr)
			}
		}
	}
	for _, a := range h.absent {
		// An error: the root is gone or not a directory, nothing to hold.
		if ok, err := acquirePlaceholder(a); err == nil && ok {
			h.placed = append(h.placed, a)
		}
	}
}

func (h *placeholderHolds) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ph := range h.placed {
		releasePlaceholder(ph)
	}
	h.placed = nil
}

// needsIDMap reports whether user can use path only through an ID-mapped
// mount: it does not own it, and it is not a sticky world-writable
// directory (/tmp) or a directory above one. Anything else the helper
// binds as it is, which needs no privilege on the host.
func needsIDMap(path string, user User) bool {
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil {
		return false // gone: the helper finds nothing to bind
	}
	sharedTmp := st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Mode&(unix.S_ISVTX|0o002) == unix.S_ISVTX|0o002
	return int(st.Uid) != user.UID && !sharedTmp
}

func worldWritableDir(path string) bool {
	var st unix.Stat_t
	return unix.Stat(path, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Mode&0o002 != 0
}

// cloneForUser clones path as a detached mount ID-mapped from path's owner
// to user. Only a privileged executor (CAP_SYS_ADMIN over the file
// system) can. "/" and the directories right below it (/etc, /var, /root
// …) are never handed over: their owner's files would all become the
// command's, well beyond any workspace.
func cloneForUser(path string, readOnly bool, user User) (*os.File, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nil, fmt.Errorf("workspace %s: %w", path, err)
	}
	if depth(path) <= 1 {
		return nil, fmt.Errorf("%s is too broad to be a workspace of the sandbox's user %s: every file of its owner (uid %d) in it would become the command's; name a directory below it", path, user, st.Uid)
	}
	fd, err := unix.OpenTree(unix.AT_FDCWD, path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if errors.Is(err, unix.EPERM) {
		return nil, fmt.Errorf("the workspace %s (owner %d) can reach the sandbox's user %s only through an ID-mapped mount, and this executor lacks CAP_SYS_ADMIN to make one (in a container: grant it; or give the workspace to %s)", path, st.Uid, user, user)
	}
	if err != nil {
		return nil, fmt.Errorf("cloning the mount of %s: %w", path, err)
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_IDMAP}
	if readOnly {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	ns, err := idmapFD(int(st.Uid), int(st.Gid), user)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	attr.Userns_fd = uint64(ns)
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("the file system of %s cannot be ID-mapped for the sandbox's user %s (needs Linux 5.12+ and a file system that supports ID-mapped mounts): %w", path, user, err)
	}
	return os.NewFile(uintptr(fd), path), nil
}

// --- helper half -------------------------------------------------------------

// applyMounts builds the command's view (see the top of this file), in its
// own user and mount namespace. Outside one it refuses what needs one.
func applyMounts(sp spec, procMounted bool) error {
	if !sp.MountNamespace {
		if len(sp.None) > 0 {
			return errors.New("paths with access none need a mount namespace, which this helper does not have")
		}
		return nil
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private: %w", err)
	}
	var st standIns
	mounts := append([]mountSpec(nil), sp.Mounts...)
	sort.SliceStable(mounts, func(i, j int) bool { return depth(mounts[i].Path) < depth(mounts[j].Path) })
	for _, m := range mounts {
		if err := st.place(m); err != nil {
			return err
		}
	}
	// The stand-ins hold only the paths to the mounts: read-only from now
	// on, so nothing in them can be moved or made.
	for _, d := range st {
		if err := unix.Mount("", d, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return fmt.Errorf("making the stand-in for %s read-only: %w", d, err)
		}
	}
	if !procMounted {
		if err := mountProc(); err != nil {
			return err
		}
	}
	for _, p := range sp.None {
		if err := hide(p); err != nil {
			return err
		}
	}
	if !sp.Network {
		if err := hideSockets(sp); err != nil {
			return err
		}
	}
	return nil
}

// protectAll puts read-only clones on the protected names (applyMounts
// first). They go last: the placeholders of absent names may be made
// while the rest is set up (see PooledHelper.Proceed).
func protectAll(sp spec) error {
	if !sp.MountNamespace {
		return nil
	}
	for _, p := range sp.Protected {
		if err := protectPath(p); err != nil {
			return err
		}
	}
	return nil
}

// mountProc mounts a /proc of the command's own PID namespace.
func mountProc() error {
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		// A container runtime that masks /proc paths (Docker's default)
		// forbids a fresh /proc in a nested namespace; the command then
		// sees the container's, as the capability report says.
		if !errors.Is(err, unix.EPERM) || !ProcMasked() {
			return fmt.Errorf("mounting /proc for the PID namespace: %w", err)
		}
	}
	return nil
}

func depth(p string) int { return strings.Count(filepath.Clean(p), "/") }

// standIns are the tmpfs directories standing in for directories the
// command's user cannot search.
type standIns []string

func (s *standIns) inside(p string) bool {
	for _, d := range *s {
		if within(d, p) {
			return true
		}
	}
	return false
}

// place moves (or clones) one workspace mount onto its path.
func (s *standIns) place(m mountSpec) error {
	fd := m.FD
	if fd == 0 {
		// No descriptor: the executor's own ids, so the path is reachable.
		var err error
		fd, err = unix.OpenTree(unix.AT_FDCWD, m.Path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EACCES) {
			// Gone, or a directory the command's user cannot reach (a
			// stand-in takes its place if a workspace lies below it).
			return nil
		}
		if err != nil {
			return fmt.Errorf("cloning %s: %w", m.Path, err)
		}
		attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
		if m.ReadOnly {
			attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
		}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
			unix.Close(fd)
			return fmt.Errorf("mount attributes of %s: %w", m.Path, err)
		}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("workspace mount of %s: %w", m.Path, err)
	}
	if err := s.reach(m.Path, st.Mode&unix.S_IFMT == unix.S_IFDIR); err != nil {
		return err
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, m.Path, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("mounting the workspace %s: %w", m.Path, err)
	}
	return nil
}

// reach makes path's directories searchable by the command's user,
// putting a tmpfs in place of the first one that is not, and creates the
// mount point inside a stand-in.
func (s *standIns) reach(path string, isDir bool) error {
	parts := strings.Split(strings.TrimPrefix(filepath.Clean(path), "/"), "/")
	cur := "/"
	for i, part := range parts[:len(parts)-1] {
		cur = filepath.Join(cur, part)
		if s.inside(cur) {
			return s.makePath(path, isDir)
		}
		err := unix.Faccessat(unix.AT_FDCWD, cur, unix.X_OK, unix.AT_EACCESS)
		if err == nil {
			continue
		}
		if !errors.Is(err, unix.EACCES) {
			return fmt.Errorf("reaching the workspace %s: %s: %w", path, cur, err)
		}
		if len(*s) >= maxStandIns {
			return fmt.Errorf("reaching the workspace %s: more than %d unsearchable directories", path, maxStandIns)
		}
		if err := unix.Mount("tmpfs", cur, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755,size=64k,nr_inodes=1024"); err != nil {
			return fmt.Errorf("standing in for %s (not searchable by the sandbox's user): %w", cur, err)
		}
		*s = append(*s, cur)
		_ = i
		return s.makePath(path, isDir)
	}
	return nil
}

// maxStandIns bounds the tmpfs stand-ins of one command.
const maxStandIns = 64

// makePath creates path's missing directories and its mount point inside
// a stand-in.
func (s *standIns) makePath(path string, isDir bool) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("stand-in path for %s: %w", path, err)
	}
	if isDir {
		if err := os.Mkdir(path, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("stand-in mount point %s: %w", path, err)
		}
		return nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDONLY, 0o644)
	if err != nil {
		return fmt.Errorf("stand-in mount point %s: %w", path, err)
	}
	return f.Close()
}

// protectPath puts a read-only clone of p (not following a symlink at p:
// the link itself is covered) on top of p.
func protectPath(p string) error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, p, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE|unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.EACCES) {
		return nil // gone (or its root), or out of the command's reach anyway
	}
	if err != nil {
		return fmt.Errorf("protecting %s: %w", p, err)
	}
	defer unix.Close(fd)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
		return fmt.Errorf("protecting %s read-only: %w", p, err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, p, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("protecting %s: %w", p, err)
	}
	return nil
}

// hide makes a "none" path unreadable: an empty, mode-000 tmpfs over a
// directory, /dev/null over anything else.
func hide(p string) error {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return nil // nothing there, or out of reach
	}
	var err error
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		err = unix.Mount("tmpfs", p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=0,mode=000")
	} else {
		err = coverWithNull(p)
	}
	if err != nil {
		return fmt.Errorf("hiding %s: %w", p, err)
	}
	return nil
}

// coverWithNull mounts /dev/null on p itself (a symlink at p is covered,
// not followed).
func coverWithNull(p string) error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, "/dev/null", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.MoveMount(fd, "", unix.AT_FDCWD, p, unix.MOVE_MOUNT_F_EMPTY_PATH)
}

// maxHiddenSockets bounds the mounts that keep sockets out of a command's
// reach; maxListedSockets, the pathname sockets looked at. A machine with
// more is refused rather than half covered.
const (
	maxHiddenSockets = 4096
	maxListedSockets = 1 << 16
	// maxSocketDirRounds bounds the rounds that pick directories to hide
	// whole when there are more sockets than mounts (socketCovers).
	maxSocketDirRounds = 64
)

// hideSockets keeps every pathname Unix socket bound in this network
// namespace outside the writable roots out of the command's reach: each
// is covered with /dev/null, or — when there are more than
// maxHiddenSockets, as a command binding thousands in its own workspace
// could arrange to refuse the network-off starts of every other — the
// directories holding most of them are hidden whole (socketCovers).
// Sockets the command's user cannot reach anyway are left alone.
func hideSockets(sp spec) error {
	f, err := os.Open("/proc/net/unix")
	if err != nil {
		return fmt.Errorf("listing Unix sockets to hide: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 4<<10), 64<<10)
	seen := map[string]bool{}
	var sockets []string
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		// Num RefCount Protocol Flags Type St Inode [Path]
		if len(fields) < 8 || !strings.HasPrefix(fields[7], "/") {
			continue // the header, unbound or abstract sockets
		}
		p := fields[7]
		if seen[p] || inAny(sp.ReadWrite, p) {
			continue
		}
		seen[p] = true
		if len(seen) > maxListedSockets {
			return fmt.Errorf("more than %d Unix sockets to hide", maxListedSockets)
		}
		var st unix.Stat_t
		if unix.Lstat(p, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK {
			continue
		}
		sockets = append(sockets, p)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("listing Unix sockets to hide: %w", err)
	}
	files, dirs, err := socketCovers(sockets, socketDirHideable(sp), maxHiddenSockets)
	if err != nil {
		return err
	}
	for _, d := range dirs {
		if err := hide(d); err != nil {
			return fmt.Errorf("hiding a directory of Unix sockets: %w", err)
		}
	}
	for _, p := range files {
		if err := coverWithNull(p); err != nil && !errors.Is(err, unix.EACCES) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("hiding the socket %s: %w", p, err)
		}
	}
	return nil
}

// socketCovers chooses what to mount over so that none of sockets stays
// reachable with at most limit mounts: every socket on its own when they
// are few enough; otherwise, round by round, the hideable directory
// holding the most of those left (the deeper of equals) is hidden whole,
// until the directories and the sockets left fit in limit.
func socketCovers(sockets []string, hideable func(dir string) bool, limit int) (files, dirs []string, err error) {
	left := sockets
	for round := 0; len(left)+len(dirs) > limit; round++ {
		if round == maxSocketDirRounds {
			return nil, nil, fmt.Errorf("more than %d Unix sockets to hide, in more places than can be hidden", limit)
		}
		counts := map[string]int{}
		for _, p := range left {
			for d := filepath.Dir(p); hideable(d); d = filepath.Dir(d) {
				counts[d]++
			}
		}
		best, most := "", 1
		for d, n := range counts {
			if n > most || n == most && best != "" && (depth(d) > depth(best) || depth(d) == depth(best) && d < best) {
				best, most = d, n
			}
		}
		if best == "" {
			return nil, nil, fmt.Errorf("more than %d Unix sockets to hide, in places that cannot be hidden", limit)
		}
		kept := left[:0:0]
		for _, p := range left {
			if !within(best, p) {
				kept = append(kept, p)
			}
		}
		left = kept
		keptDirs := dirs[:0:0]
		for _, d := range dirs {
			if !within(best, d) {
				keptDirs = append(keptDirs, d)
			}
		}
		dirs = append(keptDirs, best)
	}
	return left, dirs, nil
}

// socketDirHideable reports whether a directory of sockets may be hidden
// whole from the command of sp: not the top of the tree or a system
// directory, not in or above anything the command is given (its cwd, its
// writable roots, its read entries, its workspace mounts).
func socketDirHideable(sp spec) func(string) bool {
	system := []string{"/bin", "/sbin", "/usr", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/proc", "/sys", "/dev", "/opt", "/nix", "/snap", "/boot"}
	given := append(append([]string{sp.Dir}, sp.ReadWrite...), sp.ReadOnly...)
	for _, m := range sp.Mounts {
		given = append(given, m.Path)
	}
	return func(d string) bool {
		if depth(d) < 2 || inAny(system, d) || inAny(sp.ReadWrite, d) {
			return false
		}
		for _, g := range given {
			if g != "" && g != "/" && within(d, g) {
				return false
			}
		}
		return true
	}
}

// insideOtherRoot reports whether p lies strictly inside one of roots.
func insideOtherRoot(roots []string, p string) bool {
	for _, r := range roots {
		if r != p && within(r, p) {
			return true
		}
	}
	return false
}

func inAny(roots []string, p string) bool {
	for _, r := range roots {
		if within(r, p) {
			return true
		}
	}
	return false
}

// holdNamespace is the helper run by idmapFD: it waits for stdin to close.
func holdNamespace() {
	var b [1]byte
	for {
		if _, err := os.Stdin.Read(b[:]); err != nil {
			os.Exit(0)
		}
	}
}

// ProcMasked reports whether /proc has files masked by mounts on top (a
// container runtime's masked paths): the kernel then refuses a fresh /proc
// in a nested user namespace.
func ProcMasked() bool {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && strings.HasPrefix(fields[4], "/proc/") && !strings.HasPrefix(fields[4], "/proc/sys/fs/binfmt_misc") {
			return true
		}
	}
	return false
}
