package remotefs

import (
	"bytes"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"
)

// fdPathOS asks darwin where fd is: fcntl(F_GETPATH), MAXPATHLEN bytes.
func fdPathOS(fd int) (string, error) {
	buf := make([]byte, unix.PathMax)
	if _, _, errno := unix.Syscall(unix.SYS_FCNTL, uintptr(fd), unix.F_GETPATH, uintptr(unsafe.Pointer(&buf[0]))); errno != 0 {
		return "", errUnplaced
	}
	if i := bytes.IndexByte(buf, 0); i >= 0 {
		buf = buf[:i]
	}
	p := string(buf)
	if !filepath.IsAbs(p) {
		return "", errUnplaced
	}
	return p, nil
}
