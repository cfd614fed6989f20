//go:build unix && !linux

package client

import (
	"os"
	"syscall"
)

// stdioChildAttr makes a stdio executor the leader of its own process
// group, so closing can signal everything it started. macOS and the BSDs
// have no parent-death signal: a client that dies without closing leaves
// the executor to notice its stdin's EOF and exit by itself.
func stdioChildAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// stopChildGroup signals the process group p leads: SIGTERM, or SIGKILL
// when kill is set.
func stopChildGroup(p *os.Process, kill bool) {
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	syscall.Kill(-p.Pid, sig)
}
