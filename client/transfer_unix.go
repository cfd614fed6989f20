//go:build unix

package client

// The local end of a transfer on Unix: the destination directory is opened
// once, and every name below it is reached from that descriptor with
// openat and O_NOFOLLOW, one component at a time, so a directory swapped
// for a symlink mid-copy (by a program in the tree being written, say)
// cannot redirect a write outside the destination. transfer_linux.go and
// transfer_unixother.go hold the two things that differ between kernels.

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/outpost-exec/outpost/internal/fsio"
)

// openLocalDst opens dir, the destination's (existing) directory, once;
// everything below it is reached from that descriptor.
func openLocalDst(dir, name string) (*localDst, error) {
	fd, err := unix.Open(dir, oDirRef|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	return &localDst{fd: fd, dir: dir, top: name}, nil
}

type localDst struct {
	fd  int // the destination's directory, opened with oDirRef
	dir string
	top string
}

func (d *localDst) close() { unix.Close(d.fd) }

// parent opens the directory to lands in, beneath d, component by
// component with O_NOFOLLOW; the caller closes it unless it is d.fd.
func (d *localDst) parent(to string) (int, string, error) {
	dir, name := path.Split(to)
	fd := d.fd
	for _, c := range strings.Split(strings.TrimSuffix(dir, "/"), "/") {
		if c == "" {
			continue
		}
		next, err := unix.Openat(fd, c, oDirRef|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		var st unix.Stat_t
		if maybeSymlinkErr(err) && unix.Fstatat(fd, c, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
			err = ErrDestinationSymlink
		}
		if fd != d.fd {
			unix.Close(fd)
		}
		if err != nil {
			return -1, "", d.pathErr(dir, err)
		}
		fd = next
	}
	return fd, name, nil
}

func (d *localDst) done(fd int) {
	if fd != d.fd {
		unix.Close(fd)
	}
}

func (d *localDst) mkdir(to string, mode fs.FileMode) error {
	fd, name, err := d.parent(to)
	if err != nil {
		return err
	}
	defer d.done(fd)
	err = unix.Mkdirat(fd, name, uint32(mode.Perm()|0o700))
	if err == unix.EEXIST {
		// An existing directory is used; anything else there, a symlink
		// above all, is not.
		var st unix.Stat_t
		if err = unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFDIR:
				return nil
			case unix.S_IFLNK:
				err = ErrDestinationSymlink
			default:
				err = unix.EEXIST
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
func (d *localDst) symlink(to, target string) error {
	fd, name, err := d.parent(to)
	if err != nil {
		return err
	}
	defer d.done(fd)
	tmp := tempName(name)
	if err := unix.Symlinkat(target, fd, tmp); err != nil {
		return d.pathErr(to, err)
	}
	if err := unix.Renameat(fd, tmp, fd, name); err != nil {
		unix.Unlinkat(fd, tmp, 0)
		return d.pathErr(to, err)
	}
	return nil
}

func (d *localDst) create(to string, perm fs.FileMode) (sink, error) {
	fd, name, err := d.parent(to)
	if err != nil {
		return nil, err
	}
	tmp := tempName(name)
	ffd, err := unix.Openat(fd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(perm.Perm()))
	if err != nil {
		d.done(fd)
		return nil, d.pathErr(to, err)
	}
	return &localSink{d: d, dirfd: fd, tmp: tmp, name: name, to: to, perm: perm, f: os.NewFile(uintptr(ffd), tmp)}, nil
}

// localSink writes a temporary file beside the target, renamed into
// place once the digest matches: an interrupted or corrupt copy leaves
// the target untouched.
type localSink struct {
	d             *localDst
	dirfd         int
	tmp, name, to string
	perm          fs.FileMode
	f             *os.File
	closed        bool
}

func (s *localSink) Write(b []byte) (int, error) { return fsio.Write(s.f, b) }

func (s *localSink) release() {
	if !s.closed {
		s.f.Close()
	}
	s.closed = true
	unix.Unlinkat(s.dirfd, s.tmp, 0)
	s.d.done(s.dirfd)
}

func (s *localSink) abort()            { s.release() }
func (s *localSink) discard()          { s.release() }
func (s *localSink) digestAlg() string { return "" }

func (s *localSink) finish() (string, int64, bool, error) {
	// The mode past the umask, by the descriptor: the name could be
	// swapped for a link meanwhile, the open file cannot. No fsync, as
	// cp, scp and the executor's side of an upload: the file is the
	// kernel's to write back, and a copy is not made to wait for the
	// disk (1 GiB of it, on this VM, ~0.5 s).
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
	defer s.release() // after the rename, the unlink finds nothing
	if err := unix.Renameat(s.dirfd, s.tmp, s.dirfd, s.name); err != nil {
		return s.d.pathErr(s.to, err)
	}
	return nil
}

// fileIdentity names the file info describes by device and inode, to tell
// a symlink loop by.
func fileIdentity(p string, info fs.FileInfo) (string, error) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return "", fmt.Errorf("%s: no inode to tell a symlink loop by", p)
	}
	return fmt.Sprintf("%d:%d", st.Dev, st.Ino), nil
}

// openLocalSource opens a file to upload; with noFollow, a file swapped
// for a link since the listing is refused by the kernel.
func openLocalSource(name string, noFollow bool) (*os.File, error) {
	flags := os.O_RDONLY
	if noFollow {
		flags |= unix.O_NOFOLLOW // a file swapped for a link since the listing
	}
	return os.OpenFile(name, flags, 0)
}
