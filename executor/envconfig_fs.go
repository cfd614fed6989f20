package executor

// Reading codex's own files on the executor (config.toml, requirements,
// SKILL.md) for environmentConfig/read and capabilities/discoverV2.
//
// Every file is read through one descriptor: opened non-blocking (a FIFO
// planted where a config file belongs cannot hang the handler), checked
// on that descriptor to be a regular file within a size bound, then read
// with a bound one byte past it, so a file that grows in between is still
// caught. Symlinks are followed, as codex follows them (dotfile managers
// link config.toml), but where a file really is is checked against the
// executor's hidden paths (Config.SandboxHidden): a link cannot make the
// executor hand its own keys to a client.

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// errHiddenPath refuses a file that resolves into a hidden path.
var errHiddenPath = errors.New("is hidden from clients of this executor")

// errFileTooLarge refuses a file over its bound.
var errFileTooLarge = errors.New("file too large")

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
	real, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return &fs.PathError{Op: "open", Path: shown, Err: err}
	}
	if underAny(real, hidden) {
		return &fs.PathError{Op: "open", Path: shown, Err: errHiddenPath}
	}
	return nil
}

func underAny(p string, roots []string) bool {
	for _, h := range roots {
		h = filepath.Clean(h)
		if p == h || strings.HasPrefix(p, h+"/") || h == "/" {
			return true
		}
	}
	return false
}

// statDir reports whether path (following symlinks) is a directory; a
// missing path is (false, nil).
func statDir(path string) (bool, error) {
	fi, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR) {
			return false, nil
		}
		return false, err
	}
	return fi.IsDir(), nil
}

// exists reports whether path (following symlinks) can be stat'ed, as
// codex's get_metadata succeeds.
func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
