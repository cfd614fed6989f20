package pathmap

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// maxSymlinks bounds symlink expansions in one resolution (as Go's
// filepath.EvalSymlinks does); more is reported as a loop.
const maxSymlinks = 255

// errDotDotTail marks a ".." below a component that does not exist.
var errDotDotTail = errors.New(`".." after a component that does not exist`)

// Within reports whether path (absolute, may not exist yet) stays inside root
// and returns it resolved. Symlinks are resolved in every existing component
// of path, and of root, component by component as the kernel would: ".."
// applies to the resolved parent, and a dangling symlink is followed to its
// (missing) target. Once a component does not exist the rest is appended
// lexically, and a ".." there is rejected. A result outside the resolved root
// (compared at a path-component boundary) returns an error wrapping
// ErrEscape that names path and root. Other failures (relative input,
// a non-directory in the middle, too many symlinks, permission errors) are
// returned as they are.
func Within(root, path string) (resolved string, err error) {
	rr, err := resolve(root)
	if err != nil {
		return "", fmt.Errorf("pathmap: root %s: %w", quote(root), err)
	}
	rp, err := resolve(path)
	if err != nil {
		if errors.Is(err, errDotDotTail) {
			return "", fmt.Errorf("%w: %s (root %s): %v", ErrEscape, quote(path), quote(root), err)
		}
		return "", fmt.Errorf("pathmap: %s: %w", quote(path), err)
	}
	if !under(rp, rr) {
		return "", fmt.Errorf("%w: %s resolves to %s, outside root %s (resolved %s)",
			ErrEscape, quote(path), quote(rp), quote(root), quote(rr))
	}
	return rp, nil
}

// resolve resolves symlinks in every existing component of the absolute
// path p and appends the non-existent rest lexically.
func resolve(p string) (string, error) {
	if strings.IndexByte(p, 0) >= 0 {
		return "", errors.New("contains a NUL byte")
	}
	if !filepath.IsAbs(p) {
		return "", errors.New("is not absolute")
	}
	pending := strings.Split(p, "/")
	resolved := "/"
	links := 0
	for len(pending) > 0 {
		c := pending[0]
		pending = pending[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			resolved = filepath.Dir(resolved)
			continue
		}
		next := filepath.Join(resolved, c)
		fi, err := os.Lstat(next)
		if errors.Is(err, fs.ErrNotExist) {
			var b strings.Builder
			b.WriteString(next)
			for _, t := range pending {
				switch t {
				case "", ".":
				case "..":
					return "", fmt.Errorf("%s: %w", quote(p), errDotDotTail)
				default:
					b.WriteByte('/')
					b.WriteString(t)
				}
			}
			return b.String(), nil
		}
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			links++
			if links > maxSymlinks {
				return "", &fs.PathError{Op: "resolve", Path: p, Err: syscall.ELOOP}
			}
			target, err := os.Readlink(next)
			if err != nil {
				return "", err
			}
			if target == "" {
				return "", &fs.PathError{Op: "readlink", Path: next, Err: syscall.ENOENT}
			}
			if strings.HasPrefix(target, "/") {
				resolved = "/"
			}
			pending = append(strings.Split(target, "/"), pending...)
			continue
		}
		if !fi.IsDir() && hasMore(pending) {
			return "", &fs.PathError{Op: "resolve", Path: next, Err: syscall.ENOTDIR}
		}
		resolved = next
	}
	return resolved, nil
}

// hasMore reports whether components other than "" remain. A trailing "." or
// ".." after a file is an error in the kernel too.
func hasMore(pending []string) bool {
	for _, c := range pending {
		if c != "" {
			return true
		}
	}
	return false
}
