//go:build unix && !linux

package client

import "golang.org/x/sys/unix"

// oDirRef: macOS and FreeBSD have no O_PATH, so the destination's
// directories are opened for reading. The descent is as safe (openat with
// O_NOFOLLOW, component by component), but a directory that grants search
// and write but not read permission (mode 0300) cannot be copied into,
// where Linux could. O_SEARCH would lift that, but older macOS releases do
// not know it.
const oDirRef = unix.O_RDONLY

// maybeSymlinkErr: what openat with O_NOFOLLOW|O_DIRECTORY returns for a
// symlink differs by kernel (macOS ELOOP, FreeBSD EMLINK, either ENOTDIR
// when O_DIRECTORY is checked first); the caller confirms with fstatat.
func maybeSymlinkErr(err error) bool {
	return err == unix.ENOTDIR || err == unix.ELOOP || err == unix.EMLINK
}
