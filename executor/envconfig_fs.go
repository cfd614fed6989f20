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
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// errHiddenPath refuses a file that resolves into a hidden path.
var errHiddenPath = errors.New("is hidden from clients of this executor")

// errFileTooLarge refuses a file over its bound.
var errFileTooLarge = errors.New("file too large")

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
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
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
