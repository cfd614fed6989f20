//go:build unix && !linux

package procgroup

import "syscall"

// attr: a new group; these systems have no parent-death signal.
func attr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
