//go:build darwin || freebsd

package remotefs

// The darwin/FreeBSD half of descriptor-relative path handling
// (fsroot.go). These systems have no openat2, no O_PATH and no
// /proc/self/fd, so the guarantee is weaker than on Linux and this file
// says where:
//
//   - Directories are opened for reading (O_RDONLY|O_DIRECTORY) instead of
//     O_PATH: a directory that may be searched but not listed cannot be
//     the parent of an operation.
//   - The object a read or walk names is opened for reading, non-blocking
//     and without taking a terminal, before it is judged: opening a device
//     can have the device's own side effects, which O_PATH avoids.
//   - noFollow walks the path one component at a time with O_NOFOLLOW
//     (fsroot.go's openNoFollowWalk), as Linux does before openat2.
//   - Where a descriptor is comes from fcntl(F_GETPATH) on darwin; FreeBSD
//     has no reliable equivalent, so there a call under a sandbox policy
//     is refused (placed: errUnplaced) rather than judged by a path string.
//     (Sandboxed sessions are refused on these systems anyway.)

import (
	"os"

	"golang.org/x/sys/unix"
)

const (
	oPath       = unix.O_RDONLY
	oPathObject = unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOCTTY
)

// openat2 opens path relative to dirfd, following symlinks (there are no
// /proc magic links to refuse here).
func openat2(dirfd int, path string, flags int) (int, error) {
	for i := 0; ; i++ {
		fd, err := unix.Openat(dirfd, path, flags|unix.O_CLOEXEC, 0)
		if err == unix.EINTR && i < 16 {
			continue
		}
		return fd, err
	}
}

// openat2NoSymlinks opens path following no symlink at all. FreeBSD
// reports a symlink met by O_NOFOLLOW as EMLINK; it is ELOOP here, as the
// callers expect.
func openat2NoSymlinks(dirfd int, path string, flags int) (int, error) {
	fd, err := openNoFollowWalk(dirfd, path, flags)
	if err == unix.EMLINK {
		err = unix.ELOOP
	}
	return fd, err
}

// fdPath is where the open file fd is now (fdPathOS), checked against
// the descriptor: the name must still lead to the same inode.
func fdPath(fd int) (string, error) {
	p, err := fdPathOS(fd)
	if err != nil {
		return "", err
	}
	var st, cur unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "", err
	}
	if unix.Lstat(p, &cur) != nil || cur.Dev != st.Dev || cur.Ino != st.Ino {
		if st.Nlink == 0 {
			return "", unix.ENOENT
		}
		return "", errUnplaced
	}
	return p, nil
}

// openObject opens what p leads to for reading (oPathObject: no blocking
// on a fifo, no controlling terminal) and judges it for reading.
func (r *fsReq) openObject(shown, p string) (*fsObject, error) {
	fd, err := openat2(unix.AT_FDCWD, p, oPathObject)
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

// reopen opens the object fd holds for I/O: a directory anew through
// itself (its own offset), anything else as a duplicate of fd, which was
// opened for reading already. Only read flags are asked for.
func reopen(fd int, flags int, name string) (*os.File, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	var nfd int
	var err error
	switch {
	case st.Mode&unix.S_IFMT == unix.S_IFDIR:
		nfd, err = unix.Openat(fd, ".", flags|unix.O_CLOEXEC, 0)
	case flags&unix.O_DIRECTORY != 0:
		return nil, unix.ENOTDIR
	case flags&(unix.O_WRONLY|unix.O_RDWR) != 0:
		return nil, unix.EBADF
	default:
		nfd, err = unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	}
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(nfd), name), nil
}
