package client

// The local end of a transfer on Windows. Windows has no openat, so names
// below the destination are reached by path, each directory component
// checked with Lstat first: a symlink or junction (reported as irregular)
// where a directory is expected is refused with ErrDestinationSymlink, as
// on Unix. The guarantee is weaker than Unix's descriptor walk: a
// component swapped for a link between its check and the create below it
// is followed. Files are still written under a temporary name created with
// O_EXCL (CREATE_NEW, which never follows a link) and renamed into place,
// so a link already at the target is replaced, not written through.

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/windows"

	"github.com/outpost-exec/outpost/internal/fsio"
)

// openLocalDst checks dir, the destination's (existing) directory.
func openLocalDst(dir, name string) (*localDst, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: syscall.ENOTDIR}
	}
	return &localDst{dir: dir, top: name}, nil
}

type localDst struct {
	dir string
	top string
}

func (d *localDst) close() {}

// isLink: a symlink, or a junction or other reparse point that Lstat
// reports as irregular.
func isLink(m fs.FileMode) bool { return m&(fs.ModeSymlink|fs.ModeIrregular) != 0 }

// windowsLocalName: a name from an executor's listing has passed the
// Unix checks (one element, no "/"), but Windows also splits at a backslash,
// reads "C:" or "x:stream" specially and reserves device names (NUL,
// COM1, ...): any of those could land a file outside the destination.
func windowsLocalName(n string) bool {
	return filepath.IsLocal(n) && !strings.ContainsAny(n, `\:`)
}

// parent returns the directory to lands in, beneath d, having checked
// each component below d with Lstat, and every name with
// windowsLocalName (ErrUnsafeName).
func (d *localDst) parent(to string) (string, string, error) {
	dir, name := path.Split(to)
	if !windowsLocalName(name) {
		return "", "", d.pathErr(to, ErrUnsafeName)
	}
	cur := d.dir
	for _, c := range strings.Split(strings.TrimSuffix(dir, "/"), "/") {
		if c == "" {
			continue
		}
		if !windowsLocalName(c) {
			return "", "", d.pathErr(dir, ErrUnsafeName)
		}
		cur = filepath.Join(cur, c)
		fi, err := os.Lstat(cur)
		switch {
		case err != nil:
			return "", "", d.pathErr(dir, err)
		case isLink(fi.Mode()):
			return "", "", d.pathErr(dir, ErrDestinationSymlink)
		case !fi.IsDir():
			return "", "", d.pathErr(dir, syscall.ENOTDIR)
		}
	}
	return cur, name, nil
}

func (d *localDst) mkdir(to string, mode fs.FileMode) error {
	dir, name, err := d.parent(to)
	if err != nil {
		return err
	}
	full := filepath.Join(dir, name)
	err = os.Mkdir(full, mode.Perm()|0o700)
	if os.IsExist(err) {
		// An existing directory is used; anything else there, a symlink
		// above all, is not.
		if fi, lerr := os.Lstat(full); lerr == nil {
			switch {
			case isLink(fi.Mode()):
				err = ErrDestinationSymlink
			case fi.IsDir():
				return nil
			}
		}
	}
	if err != nil {
		return d.pathErr(to, err)
	}
	return nil
}

// symlink makes the link under a temporary name and renames it into
// place: a file or link already there is replaced, never followed.
// Making symlinks needs Developer Mode or the privilege to create them.
func (d *localDst) symlink(to, target string) error {
	dir, name, err := d.parent(to)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, tempName(name))
	if err := os.Symlink(target, tmp); err != nil {
		return d.pathErr(to, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		os.Remove(tmp)
		return d.pathErr(to, err)
	}
	return nil
}

func (d *localDst) create(to string, perm fs.FileMode) (sink, error) {
	dir, name, err := d.parent(to)
	if err != nil {
		return nil, err
	}
	tmp := filepath.Join(dir, tempName(name))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm.Perm())
	if err != nil {
		return nil, d.pathErr(to, err)
	}
	return &localSink{d: d, tmp: tmp, final: filepath.Join(dir, name), to: to, perm: perm, f: f}, nil
}

// localSink writes a temporary file beside the target, renamed into
// place once the digest matches: an interrupted or corrupt copy leaves
// the target untouched.
type localSink struct {
	d              *localDst
	tmp, final, to string
	perm           fs.FileMode
	f              *os.File
	closed         bool
}

func (s *localSink) Write(b []byte) (int, error) { return fsio.Write(s.f, b) }

func (s *localSink) release() {
	if !s.closed {
		s.f.Close()
	}
	s.closed = true
	os.Remove(s.tmp)
}

func (s *localSink) abort()            { s.release() }
func (s *localSink) discard()          { s.release() }
func (s *localSink) digestAlg() string { return "" }

func (s *localSink) finish() (string, int64, bool, error) {
	// Windows keeps only the owner-write bit, as the read-only attribute.
	err := s.f.Chmod(s.perm.Perm())
	if cerr := s.f.Close(); err == nil {
		err = cerr
	}
	s.closed = true
	if err != nil {
		s.release()
		return "", 0, false, s.d.pathErr(s.to, err)
	}
	return "", 0, false, nil
}

func (s *localSink) commit() error {
	defer s.release() // after the rename, the remove finds nothing
	if err := os.Rename(s.tmp, s.final); err != nil {
		return s.d.pathErr(s.to, err)
	}
	return nil
}

// fileIdentity names the file p (followed, as os.Stat does) by volume
// serial number and file index, to tell a symlink loop by.
func fileIdentity(p string, _ fs.FileInfo) (string, error) {
	name, err := windows.UTF16PtrFromString(p)
	if err != nil {
		return "", &fs.PathError{Op: "open", Path: p, Err: err}
	}
	// No access rights are needed to read a file's identity; backup
	// semantics lets directories be opened.
	h, err := windows.CreateFile(name, 0, windows.FILE_SHARE_READ|windows.FILE_SHARE_WRITE|windows.FILE_SHARE_DELETE, nil, windows.OPEN_EXISTING, windows.FILE_FLAG_BACKUP_SEMANTICS, 0)
	if err != nil {
		return "", &fs.PathError{Op: "open", Path: p, Err: err}
	}
	defer windows.CloseHandle(h)
	var fi windows.ByHandleFileInformation
	if err := windows.GetFileInformationByHandle(h, &fi); err != nil {
		return "", &fs.PathError{Op: "stat", Path: p, Err: err}
	}
	return fmt.Sprintf("%d:%d:%d", fi.VolumeSerialNumber, fi.FileIndexHigh, fi.FileIndexLow), nil
}

// openLocalSource opens a file to upload. With noFollow, Windows having no
// O_NOFOLLOW, the name must not be a link by Lstat, and the file opened
// must be the one Lstat saw: a file swapped for a link since the listing
// is refused before anything is read from it.
func openLocalSource(name string, noFollow bool) (*os.File, error) {
	if !noFollow {
		return os.Open(name)
	}
	li, err := os.Lstat(name)
	if err != nil {
		return nil, err
	}
	if !li.Mode().IsRegular() {
		return nil, &fs.PathError{Op: "open", Path: name, Err: syscall.ELOOP}
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !os.SameFile(li, fi) {
		f.Close()
		return nil, &fs.PathError{Op: "open", Path: name, Err: syscall.ELOOP}
	}
	return f, nil
}
