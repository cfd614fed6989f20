//go:build darwin || freebsd

package engine

import (
	"fmt"
	"os"
	"runtime"
	"syscall"

	"github.com/outpost-exec/outpost/cgroup"
	"github.com/outpost-exec/outpost/protocol"
)

// Process attributes on macOS and FreeBSD: a process group (a session on
// a PTY) as on Linux, so signals and terminate reach the command's group.
// These systems have no parent-death signal: a command the executor did
// not terminate outlives an executor that is killed outright (an orderly
// shutdown still terminates every command). No cgroups and no sandbox:
// both are refused, never done without.

func ttyProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
}

func groupProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// deepenPipe: the pipe's size is the system's (no F_SETPIPE_SZ).
func deepenPipe(*os.File) {}

// bornInCgroup refuses: cgroups need Linux (cgroup.Open refuses first, so
// a backend here has no Cgroups).
func bornInCgroup(*syscall.SysProcAttr, *cgroup.Cgroup) error {
	return fmt.Errorf("%w: cgroups need Linux (this is %s)", cgroup.ErrUnavailable, runtime.GOOS)
}

// ioctlPendingInput asks how many bytes a PTY master holds unread:
// FIONREAD, _IOR('f', 127, int) on both systems (x/sys/unix does not
// name it for them).
const ioctlPendingInput = 0x4004667f

// sandboxAvailable refuses a sandboxed start: the sandbox (Landlock,
// seccomp, namespaces) needs Linux.
func sandboxAvailable() error {
	return protocol.KindErrorf(protocol.KindUnsupported, protocol.CodeInvalidRequest,
		"sandboxed commands need Linux (Landlock, seccomp, namespaces); this is %s", runtime.GOOS)
}
