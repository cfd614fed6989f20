package engine

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/outpost-exec/outpost/cgroup"
)

// Linux process attributes: a parent-death signal, so no command outlives
// the executor, and birth inside the command's cgroup.

func ttyProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0, Pdeathsig: syscall.SIGKILL}
}

func groupProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// deepenPipe gives the output pipe r a pipeBytes kernel buffer: a deeper
// pipe lets a fast writer run ahead while the pump is busy (fewer stalls
// and wake-ups); best effort.
func deepenPipe(r *os.File) {
	control(r, func(fd int) error {
		_, err := unix.FcntlInt(uintptr(fd), unix.F_SETPIPE_SZ, pipeBytes)
		return err
	})
}

// bornInCgroup makes the command born inside cg (clone3
// CLONE_INTO_CGROUP): nothing it forks can run outside, not even for an
// instant.
func bornInCgroup(attr *syscall.SysProcAttr, cg *cgroup.Cgroup) error {
	attr.UseCgroupFD, attr.CgroupFD = true, cg.FD()
	return nil
}

// ioctlPendingInput asks how many bytes a PTY master holds unread.
const ioctlPendingInput = unix.TIOCINQ

// sandboxAvailable: the sandbox is Linux's (sandbox package).
func sandboxAvailable() error { return nil }
