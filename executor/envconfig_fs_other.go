//go:build !(linux || darwin || freebsd)

package executor

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// readBoundedFile reads the regular file at path, at most limit bytes,
// through the os package (the executor does not serve on these systems,
// NewServer refuses; this keeps the package whole). The hidden check
// resolves the path's symlinks before the open, a weaker guarantee than
// the descriptor check on Linux: a rename in between is not seen.
func readBoundedFile(path string, limit int64, hidden []string) ([]byte, error) {
	if len(hidden) > 0 {
		real, err := filepath.EvalSymlinks(path)
		if err != nil {
			return nil, &fs.PathError{Op: "open", Path: path, Err: err}
		}
		if underAny(filepath.ToSlash(real), hidden) {
			return nil, &fs.PathError{Op: "open", Path: path, Err: errHiddenPath}
		}
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, &fs.PathError{Op: "read", Path: path, Err: errors.New("not a regular file")}
	}
	if fi.Size() > limit {
		return nil, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w (%d bytes; the limit is %d)", errFileTooLarge, fi.Size(), limit)}
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

// list lists dir through the os package (see readBoundedFile); its key is
// the directory's resolved path, there being no inode number to use.
func (l localFS) list(dir string, max int) ([]capEnt, string, error) {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, "", &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	if len(l.hidden) > 0 && underAny(filepath.ToSlash(real), l.hidden) {
		return nil, "", &fs.PathError{Op: "open", Path: dir, Err: errHiddenPath}
	}
	f, err := os.Open(real)
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	var out []capEnt
	for len(out) < max {
		ents, err := f.ReadDir(min(max-len(out), 256))
		for _, e := range ents {
			t := e.Type()
			out = append(out, capEnt{name: e.Name(), dir: t.IsDir(), regular: t.IsRegular(), symlink: t&fs.ModeSymlink != 0})
		}
		if err != nil {
			return out, real, nil
		}
	}
	if more, _ := f.ReadDir(1); len(more) > 0 {
		return out, real, errTooManyEntries
	}
	return out, real, nil
}
