//go:build unix

package procgroup

import "syscall"

// Kill sends SIGKILL to the process group led by pid.
func Kill(pid int) error { return syscall.Kill(-pid, syscall.SIGKILL) }

// Term sends SIGTERM to the process group led by pid.
func Term(pid int) error { return syscall.Kill(-pid, syscall.SIGTERM) }

// Alive reports whether a process pid exists and may be signalled by us
// (signal 0). A recycled pid reads as alive: callers poll only pids of
// children they have not yet reaped.
func Alive(pid int) bool { return syscall.Kill(pid, 0) == nil }
