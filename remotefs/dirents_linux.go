package remotefs

import (
	"encoding/binary"

	"golang.org/x/sys/unix"
)

// readDirents calls fn with each name (not "." or "..") and d_type of
// the directory fd, until fn returns false.
func readDirents(fd int, buf []byte, fn func(name string, typ uint8) bool) error {
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n <= 0 {
			return nil
		}
		for off := 0; off+19 <= n; {
			// struct linux_dirent64: ino u64, off s64, reclen u16, type u8, name.
			reclen := int(binary.NativeEndian.Uint16(buf[off+16:]))
			if reclen < 19 || off+reclen > n {
				return unix.EIO
			}
			typ := buf[off+18]
			name := buf[off+19 : off+reclen]
			if i := indexNUL(name); i >= 0 {
				name = name[:i]
			}
			off += reclen
			if s := string(name); s != "." && s != ".." && s != "" {
				if !fn(s, typ) {
					return nil
				}
			}
		}
	}
}
