//go:build unix

package identity

import (
	"io/fs"
	"os"
	"syscall"
)

// modeBitsGuard: key and trust files are judged by their permission
// bits (and owner).
const modeBitsGuard = true

// openNoFollow opens path read-only without following a final symlink and
// without blocking (should the path have turned into a FIFO).
func openNoFollow(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
}

// isSymlinkLoop reports whether err is what openNoFollow returns for a
// symlink.
func isSymlinkLoop(err error) bool {
	var errno syscall.Errno
	if pe, ok := err.(*fs.PathError); ok {
		errno, _ = pe.Err.(syscall.Errno)
	}
	return errno == syscall.ELOOP
}

// fileOwner returns the owner uid of fi, if the platform has one.
func fileOwner(fi fs.FileInfo) (uid int, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}

// lockFile takes an exclusive advisory lock on f, serializing writers
// across processes. The lock is released by the returned function (and
// when f is closed).
func lockFile(f *os.File) (unlock func(), err error) {
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		return nil, &fs.PathError{Op: "flock", Path: f.Name(), Err: err}
	}
	return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }, nil
}

// The ACL checks of acl_windows.go: here the mode and owner checks do
// their work.
func checkKeyFileACL(*os.File, string) error           { return nil }
func checkTrustFileACL(*os.File, string, string) error { return nil }
func restrictToUser(*os.File) error                    { return nil }
