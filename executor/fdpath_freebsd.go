package executor

import (
	"errors"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// fdRealPath is where the open file fd really is. FreeBSD cannot say it
// from the descriptor alone, so the path it was opened by is resolved and
// must still lead to the very file fd holds (same device and inode);
// anything renamed or swapped in between is refused, not guessed.
func fdRealPath(fd int, opened string) (string, error) {
	abs, err := filepath.Abs(opened)
	if err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", err
	}
	var have, now unix.Stat_t
	if err := unix.Fstat(fd, &have); err != nil {
		return "", err
	}
	if err := unix.Stat(real, &now); err != nil {
		return "", err
	}
	if have.Dev != now.Dev || have.Ino != now.Ino {
		return "", errors.New("the file moved while it was opened")
	}
	return real, nil
}
