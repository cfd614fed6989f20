//go:build !(linux || darwin || freebsd)

package engine

import (
	"context"
	"runtime"
	"time"

	"github.com/outpost-exec/outpost/cgroup"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/sandbox"
)

// The local backend spawns commands with process groups, PTYs and POSIX
// signals (local.go): Linux, macOS and FreeBSD. Elsewhere (Windows) it
// compiles, with the same settings, and refuses every start as
// unsupported, naming the platform.

// LocalBackend would run child processes on this machine; here every
// Start is refused.
type LocalBackend struct {
	Retention        Retention
	TerminateGrace   time.Duration
	StdinQueueWrites int
	StdinQueueBytes  int64
	Cgroups          *cgroup.Manager
	SandboxPool      int
}

// Default PTY size.
const (
	DefaultRows = 24
	DefaultCols = 80
)

// NewLocalBackend returns a LocalBackend with default settings.
func NewLocalBackend() *LocalBackend {
	return &LocalBackend{
		Retention:        DefaultRetention(),
		TerminateGrace:   2 * time.Second,
		StdinQueueWrites: 128,
		StdinQueueBytes:  16 << 20,
		SandboxPool:      DefaultSandboxPool(),
	}
}

// Start refuses: commands run on Linux, macOS and FreeBSD.
func (b *LocalBackend) Start(context.Context, Spec) (Process, error) {
	return nil, protocol.KindErrorf(protocol.KindUnsupported, protocol.CodeInvalidRequest,
		"commands run on Linux, macOS and FreeBSD; this is %s", runtime.GOOS)
}

// WarmSandbox does nothing: there is no sandbox here.
func (b *LocalBackend) WarmSandbox(*sandbox.User) {}

// SandboxPoolStats: there is never a pool here.
func (b *LocalBackend) SandboxPoolStats() (SandboxPoolStats, bool) { return SandboxPoolStats{}, false }

// Close does nothing: nothing is held.
func (b *LocalBackend) Close() {}
