package executor

// The file access capability discovery reads capabilities through:
// directly (the executor's own access, minus its hidden paths), or, when
// the request carries a sandbox, through the session's fs/* judge
// (remotefs), so a policy that denies a path denies it to discovery as
// it does to fs/readFile. Where the capabilities are (the plugin cache,
// the fixed roots) is always resolved with the executor's own access, as
// in codex: knowing a location does not let a client read it.

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/outpost-exec/outpost/pathmap"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/remotefs"
)

// capEnt is one directory entry (symlinks not followed).
type capEnt struct {
	name                  string
	dir, regular, symlink bool
}

// capFS reads capability files. Missing paths are errors satisfying
// errors.Is(err, fs.ErrNotExist); denied ones fs.ErrPermission.
type capFS interface {
	// isDir follows symlinks; a missing path is (false, nil).
	isDir(path string) (bool, error)
	// list reads at most max entries of dir, with a key naming the
	// directory itself (so a walk enters it once).
	list(dir string, max int) ([]capEnt, string, error)
	readFile(path string, limit int64) ([]byte, error)
}

// localFS is the executor's own access, minus its hidden paths.
type localFS struct{ hidden []string }

func (l localFS) isDir(path string) (bool, error) { return statDir(path) }

func (l localFS) readFile(path string, limit int64) ([]byte, error) {
	return readBoundedFile(path, limit, l.hidden)
}

var errTooManyEntries = errors.New("too many directory entries")

// sandboxFS judges every access by the request's sandbox, through the
// session's file system.
type sandboxFS struct {
	files  *remotefs.Session
	policy any
	mapper *pathmap.Mapper
}

func (s sandboxFS) uri(p string) string { return pathmap.URI(s.mapper.ToClient(p)) }

// fsErr turns a remotefs refusal into the fs error it stands for.
func fsErr(err error) error {
	var pe *protocol.Error
	if !errors.As(err, &pe) {
		return err
	}
	switch pe.Kind() {
	case protocol.KindNotFound:
		return fmt.Errorf("%w: %s", fs.ErrNotExist, pe.Message)
	case protocol.KindPermission:
		return fmt.Errorf("%w: %s", fs.ErrPermission, pe.Message)
	case protocol.KindTooLarge:
		return fmt.Errorf("%w: %s", errFileTooLarge, pe.Message)
	}
	return err
}

func (s sandboxFS) isDir(path string) (bool, error) {
	// fs/canonicalize follows links and is judged like a read.
	res, err := s.files.Canonicalize(protocol.FsPathParams{Path: s.uri(path), Sandbox: s.policy})
	if err != nil {
		if err = fsErr(err); errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return false, err
	}
	real := res.(protocol.FsCanonicalizeResult).Path
	md, err := s.files.GetMetadata(protocol.FsPathParams{Path: real, Sandbox: s.policy})
	if err != nil {
		return false, fsErr(err)
	}
	return md.(protocol.FsMetadata).IsDirectory, nil
}

func (s sandboxFS) list(dir string, max int) ([]capEnt, string, error) {
	res, err := s.files.Canonicalize(protocol.FsPathParams{Path: s.uri(dir), Sandbox: s.policy})
	if err != nil {
		return nil, "", fsErr(err)
	}
	key := res.(protocol.FsCanonicalizeResult).Path
	lr, err := s.files.ReadDirectory(protocol.FsPathParams{Path: s.uri(dir), Sandbox: s.policy})
	if err != nil {
		return nil, "", fsErr(err)
	}
	ents := lr.(protocol.FsReadDirectoryResult).Entries
	var out []capEnt
	for _, e := range ents {
		if len(out) == max {
			return out, key, errTooManyEntries
		}
		out = append(out, capEnt{name: e.FileName, dir: e.IsDirectory, regular: e.IsFile, symlink: e.IsSymlink})
	}
	return out, key, nil
}

func (s sandboxFS) readFile(path string, limit int64) ([]byte, error) {
	// remotefs opens the file by an O_PATH descriptor, refuses what is
	// not a regular file and reads within the bound.
	max := uint64(max(limit, 0))
	res, err := s.files.ReadFile(protocol.FsReadFileParams{Path: s.uri(path), Sandbox: s.policy, MaxBytes: &max})
	if err != nil {
		return nil, fsErr(err)
	}
	return res.(protocol.FsReadFileResult).Data, nil
}

// rootVisible reports whether a root that could not be opened is one the
// reader could see from its parent: then its refusal is worth a warning.
// A root under a directory the sandbox does not let it read at all (a
// policy granting only the workspace) is skipped silently, as codex does.
func (e codexEnv) rootVisible(root string) bool {
	ok, err := e.fsys().isDir(filepath.Dir(root))
	return ok && err == nil
}
