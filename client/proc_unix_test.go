//go:build unix

package client

import "syscall"

// processExists reports whether pid exists (signal 0 reaches it).
func processExists(pid int) bool { return syscall.Kill(pid, 0) == nil }

// killProcess sends SIGKILL to pid.
func killProcess(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }
