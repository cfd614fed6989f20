package procgroup

import "syscall"

// attr: a new group, and SIGKILL when the parent thread dies.
func attr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
