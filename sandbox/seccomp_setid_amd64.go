//go:build linux

package sandbox

import "golang.org/x/sys/unix"

// setIDCalls are the amd64 syscalls that give a file a mode.
var setIDCalls = []modeCall{
	{unix.SYS_CHMOD, 1, -1},
	{unix.SYS_FCHMOD, 1, -1},
	{unix.SYS_FCHMODAT, 2, -1},
	{sysFchmodat2, 2, -1},
	{unix.SYS_OPEN, 2, 1},
	{unix.SYS_OPENAT, 3, 2},
	{unix.SYS_CREAT, 1, -1},
	{unix.SYS_MKNOD, 1, -1},
	{unix.SYS_MKNODAT, 2, -1},
}
