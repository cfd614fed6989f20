package identity

import (
	"io/fs"
	"os"

	"golang.org/x/sys/windows"
)

// modeBitsGuard is false on Windows: access is decided by ACLs, and the
// permission bits Go reports (0666, or 0444 for a read-only file) say
// nothing about who else may read a key file or edit a trust file. The
// mode checks give way to the ACL checks of acl_windows.go.
const modeBitsGuard = false

// openNoFollow opens path read-only without following a final symlink or
// junction (FILE_FLAG_OPEN_REPARSE_POINT): a link is opened as itself,
// and the caller's Stat of the handle then reports it as a link, not a
// regular file, which checkKeyFileInfo refuses.
func openNoFollow(path string) (*os.File, error) {
	name, err := windows.UTF16PtrFromString(path)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	h, err := windows.CreateFile(name, windows.GENERIC_READ, windows.FILE_SHARE_READ|windows.FILE_SHARE_WRITE|windows.FILE_SHARE_DELETE,
		nil, windows.OPEN_EXISTING, windows.FILE_ATTRIBUTE_NORMAL|windows.FILE_FLAG_OPEN_REPARSE_POINT, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(h), path), nil
}

// isSymlinkLoop: openNoFollow opens a link rather than failing on it.
func isSymlinkLoop(error) bool { return false }

// fileOwner: Windows files have an owner SID, not a uid; the ACL checks
// (acl_windows.go) judge it.
func fileOwner(fs.FileInfo) (int, bool) { return 0, false }

// lockOffset is where lockFile's one-byte lock sits: Windows locks are
// mandatory, so a lock over the file's contents would make readers
// (OpenKnownExecutors in another process) fail; far past any real end of
// file it only serializes lockers.
const lockOffset = 1<<63 - 1

// lockFile takes an exclusive lock on f (LockFileEx, waiting for it),
// serializing writers across processes. The lock is released by the
// returned function (and when f is closed).
func lockFile(f *os.File) (unlock func(), err error) {
	h := windows.Handle(f.Fd())
	ol := windows.Overlapped{Offset: uint32(lockOffset & 0xffffffff), OffsetHigh: uint32(lockOffset >> 32)}
	if err := windows.LockFileEx(h, windows.LOCKFILE_EXCLUSIVE_LOCK, 0, 1, 0, &ol); err != nil {
		return nil, &fs.PathError{Op: "LockFileEx", Path: f.Name(), Err: err}
	}
	return func() {
		ol := windows.Overlapped{Offset: uint32(lockOffset & 0xffffffff), OffsetHigh: uint32(lockOffset >> 32)}
		_ = windows.UnlockFileEx(h, 0, 1, 0, &ol)
	}, nil
}
