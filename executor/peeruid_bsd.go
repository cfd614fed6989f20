//go:build darwin || freebsd

package executor

import (
	"net"

	"golang.org/x/sys/unix"
)

// peerUID is the uid of the process at the other end of a Unix socket
// (LOCAL_PEERCRED: the credentials it had when it connected).
func peerUID(c *net.UnixConn) (int, bool) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, false
	}
	var cred *unix.Xucred
	var cerr error
	if err := rc.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptXucred(int(fd), unix.SOL_LOCAL, unix.LOCAL_PEERCRED) }); err != nil || cerr != nil {
		return 0, false
	}
	return int(cred.Uid), true
}
