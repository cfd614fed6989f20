//go:build unix

package sandbox

import (
	"os"
	"syscall"
)

// deviceOf is the file system fi is on: the scan of protected names does
// not cross into another one mounted below a root.
func deviceOf(fi os.FileInfo) uint64 { return uint64(fi.Sys().(*syscall.Stat_t).Dev) }

// lstatDevice is the file system p itself (not a symlink's target) is on.
func lstatDevice(p string) (uint64, bool) {
	var st syscall.Stat_t
	if syscall.Lstat(p, &st) != nil {
		return 0, false
	}
	return uint64(st.Dev), true
}
