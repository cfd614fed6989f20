package client

import (
	"os"
	"syscall"
)

// stdioChildAttr makes a stdio executor the leader of its own process
// group (so closing can signal everything it started) and has the kernel
// send it SIGTERM should this process die without closing it.
func stdioChildAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
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
