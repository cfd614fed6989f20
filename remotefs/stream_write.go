//go:build linux || darwin || freebsd

package remotefs

// codex 0.171's streamed writes: fs/open with mode "replace", then
// fs/writeBlock at any offset, then fs/close (protocol/fs_stream.go).
//
// The semantics are codex's, checked against its server: the open
// truncates the file in place (or creates it, mode 0666 less the umask)
// before it answers; blocks land at their offsets in any order, a gap
// reading as zeros; nothing is renamed at fs/close, so a handle released
// without it (a session that ends, a failed fs/readBlock) leaves the file
// as written so far. No temporary file is ever made, so none can be left
// behind. A file reached through a symlink is written where the link
// leads, keeping its inode, mode and owner.
//
// Judged as every outpost fs call is: the parent directory is opened and
// placed by descriptor, a final symlink followed hop by hop and each
// place judged (a read-only policy, a protected sub-path and a "none"
// path all refuse the write), and the file opened relative to the judged
// directory with O_NOFOLLOW, so a link swapped in afterwards fails the
// open instead of redirecting it. Nothing is truncated or created before
// the handle id and the session's capacity are admitted.
//
// Bounds: a block is 1 to protocol.MaxWriteBlockBytes bytes; a handle is
// one slot of the session's table (Config.MaxFileHandles, shared with
// fs/open and fs/create); one block at a time per handle (its mutex); and
// the bytes in flight per connection are at most the executor's
// MaxConcurrentReads fs calls, one block each.

import (
	"errors"
	"math"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/outpost-exec/outpost/internal/errkind"
	"github.com/outpost-exec/outpost/internal/fsio"
	"github.com/outpost-exec/outpost/protocol"
)

// maxReadBlockBytes is codex's bound on one fs/readBlock (its
// FILE_READ_CHUNK_SIZE), which it checks before it looks at the handle.
const maxReadBlockBytes = 1 << 20

// openRetries bounds how often an open retries when the entry it judged
// appears or vanishes between the look and the open.
const openRetries = 3

// openReplace serves fs/open with a mode other than read.
func (s *Session) openReplace(p protocol.FsOpenParams) (any, error) {
	method := protocol.MethodFsOpen
	if p.Mode != protocol.FsOpenReplace {
		return nil, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "invalid params for %s: %s", method, protocol.ErrUnknownOpenMode(string(p.Mode)))
	}
	r, n, err := s.fsBegin(method, p.Sandbox, p.Path)
	if err != nil {
		return nil, err
	}
	if err := s.admit(method, p.HandleID); err != nil {
		return nil, err
	}
	f, d, base, created, err := r.openInPlace(p.Path, n)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	h := &fsHandle{f: f, replace: true, broken: true} // broken: no running digest for in-place writes
	// Held until the file is truncated, so no block of a client guessing
	// the id lands before the truncation wipes it.
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := s.addHandle(method, p.HandleID, h); err != nil {
		// Lost a race to another open of the id (admit let both pass).
		f.Close()
		if created {
			unix.Unlinkat(d.fd, base, 0)
		}
		return nil, err
	}
	if !created {
		if err := f.Truncate(0); err != nil {
			s.dropHandle(p.HandleID, h)
			f.Close()
			return nil, codexError(method, p.Path, err)
		}
	}
	return protocol.FsHandleResult{HandleID: p.HandleID}, nil
}

// admit refuses, before anything is touched, an id already open and a
// session without a free handle (codex's order and words; addHandle
// checks again once the file is open).
func (s *Session) admit(method, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.ended:
		return protocol.KindErrorf(protocol.KindUnknownSession, protocol.CodeInvalidRequest, "session %s has ended", s.id)
	case s.handles[id] != nil:
		return protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidRequest, "file handle `%s` already exists", id)
	case len(s.handles) >= s.cfg.MaxFileHandles:
		return protocol.KindErrorf(protocol.KindExhausted, protocol.CodeInvalidRequest, "%s: too many open file handles in this session (limit %d)", method, s.cfg.MaxFileHandles)
	}
	return nil
}

// dropHandle removes h from the table if it is still there under id.
func (s *Session) dropHandle(id string, h *fsHandle) {
	s.mu.Lock()
	if s.handles[id] == h {
		delete(s.handles, id)
	}
	s.mu.Unlock()
}

// openInPlace opens the regular file p leads to for writing without
// truncating it, creating it when missing (created). d is the judged
// directory holding it under base; the caller closes d.
func (r *fsReq) openInPlace(shown, p string) (f *os.File, d *fsDir, base string, created bool, err error) {
	d, base, st, err := r.writePlace(shown, p)
	if err != nil {
		return nil, nil, "", false, r.streamFailed(shown, p, err)
	}
	fail := func(err error) (*os.File, *fsDir, string, bool, error) {
		d.Close()
		return nil, nil, "", false, err
	}
	if base == "." || base == "/" {
		return fail(codexError(r.method, shown, syscall.EISDIR))
	}
	if !r.allows(d.child(base), true) {
		return fail(r.denied(shown, true))
	}
	// Judged by what is there before it is opened: a directory, a fifo
	// or a device is never opened for writing.
	if err := notRegular(st, d.child(base), shown, r.method); err != nil {
		return fail(err)
	}
	const flags = unix.O_WRONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC
	fd := -1
	for try := 0; ; try++ {
		if st == nil {
			fd, err = unix.Openat(d.fd, base, flags|unix.O_CREAT|unix.O_EXCL, 0o666)
			created = err == nil
		} else {
			fd, err = unix.Openat(d.fd, base, flags, 0)
		}
		if try == openRetries {
			break
		}
		if st == nil && err == unix.EEXIST {
			st = &unix.Stat_t{Mode: unix.S_IFREG} // appeared meanwhile: open what is there
			continue
		}
		if st != nil && err == unix.ENOENT {
			st = nil // vanished meanwhile: create it
			continue
		}
		break
	}
	if err != nil {
		return fail(codexError(r.method, shown, err))
	}
	f = os.NewFile(uintptr(fd), d.child(base))
	var now unix.Stat_t
	if err := unix.Fstat(fd, &now); err != nil {
		f.Close()
		return fail(codexError(r.method, shown, err))
	}
	if err := notRegular(&now, d.child(base), shown, r.method); err != nil {
		f.Close() // swapped for something else between the look and the open
		return fail(err)
	}
	return f, d, base, created, nil
}

// notRegular refuses what st describes unless it is a regular file or
// nothing: a directory as the open would (EISDIR), anything else in
// codex's words, naming the native path.
func notRegular(st *unix.Stat_t, native, shown, method string) error {
	switch {
	case st == nil || st.Mode&unix.S_IFMT == unix.S_IFREG:
		return nil
	case st.Mode&unix.S_IFMT == unix.S_IFDIR:
		return codexError(method, shown, syscall.EISDIR)
	}
	return protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidRequest, "path `%s` is not a file", native)
}

// streamFailed maps an error of finding where p lands: a missing path the
// policy would refuse anyway is refused (the policy does not tell what
// exists where it denies), anything else as codex maps it.
func (r *fsReq) streamFailed(shown, p string, err error) error {
	if errors.Is(err, os.ErrNotExist) {
		if derr := r.check(shown, p, true); derr != nil {
			return derr
		}
	}
	return codexError(r.method, shown, err)
}

// writeReplaceBlock serves fs/writeBlock for a replace handle h, or for
// an id not open (h nil, lookupErr its error): codex checks the block
// before it looks for the handle, so a bad block is reported as such
// whatever the id.
func (s *Session) writeReplaceBlock(p protocol.FsWriteBlockParams, h *fsHandle, lookupErr error) (any, error) {
	n := uint64(len(p.Chunk))
	if n == 0 || n > protocol.MaxWriteBlockBytes {
		kind := protocol.KindInvalid
		if n > 0 {
			kind = protocol.KindTooLarge
		}
		return nil, protocol.KindErrorf(kind, protocol.CodeInvalidRequest, "%s", protocol.ErrWriteBlockLength)
	}
	// Native offsets are signed: the block must end at or below 2^63-1.
	if p.Offset > math.MaxInt64-n {
		return nil, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidRequest, "%s", protocol.ErrWriteBlockRange)
	}
	if h == nil {
		return nil, unknownHandle(protocol.MethodFsWriteBlock, p.HandleID, lookupErr)
	}
	h.mu.Lock()
	_, err := fsio.WriteAt(h.f, p.Chunk, int64(p.Offset))
	h.mu.Unlock()
	if errors.Is(err, os.ErrClosed) {
		return nil, unknownHandle(protocol.MethodFsWriteBlock, p.HandleID, nil) // closed meanwhile
	}
	if err != nil {
		return nil, codexError(protocol.MethodFsWriteBlock, "handle "+p.HandleID, err)
	}
	return protocol.Empty{}, nil
}

// readReplaceHandle answers fs/readBlock on a replace handle as codex
// does: the length is checked first; then the read fails (the descriptor
// is write-only) and, as after any failed read, the handle is closed.
func (s *Session) readReplaceHandle(p protocol.FsReadBlockParams, h *fsHandle) error {
	if p.Len < 1 || p.Len > maxReadBlockBytes {
		return protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidRequest, "file read block length must be between 1 and %d", maxReadBlockBytes)
	}
	s.dropHandle(p.HandleID, h)
	h.mu.Lock()
	h.f.Close()
	h.mu.Unlock()
	return protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInternal, "%s: handle %s is open for writing, not reading (%s); the handle is closed", protocol.MethodFsReadBlock, p.HandleID, muslErrorText(syscall.EBADF))
}

func unknownHandle(method, id string, err error) error {
	if err != nil {
		return err
	}
	return protocol.KindErrorf(protocol.KindNotFound, protocol.CodeNotFound, "%s: unknown handle %s", method, id)
}

// codexError maps an I/O error to codex's code for it (its io::ErrorKind
// mapping: not found -32004; invalid input and permission denied -32600;
// anything else -32603) and a message naming shown and ending in codex's
// own text for the error ("Is a directory (os error 21)").
func codexError(method, shown string, err error) error {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return pe
	}
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return protocol.KindErrorf(errkind.Of(err, protocol.KindInternal), protocol.CodeInternal, "%s: %s: %v", method, shown, err)
	}
	code := protocol.CodeInternal
	switch errno {
	case unix.ENOENT:
		code = protocol.CodeNotFound
	case unix.EINVAL, unix.EACCES, unix.EPERM:
		code = protocol.CodeInvalidRequest
	}
	return protocol.KindErrorf(errkind.Of(errno, protocol.KindInternal), code, "%s: %s: %s", method, shown, muslErrorText(errno))
}
