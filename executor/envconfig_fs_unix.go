//go:build linux || darwin || freebsd

package executor

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// readBoundedFile reads the regular file at path, at most limit bytes.
// A missing file is an error satisfying errors.Is(err, fs.ErrNotExist).
func readBoundedFile(path string, limit int64, hidden []string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	if err := checkNotHidden(fd, path, hidden); err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, &fs.PathError{Op: "read", Path: path, Err: errors.New("not a regular file")}
	}
	if st.Size > limit {
		return nil, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w (%d bytes; the limit is %d)", errFileTooLarge, st.Size, limit)}
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: path, Err: err}
	}
	if int64(len(data)) > limit {
		return nil, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w (over %d bytes)", errFileTooLarge, limit)}
	}
	return data, nil
}

// checkNotHidden refuses an open file whose real path is, or is under,
// a hidden path.
func checkNotHidden(fd int, shown string, hidden []string) error {
	if len(hidden) == 0 {
		return nil
	}
	real, err := fdRealPath(fd, shown)
	if err != nil {
		return &fs.PathError{Op: "open", Path: shown, Err: err}
	}
	if underAny(real, hidden) {
		return &fs.PathError{Op: "open", Path: shown, Err: errHiddenPath}
	}
	return nil
}
