package engine

import "runtime"

// The sandbox pool's size and statistics, on every platform; the pool
// itself (pool_linux.go) needs Linux's sandbox.

// DefaultSandboxPool is the pool size NewLocalBackend chooses: one helper
// per core, at least 2 and at most 4 (a burst beyond it starts the rest
// the usual way while the pool refills).
func DefaultSandboxPool() int { return min(max(runtime.NumCPU(), 2), 4) }

// MaxSandboxPool bounds LocalBackend.SandboxPool.
const MaxSandboxPool = 64

// SandboxPoolStats describes a backend's sandbox pool.
type SandboxPoolStats struct {
	Size  int // helpers it keeps ready
	Ready int // ready now
	// Taken counts sandboxed starts a ready helper ran; Missed, those
	// that started their helper the usual way (none ready, or the one
	// taken failed before the command started).
	Taken, Missed uint64
	// LastError is why the last attempt to start a helper failed (nil if
	// it did not).
	LastError error
}
