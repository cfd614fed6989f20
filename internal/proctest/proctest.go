//go:build linux

// Package proctest watches processes in tests by pidfd, never by pid:
// pids are recycled (pid_max is 32768 on many machines), and a test that
// signals or polls a pid after its process died can hit another test's
// process.
package proctest

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Proc is a process watched through a pidfd.
type Proc struct {
	Pid int
	fd  int
}

// Watch opens a pidfd for pid, which must be alive and the test's, and
// kills the process when the test ends.
func Watch(t testing.TB, pid int) *Proc {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatalf("pidfd of %d: %v", pid, err)
	}
	p := &Proc{Pid: pid, fd: fd}
	t.Cleanup(func() {
		unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
		unix.Close(fd)
	})
	return p
}

// Gone reports whether the process has exited (a zombie no one reaped
// counts as gone).
func (p *Proc) Gone() bool {
	fds := []unix.PollFd{{Fd: int32(p.fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n == 1
}

// WaitGone waits up to d for the process to exit.
func (p *Proc) WaitGone(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		ms := int(time.Until(deadline) / time.Millisecond)
		if ms <= 0 {
			return p.Gone()
		}
		fds := []unix.PollFd{{Fd: int32(p.fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, ms)
		if err == unix.EINTR {
			continue
		}
		return err == nil && n == 1
	}
}

// Kill sends SIGKILL to the process, if it still runs.
func (p *Proc) Kill() { unix.PidfdSendSignal(p.fd, unix.SIGKILL, nil, 0) }
