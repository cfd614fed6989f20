//go:build linux

package sandbox

import "golang.org/x/sys/unix"

// setIDCalls are the arm64 syscalls that give a file a mode.
var setIDCalls = []modeCall{
	{unix.SYS_FCHMOD, 1, -1},
	{unix.SYS_FCHMODAT, 2, -1},
	{sysFchmodat2, 2, -1},
	{unix.SYS_OPENAT, 3, 2},
	{unix.SYS_MKNODAT, 2, -1},
}
