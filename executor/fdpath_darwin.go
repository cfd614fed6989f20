package executor

import (
	"bytes"
	"errors"
	"unsafe"

	"golang.org/x/sys/unix"
)

// fdRealPath is where the open file fd really is: fcntl(F_GETPATH).
func fdRealPath(fd int, _ string) (string, error) {
	buf := make([]byte, unix.PathMax)
	if _, _, errno := unix.Syscall(unix.SYS_FCNTL, uintptr(fd), unix.F_GETPATH, uintptr(unsafe.Pointer(&buf[0]))); errno != 0 {
		return "", errno
	}
	if i := bytes.IndexByte(buf, 0); i >= 0 {
		buf = buf[:i]
	}
	if len(buf) == 0 || buf[0] != '/' {
		return "", errors.New("cannot tell where the file is")
	}
	return string(buf), nil
}
