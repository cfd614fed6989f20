//go:build linux || darwin || freebsd

package remotefs

// Creating, removing and copying trees by descriptors: every step is
// relative to a directory already opened and judged, and nothing inside a
// tree is followed (O_NOFOLLOW), so a directory swapped for a symlink in
// the middle of a walk makes a step fail or removes the link itself —
// never leads out of the tree.

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/outpost-exec/outpost/protocol"
)

// --- creating directories ---------------------------------------------------

// mkdir creates the directory p (its parent must exist).
func (r *fsReq) mkdir(shown, p string, perm uint32) error {
	d, base, err := r.parent(shown, p)
	if err != nil {
		return err
	}
	defer d.Close()
	if !r.allows(d.child(base), true) {
		return r.denied(shown, true)
	}
	return unix.Mkdirat(d.fd, base, perm)
}

// mkdirAll creates p and its missing parents and returns it opened. It
// starts from the deepest ancestor that exists (reached as p says,
// symlinks included) and judges where that really is; each new component
// is judged before anything is created and created relative to its
// parent's descriptor, never through a symlink.
func (r *fsReq) mkdirAll(shown, p string, perm uint32) (*fsDir, error) {
	var missing []string // components to create, deepest first
	cur := p
	var d *fsDir
	for {
		var err error
		d, err = r.openDir(shown, cur)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.ENOENT) || cur == "/" {
			return nil, err
		}
		missing = append(missing, filepath.Base(cur))
		cur = filepath.Dir(cur)
	}
	// Judge the whole way first: nothing is created unless all of it may
	// be (an existing directory is judged as a write too, as creating it
	// would be).
	at := d.path
	if len(missing) == 0 && !r.allows(at, true) {
		d.Close()
		return nil, r.denied(shown, true)
	}
	for i := len(missing) - 1; i >= 0; i-- {
		at = filepath.Join(at, missing[i])
		if !r.allows(at, true) {
			d.Close()
			return nil, r.denied(shown, true)
		}
	}
	for i := len(missing) - 1; i >= 0; i-- {
		next, err := r.mkdirIn(shown, d, missing[i], perm)
		d.Close()
		if err != nil {
			return nil, err
		}
		d = next
	}
	return d, nil
}

// mkdirMode creates the directory p with exactly mode (fchmod after
// mkdirat: the umask does not apply), its missing parents with 0755 when
// recursive. An existing directory is left as it is (an error unless
// recursive, as mkdir's). The mode is set through a descriptor of the
// directory made, opened without following a symlink, so a swap after the
// mkdirat cannot aim it elsewhere.
func (r *fsReq) mkdirMode(shown, p string, mode uint32, recursive bool) error {
	dir, base := splitPath(p)
	var d *fsDir
	var err error
	if recursive {
		d, err = r.mkdirAll(shown, dir, 0o755)
	} else {
		d, err = r.openDir(shown, dir)
	}
	if err != nil {
		return err
	}
	defer d.Close()
	if !r.allows(d.child(base), true) {
		return r.denied(shown, true)
	}
	if err := unix.Mkdirat(d.fd, base, mode); err != nil {
		if err == unix.EEXIST && recursive {
			var st unix.Stat_t
			if unix.Fstatat(d.fd, base, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
				return nil
			}
		}
		return err
	}
	fd, err := unix.Openat(d.fd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Fchmod(fd, mode)
}

// mkdirIn creates (or finds) the directory name in d, judged, and opens
// it without following a symlink.
func (r *fsReq) mkdirIn(shown string, d *fsDir, name string, perm uint32) (*fsDir, error) {
	place := d.child(name)
	if !r.allows(place, true) {
		return nil, r.denied(shown, true)
	}
	if err := unix.Mkdirat(d.fd, name, perm); err != nil && err != unix.EEXIST {
		return nil, err
	}
	fd, err := unix.Openat(d.fd, name, oPath|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == unix.ELOOP {
		err = unix.EEXIST // a symlink where the directory goes
	}
	if err != nil {
		return nil, err
	}
	return &fsDir{fd: fd, path: place}, nil
}

// --- removing ---------------------------------------------------------------

// removeIn removes name in d: a symlink or file itself, a directory (with
// everything inside when recursive).
func (r *fsReq) removeIn(shown string, d *fsDir, name string, recursive, force bool) error {
	place := d.child(name)
	var st unix.Stat_t
	err := unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if err != nil {
		if err == unix.ENOENT && !r.allows(place, true) {
			return r.denied(shown, true) // judged before it is looked for
		}
		if err == unix.ENOENT && force {
			return nil
		}
		return err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		if !r.linkPlaceWritable(d, name) {
			return r.denied(shown, true)
		}
		return unix.Unlinkat(d.fd, name, 0)
	case unix.S_IFDIR:
	default:
		if !r.allows(place, true) {
			return r.denied(shown, true)
		}
		return unix.Unlinkat(d.fd, name, 0)
	}
	if !recursive {
		if !r.allows(place, true) {
			return r.denied(shown, true)
		}
		return unix.Unlinkat(d.fd, name, unix.AT_REMOVEDIR)
	}
	fd, err := unix.Openat(d.fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err // ELOOP: swapped for a symlink meanwhile
	}
	dir := os.NewFile(uintptr(fd), place)
	defer dir.Close()
	real, err := r.placed(shown, fd, place)
	if err != nil {
		return err
	}
	if !r.allowsTree(real, true) {
		return r.denied(shown, true)
	}
	// Nothing is removed from a tree that holds a protected name at any
	// depth (one the policy's scan may not list: created since, or in a
	// shared temporary directory).
	if r.pol != nil && len(r.pol.ProtectedNames) > 0 {
		budget := maxTreeEntries
		if err := r.refuseProtectedInside(shown, dir, fd, 1, &budget); err != nil {
			return err
		}
		if _, err := dir.Seek(0, io.SeekStart); err != nil {
			return err
		}
	}
	budget := maxTreeEntries
	return r.removeDir(shown, d.fd, name, dir, fd, 1, &budget)
}

// refuseProtectedInside walks the directory dir (open as fd) by
// descriptors, following nothing, and refuses if it holds a protected
// name.
func (r *fsReq) refuseProtectedInside(shown string, dir *os.File, fd, depth int, budget *int) error {
	for {
		names, err := dir.Readdirnames(dirBatch)
		for _, name := range names {
			if *budget--; *budget < 0 {
				return protocol.KindErrorf(protocol.KindTooLarge, protocol.CodeInvalidRequest, "%s: %s: more than %d entries in the tree", r.method, shown, maxTreeEntries)
			}
			if r.protectedName(name) {
				return r.denied(shown, true)
			}
			// O_DIRECTORY fails before anything else is opened: no side
			// effects of opening a device or a fifo.
			cfd, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			switch err {
			case nil:
			case unix.ENOTDIR, unix.ELOOP, unix.ENOENT:
				continue
			default:
				return err
			}
			child := os.NewFile(uintptr(cfd), name)
			if depth >= maxTreeDepth {
				err = protocol.KindErrorf(protocol.KindTooLarge, protocol.CodeInvalidRequest, "%s: %s: the tree is more than %d levels deep", r.method, shown, maxTreeDepth)
			} else {
				err = r.refuseProtectedInside(shown, child, cfd, depth+1, budget)
			}
			child.Close()
			if err != nil {
				return err
			}
		}
		if err == io.EOF || err == nil && len(names) == 0 {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// removeDir empties dir (the directory name in parentfd, open as fd) and
// removes it.
func (r *fsReq) removeDir(shown string, parentfd int, name string, dir *os.File, fd, depth int, budget *int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	for round := 0; ; round++ {
		if err := r.removeContents(shown, dir, fd, depth, budget); err != nil {
			return err
		}
		// Remove the directory that was emptied, not another one swapped
		// in for it meanwhile.
		var cur unix.Stat_t
		if err := unix.Fstatat(parentfd, name, &cur, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		if cur.Dev != st.Dev || cur.Ino != st.Ino {
			return unix.ENOTEMPTY
		}
		err := unix.Unlinkat(parentfd, name, unix.AT_REMOVEDIR)
		if err != unix.ENOTEMPTY && err != unix.EEXIST || round >= 8 {
			return err
		}
		// Something was added meanwhile: go over it again from the start.
		if _, err := dir.Seek(0, io.SeekStart); err != nil {
			return err
		}
	}
}

// removeContents removes everything in dir (open as fd) without following
// anything: a symlink inside is removed itself.
func (r *fsReq) removeContents(shown string, dir *os.File, fd, depth int, budget *int) error {
	for {
		names, err := dir.Readdirnames(dirBatch)
		for _, name := range names {
			if *budget--; *budget < 0 {
				return protocol.KindErrorf(protocol.KindTooLarge, protocol.CodeInvalidRequest, "%s: %s: more than %d entries in the tree", r.method, shown, maxTreeEntries)
			}
			if r.protectedName(name) { // appeared since the tree was judged
				return r.denied(shown, true)
			}
			if err := r.removeEntry(shown, fd, name, depth, budget); err != nil {
				return err
			}
		}
		if err == io.EOF || err == nil && len(names) == 0 {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// removeEntry removes name in the directory fd, whatever it is.
func (r *fsReq) removeEntry(shown string, fd int, name string, depth int, budget *int) error {
	for try := 0; ; try++ {
		err := unix.Unlinkat(fd, name, 0)
		if err == nil || err == unix.ENOENT {
			return nil
		}
		if err != unix.EISDIR && err != unix.EPERM || try >= 4 {
			return err
		}
		if depth >= maxTreeDepth {
			return protocol.KindErrorf(protocol.KindTooLarge, protocol.CodeInvalidRequest, "%s: %s: the tree is more than %d levels deep", r.method, shown, maxTreeDepth)
		}
		cfd, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		switch err {
		case nil:
		case unix.ENOENT:
			return nil
		case unix.ELOOP, unix.ENOTDIR:
			continue // no longer a directory: unlink it again
		default:
			return err
		}
		child := os.NewFile(uintptr(cfd), name)
		err = r.removeDir(shown, fd, name, child, cfd, depth+1, budget)
		child.Close()
		if err != unix.ENOENT {
			return err
		}
		return nil
	}
}

// --- copying ----------------------------------------------------------------

// tempName is a fresh name for a file written beside base.
func tempName(base string) string {
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := "." + base + ".outpost-" + hex.EncodeToString(rnd[:])
	if len(tmp) > 255 {
		tmp = ".outpost-" + hex.EncodeToString(rnd[:])
	}
	return tmp
}

// createTempIn creates a temporary file in d for a write that lands at
// base: O_EXCL|O_NOFOLLOW, read-write (the running digest may read blocks
// back), with perm past the umask.
func createTempIn(d *fsDir, base string, perm uint32) (*os.File, string, error) {
	tmp := tempName(base)
	fd, err := unix.Openat(d.fd, tmp, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, perm)
	if err != nil {
		return nil, "", err
	}
	unix.Fchmod(fd, perm)
	return os.NewFile(uintptr(fd), d.child(tmp)), tmp, nil
}

// copyTree copies the directory src (opened, judged readable with all it
// holds) to dst: directories and files with their modes, symlinks as
// symlinks (never followed), other kinds not at all.
func (r *fsReq) copyTree(srcShown, dstShown string, src *fsObject, dst string) error {
	if !r.allowsTree(src.path, false) {
		return r.denied(srcShown, false)
	}
	if within(src.path, realPath(dst)) {
		return r.intoItself(srcShown, dstShown)
	}
	perm := uint32(src.st.Mode)&0o777 | 0o700
	d, err := r.mkdirAll(dstShown, dst, perm)
	if err != nil {
		return err
	}
	defer d.Close()
	// Where the destination really is, now that it exists: inside the
	// source is refused, and so is a tree holding anything less writable.
	if d.path, err = r.placed(dstShown, d.fd, d.path); err != nil {
		return err
	}
	if within(src.path, d.path) {
		return r.intoItself(srcShown, dstShown)
	}
	if !r.allowsTree(d.path, true) {
		return r.denied(dstShown, true)
	}
	in, err := reopen(src.fd, unix.O_RDONLY|unix.O_DIRECTORY, src.path)
	if err != nil {
		return err
	}
	defer in.Close()
	budget := maxTreeEntries
	return r.copyDir(in, int(in.Fd()), src.path, d, 1, &budget)
}

func (r *fsReq) intoItself(srcShown, dstShown string) error {
	return protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidRequest, "%s: cannot copy %s into itself (%s)", r.method, srcShown, dstShown)
}

// copyDir copies what the directory in (open as fd, at from) holds into d.
func (r *fsReq) copyDir(in *os.File, fd int, from string, d *fsDir, depth int, budget *int) error {
	for {
		names, rerr := in.Readdirnames(dirBatch)
		for _, name := range names {
			if *budget--; *budget < 0 {
				return protocol.KindErrorf(protocol.KindTooLarge, protocol.CodeInvalidRequest, "%s: %s: more than %d entries in the tree", r.method, from, maxTreeEntries)
			}
			if err := r.copyEntry(fd, filepath.Join(from, name), name, d, depth, budget); err != nil {
				return err
			}
		}
		if rerr == io.EOF || rerr == nil && len(names) == 0 {
			return nil
		}
		if rerr != nil {
			return r.fsError(from, rerr)
		}
	}
}

// copyEntry copies name in the directory fd to name in d, judging its
// place there first.
func (r *fsReq) copyEntry(fd int, from, name string, d *fsDir, depth int, budget *int) error {
	to := d.child(name)
	var st unix.Stat_t
	if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if err == unix.ENOENT {
			return nil // gone meanwhile
		}
		return r.fsError(from, err)
	}
	perm := uint32(st.Mode) & 0o777
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		if depth >= maxTreeDepth {
			return protocol.KindErrorf(protocol.KindTooLarge, protocol.CodeInvalidRequest, "%s: %s: the tree is more than %d levels deep", r.method, from, maxTreeDepth)
		}
		sub, err := r.mkdirIn(to, d, name, perm|0o700)
		if err != nil {
			return r.fsError(to, err)
		}
		defer sub.Close()
		cfd, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return r.fsError(from, err)
		}
		child := os.NewFile(uintptr(cfd), from)
		defer child.Close()
		return r.copyDir(child, cfd, from, sub, depth+1, budget)
	case unix.S_IFLNK:
		if !r.allows(to, true) {
			return r.denied(to, true)
		}
		target, err := readlinkAt(fd, name)
		if err != nil {
			return r.fsError(from, err)
		}
		return r.fsErrorOrNil(to, unix.Symlinkat(target, d.fd, name))
	case unix.S_IFREG:
		if !r.allows(to, true) {
			return r.denied(to, true)
		}
		sfd, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return r.fsError(from, err)
		}
		in := os.NewFile(uintptr(sfd), from)
		defer in.Close()
		if err := unix.Fstat(sfd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			return protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidRequest, "%s: %s: not a regular file", r.method, from)
		}
		return r.copyInto(from, in, d, name, perm)
	}
	return nil // sockets, devices, fifos are not copied
}

// copyInto writes what in holds to name in d, through a temporary file
// renamed into place.
func (r *fsReq) copyInto(from string, in *os.File, d *fsDir, name string, perm uint32) error {
	to := d.child(name)
	out, tmp, err := createTempIn(d, name, perm)
	if err != nil {
		return r.fsError(to, err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		unix.Unlinkat(d.fd, tmp, 0)
		return r.fsError(from, err)
	}
	if err := out.Close(); err != nil {
		unix.Unlinkat(d.fd, tmp, 0)
		return r.fsError(to, err)
	}
	if err := unix.Renameat(d.fd, tmp, d.fd, name); err != nil {
		unix.Unlinkat(d.fd, tmp, 0)
		return r.fsError(to, err)
	}
	return nil
}
