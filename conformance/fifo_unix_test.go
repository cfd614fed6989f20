//go:build unix

package conformance

import (
	"syscall"
	"testing"
)

// mkfifo makes a FIFO at path: the walk differential lists one.
func mkfifo(t *testing.T, path string) {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
}
