package client

import (
	"os"
	"syscall"
)

// stdioChildAttr puts a stdio executor in a console process group of its
// own, so a Ctrl-C meant for this program does not reach it. Windows has
// neither a parent-death signal nor a signal to a group: the child learns
// that the client went away from its stdin's EOF.
func stdioChildAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{CreationFlags: syscall.CREATE_NEW_PROCESS_GROUP}
}

// stopChildGroup ends p. Windows has no SIGTERM: the gentle stop is the
// stdin EOF the caller has already caused, so only kill acts, terminating
// p itself (not processes it started; the executor refuses to run on
// Windows, so there are none of ours).
func stopChildGroup(p *os.Process, kill bool) {
	if kill {
		p.Kill()
	}
}
