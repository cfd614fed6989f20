//go:build !unix

package sandbox

import "os"

// Without a device number in os.FileInfo (Windows) the scan of protected
// names cannot tell one file system from another, so it treats everything
// as one: it may scan into a volume mounted below a root, never less.
// There is no sandbox to enforce the result on these systems anyway.

func deviceOf(os.FileInfo) uint64 { return 0 }

// lstatDevice reports that p is still there (not following a symlink).
func lstatDevice(p string) (uint64, bool) {
	_, err := os.Lstat(p)
	return 0, err == nil
}
