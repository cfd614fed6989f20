//go:build unix

package transport

// FIFOs exist only on Unix.

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// A FIFO at the token path must be refused at once, not block the
// loader until some writer opens it (codex 0.171 hangs there).
func TestWSAuthAttackTokenFIFODoesNotBlock(t *testing.T) {
	p := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := LoadWSAuth("capability-token", p, "", "")
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrWSAuth) {
			t.Fatalf("FIFO: %v, want ErrWSAuth", err)
		}
	case <-time.After(10 * time.Second):
		// Unblock the loader's open so the test ends.
		if f, err := os.OpenFile(p, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
		t.Fatal("LoadWSAuth blocked opening a FIFO")
	}
}
