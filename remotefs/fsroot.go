//go:build linux || darwin || freebsd

package remotefs

// Descriptor-relative path handling for the fs/* methods.
//
// A path from a client is resolved once: its parent directory (or, for a
// read, the object itself) is opened — following ordinary symlinks as the
// path says — and what that descriptor really is comes from the system
// (fsroot_linux.go: /proc/self/fd; fsroot_bsd.go: F_GETPATH on darwin).
// The policy judges that real place; the operation then runs only
// relative to the descriptor (openat with O_NOFOLLOW, mkdirat, unlinkat,
// renameat, fstatat, readlinkat, symlinkat), never through the path
// string again. A symlink swapped in after the check can then only make a
// step fail: the descriptor already names the judged directory.

import (
	"errors"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/sandbox"
)

const (
	// maxTreeDepth bounds how deep a recursive remove or copy walks (a
	// path of PATH_MAX holds at most 2048 components).
	maxTreeDepth = 4096
	// maxTreeEntries bounds the entries one recursive remove or copy
	// visits, so a command adding entries as fast as they go cannot keep
	// a call running.
	maxTreeEntries = 1 << 24
	// maxLinkHops bounds the symlinks a write follows at its final
	// component, as the kernel's 40.
	maxLinkHops = 40
	// dirBatch is how many names a walk reads at a time.
	dirBatch = 256
)

// fsDir is an open directory (oPath unless said otherwise) and where it
// was when it was opened.
type fsDir struct {
	fd   int
	path string
}

func (d *fsDir) Close() {
	if d != nil && d.fd >= 0 {
		unix.Close(d.fd)
		d.fd = -1
	}
}

// child is where name inside d is.
func (d *fsDir) child(name string) string { return filepath.Join(d.path, name) }

// openNoFollowWalk opens path component by component, none followed.
func openNoFollowWalk(dirfd int, path string, flags int) (int, error) {
	names := strings.Split(path, "/")
	start := "."
	if filepath.IsAbs(path) {
		start = "/"
	}
	fd, err := unix.Openat(dirfd, start, oPath|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	for i := 0; err == nil && i < len(names); i++ {
		if names[i] == "" || names[i] == "." {
			continue
		}
		next := oPath | unix.O_DIRECTORY
		if i == len(names)-1 {
			next = flags
		}
		nfd, oerr := unix.Openat(fd, names[i], next|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		var st unix.Stat_t
		if oerr == unix.ENOTDIR && unix.Fstatat(fd, names[i], &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
			oerr = unix.ELOOP // O_DIRECTORY met the link before O_NOFOLLOW did
		}
		unix.Close(fd)
		fd, err = nfd, oerr
	}
	if err != nil {
		return -1, err
	}
	return fd, nil
}

// errUnplaced: /proc/self/fd cannot say where a descriptor is (no /proc,
// or a place outside this process's root).
var errUnplaced = errors.New("cannot tell where it is")

// splitPath splits a clean absolute path into its parent and final name;
// "/" is "." inside "/".
func splitPath(p string) (dir, base string) {
	if p == "/" {
		return "/", "."
	}
	return filepath.Dir(p), filepath.Base(p)
}

// placed is where fd is. With a policy it must be known; without one the
// path it was opened by stands in.
func (r *fsReq) placed(shown string, fd int, opened string) (string, error) {
	real, err := fdPath(fd)
	switch {
	case err == nil:
		return real, nil
	case errors.Is(err, unix.ENOENT):
		return "", err
	case r.pol != nil:
		return "", protocol.KindErrorf(protocol.KindPermission, protocol.CodeInvalidRequest, "%s: %s: access denied by the sandbox policy (%v)", r.method, shown, err)
	}
	return opened, nil
}

// openDir opens the directory p, following symlinks as p says.
func (r *fsReq) openDir(shown, p string) (*fsDir, error) {
	open := openat2
	if r.noFollow {
		open = openat2NoSymlinks
	}
	fd, err := open(unix.AT_FDCWD, p, oPath|unix.O_DIRECTORY)
	if err == unix.ELOOP && r.noFollow {
		return nil, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidRequest, "%s: %s: a symlink in the path, which noFollow does not follow", r.method, shown)
	}
	if err != nil {
		return nil, err
	}
	real, err := r.placed(shown, fd, p)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &fsDir{fd: fd, path: real}, nil
}

// parent opens p's parent directory and returns it with p's final name.
func (r *fsReq) parent(shown, p string) (*fsDir, string, error) {
	dir, base := splitPath(p)
	d, err := r.openDir(shown, dir)
	if err != nil {
		return nil, "", err
	}
	return d, base, nil
}

// fsObject is an object opened with oPathObject (following symlinks), where
// it is and what it is.
type fsObject struct {
	fd   int
	path string
	st   unix.Stat_t
}

func (o *fsObject) Close() { unix.Close(o.fd) }

func (o *fsObject) isDir() bool     { return o.st.Mode&unix.S_IFMT == unix.S_IFDIR }
func (o *fsObject) isRegular() bool { return o.st.Mode&unix.S_IFMT == unix.S_IFREG }

// readlinkAt reads the symlink name inside dirfd.
func readlinkAt(dirfd int, name string) (string, error) {
	for size := 256; size <= 1<<16; size *= 4 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
	return "", unix.ENAMETOOLONG
}

// allows judges path, which comes from a descriptor (/proc/self/fd) plus,
// at most, a final name, exactly as it is: resolving it again would let a
// command renaming a directory of the path in between point the judgment
// elsewhere. Without a policy everything is allowed.
func (r *fsReq) allows(path string, write bool) bool {
	return r.pol == nil || r.pol.AllowsReal(path, write)
}

// allowsTree judges path and everything under it.
func (r *fsReq) allowsTree(path string, write bool) bool {
	return r.pol == nil || r.pol.AllowsReal(path, write) && r.pol.AllowsTreeReal(path, write)
}

// protectedName reports whether name is one the policy keeps read-only at
// any depth below a writable root.
func (r *fsReq) protectedName(name string) bool { return r.pol != nil && r.pol.ProtectedName(name) }

// linkPlaceWritable judges the removal of the symlink name in d: the link
// goes, not what it leads to, so its own place is judged (the policy's
// Allows would judge its target): d writable, the name not protected, the
// link not a protected path, and no entry at the link granting less.
func (r *fsReq) linkPlaceWritable(d *fsDir, name string) bool {
	if r.pol == nil {
		return true
	}
	if !r.allows(d.path, true) || r.protectedName(name) {
		return false
	}
	place := d.child(name)
	for _, p := range r.pol.Protected {
		if within(p, place) {
			return false
		}
	}
	for _, e := range r.pol.Entries {
		if within(place, e.Path) && e.Access != sandbox.AccessWrite {
			return false
		}
	}
	return true
}
