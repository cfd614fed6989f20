//go:build !linux

package sandbox

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Errors of pooled helpers.
var (
	ErrPooledHelperGone = errors.New("sandbox: pooled helper gone")
	ErrPooledMismatch   = errors.New("sandbox: start not suited to a pooled helper")
	ErrPooledStale      = errors.New("sandbox: pooled helper of another shape or helper binary")
)

// PooledHelper is a helper started ahead of any command (Linux only).
type PooledHelper struct{ Cmd *exec.Cmd }

// StartPooledHelper refuses: sandboxing needs Linux.
func StartPooledHelper(*User, func(*syscall.SysProcAttr)) (*PooledHelper, error) {
	return nil, errors.New("sandboxing needs Linux")
}

func (h *PooledHelper) AwaitReady(time.Duration) error { return ErrPooledHelperGone }
func (h *PooledHelper) Fits(Launch) bool               { return false }
func (h *PooledHelper) Hand(Launch, []string, []string, [3]*os.File, bool, time.Duration) error {
	return ErrPooledMismatch
}
func (h *PooledHelper) Discard()            {}
func (h *PooledHelper) Proceed()            {}
func (h *PooledHelper) Exited() (int, bool) { return 0, false }
