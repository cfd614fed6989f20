package remotefs

// The Linux half of descriptor-relative path handling (fsroot.go): openat2
// refusing /proc magic links, O_PATH descriptors that open nothing for I/O,
// and /proc/self/fd to say where a descriptor is and to reopen it.

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// oPath opens a directory or object without opening it for I/O.
const (
	oPath       = unix.O_PATH
	oPathObject = unix.O_PATH
)

// openat2 opens path relative to dirfd, following ordinary symlinks but
// not /proc magic links. On a kernel without openat2 (before 5.6) it
// falls back to openat: what was opened is still judged by its
// descriptor.
func openat2(dirfd int, path string, flags int) (int, error) {
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: unix.RESOLVE_NO_MAGICLINKS}
	for i := 0; ; i++ {
		fd, err := unix.Openat2(dirfd, path, &how)
		switch {
		case err == nil:
			return fd, nil
		case (err == unix.EAGAIN || err == unix.EINTR) && i < 16:
			continue // a rename or mount raced the lookup
		case err == unix.ENOSYS:
			return unix.Openat(dirfd, path, flags|unix.O_CLOEXEC, 0)
		}
		return -1, err
	}
}

// openat2NoSymlinks opens path like openat2 but follows no symlink at
// all (a call's noFollow): a link anywhere in the path fails the open
// with ELOOP instead of leading elsewhere. Before openat2 it walks the
// path one component at a time with O_NOFOLLOW.
func openat2NoSymlinks(dirfd int, path string, flags int) (int, error) {
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	for i := 0; ; i++ {
		fd, err := unix.Openat2(dirfd, path, &how)
		switch {
		case err == nil:
			return fd, nil
		case (err == unix.EAGAIN || err == unix.EINTR) && i < 16:
			continue
		case err == unix.ENOSYS:
			return openNoFollowWalk(dirfd, path, flags)
		}
		return -1, err
	}
}

// fdPath is where the open file fd is now: /proc/self/fd/N, checked.
func fdPath(fd int) (string, error) {
	p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil || !filepath.IsAbs(p) {
		return "", errUnplaced
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "", err
	}
	if strings.HasSuffix(p, " (deleted)") {
		// Removed meanwhile — unless the name really ends so.
		var cur unix.Stat_t
		if st.Nlink == 0 || unix.Lstat(p, &cur) != nil || cur.Dev != st.Dev || cur.Ino != st.Ino {
			return "", unix.ENOENT
		}
	}
	return p, nil
}

// openObject opens what p leads to without opening it for I/O (no side
// effects of opening a device or a fifo before it is judged) and judges
// it for reading.
func (r *fsReq) openObject(shown, p string) (*fsObject, error) {
	fd, err := openat2(unix.AT_FDCWD, p, unix.O_PATH)
	if err != nil {
		return nil, err
	}
	o := &fsObject{fd: fd}
	if o.path, err = r.placed(shown, fd, p); err == nil {
		err = unix.Fstat(fd, &o.st)
	}
	if err == nil && !r.allows(o.path, false) {
		err = r.denied(shown, false)
	}
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return o, nil
}

// reopen opens the object an O_PATH descriptor holds for I/O: the same
// inode, whatever its path now leads to.
func reopen(fd int, flags int, name string) (*os.File, error) {
	nfd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(fd), flags|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(nfd), name), nil
}
