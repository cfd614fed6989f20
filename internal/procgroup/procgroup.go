// Package procgroup starts helper processes (etcd, peers, benchmark
// servers, test children) so that the whole tree can be killed at once, and
// so that on Linux it dies with its parent. It keeps those few syscalls in
// one place, behind per-OS files, so that the tools and tests that start
// such children build on every platform outpost supports.
//
// The guarantees differ by platform, and callers must not rely on more than
// the weakest one where they run:
//   - Linux: a new process group, and SIGKILL to the child when the parent
//     thread that started it dies (Pdeathsig), so a crashed test binary
//     leaves no member holding ports.
//   - other Unix (macOS, FreeBSD): a new process group only; a parent that
//     dies without running its cleanups leaves the group running.
//   - Windows: a new process group (CREATE_NEW_PROCESS_GROUP); Kill and Term
//     end only the child itself, not the processes it started.
package procgroup

import "os/exec"

// Own makes cmd, not yet started, the leader of a new process group and,
// where the OS can, ties its life to its parent's (see the package comment).
// It replaces cmd.SysProcAttr.
func Own(cmd *exec.Cmd) { cmd.SysProcAttr = attr() }

// KillOnCancel is Own, plus a cmd.Cancel (run when the command's context
// ends) that kills the whole group rather than only the leader.
func KillOnCancel(cmd *exec.Cmd) {
	Own(cmd)
	cmd.Cancel = func() error { return Kill(cmd.Process.Pid) }
}
