//go:build darwin || freebsd

package remotefs

import (
	"encoding/binary"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Offsets in struct dirent, which differs between darwin and FreeBSD.
var (
	direntReclen = int(unsafe.Offsetof(unix.Dirent{}.Reclen))
	direntNamlen = int(unsafe.Offsetof(unix.Dirent{}.Namlen))
	direntType   = int(unsafe.Offsetof(unix.Dirent{}.Type))
	direntName   = int(unsafe.Offsetof(unix.Dirent{}.Name))
)

// readDirents calls fn with each name (not "." or "..") and d_type of
// the directory fd, until fn returns false.
func readDirents(fd int, buf []byte, fn func(name string, typ uint8) bool) error {
	var base uintptr
	for {
		n, err := unix.Getdirentries(fd, buf, &base)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n <= 0 {
			return nil
		}
		for off := 0; off+direntName <= n; {
			reclen := int(binary.NativeEndian.Uint16(buf[off+direntReclen:]))
			namlen := int(binary.NativeEndian.Uint16(buf[off+direntNamlen:]))
			if reclen < direntName || off+reclen > n || direntName+namlen > reclen {
				return unix.EIO
			}
			typ := buf[off+direntType]
			name := buf[off+direntName : off+direntName+namlen]
			off += reclen
			if s := string(name); s != "." && s != ".." && s != "" {
				if !fn(s, typ) {
					return nil
				}
			}
		}
	}
}
