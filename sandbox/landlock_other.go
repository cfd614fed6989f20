//go:build !linux

package sandbox

import (
	"errors"
	"fmt"
	"runtime"
)

// LandlockRules describe filesystem and network access for the sandboxed
// command. Landlock is Linux-only; see landlock_linux.go for the semantics.
type LandlockRules struct {
	ReadOnly  []string // paths (dirs or files) readable and executable
	ReadWrite []string // paths fully writable
	// DenyTCP denies TCP bind and connect (needs Landlock ABI >= 4).
	DenyTCP bool
	// ThisThreadOnly restricts only the calling thread (which must hold
	// runtime.LockOSThread for good and is about to execve) instead of
	// every thread of the process.
	ThisThreadOnly bool
}

// LandlockResult says what was enforced.
type LandlockResult struct {
	ABI                int // the kernel's Landlock ABI version (0 = unavailable)
	FilesystemEnforced bool
	NetworkEnforced    bool
	Missing            []string
}

// ErrLandlockUnavailable is wrapped by ApplyLandlock's error when the kernel
// has no usable Landlock (ABI 0).
var ErrLandlockUnavailable = errors.New("landlock is not available on this kernel")

// LandlockABI returns 0: Landlock exists only on Linux.
func LandlockABI() int { return 0 }

// ApplyLandlock always fails off Linux.
func ApplyLandlock(r LandlockRules) (LandlockResult, error) {
	res := LandlockResult{Missing: []string{"all filesystem restrictions (Landlock unavailable)"}}
	if r.DenyTCP {
		res.Missing = append(res.Missing, "TCP bind/connect (Landlock unavailable)")
	}
	return res, fmt.Errorf("sandbox: %w: Landlock is Linux-only (this is %s)", ErrLandlockUnavailable, runtime.GOOS)
}

// DefaultReadOnlySystemPaths returns nil off Linux.
func DefaultReadOnlySystemPaths() []string { return nil }

// DefaultReadWriteDevices returns nil off Linux.
func DefaultReadWriteDevices() []string { return nil }
