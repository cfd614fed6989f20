package procgroup

import (
	"os"
	"syscall"

	"golang.org/x/sys/windows"
)

// attr: a new console process group, so a Ctrl-C meant for the parent's
// group does not reach the child.
func attr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{CreationFlags: syscall.CREATE_NEW_PROCESS_GROUP}
}

// Kill terminates the process pid (Windows has no signal to a group: the
// child's own children are not reached).
func Kill(pid int) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	return p.Kill()
}

// Term is Kill: Windows processes have no SIGTERM.
func Term(pid int) error { return Kill(pid) }

// Alive reports whether process pid exists and has not exited.
func Alive(pid int) bool {
	h, err := windows.OpenProcess(windows.PROCESS_QUERY_LIMITED_INFORMATION, false, uint32(pid))
	if err != nil {
		return false
	}
	defer windows.CloseHandle(h)
	var code uint32
	if windows.GetExitCodeProcess(h, &code) != nil {
		return false
	}
	return code == 259 // STILL_ACTIVE
}
