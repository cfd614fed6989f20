//go:build linux || darwin || freebsd

package remotefs

import (
	"encoding/json"
	"errors"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/outpost-exec/outpost/internal/digest"
	"github.com/outpost-exec/outpost/internal/errkind"
	"github.com/outpost-exec/outpost/internal/fsio"
	"github.com/outpost-exec/outpost/pathmap"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/sandbox"
)

const (
	// maxBlockBytes bounds one fs/readBlock or fs/writeBlock.
	maxBlockBytes = 4 << 20
	// maxDirEntries bounds one fs/readDirectory.
	maxDirEntries = 100_000
)

// Session is one executor session's file system: the fs/* methods and the
// table of handles fs/open and fs/create add to it, which End closes. Its
// methods are safe for concurrent use; each takes the method's params and
// returns its protocol result (or a *protocol.Error).
type Session struct {
	cfg Config
	id  string // the executor session's, for messages

	mu      sync.Mutex
	handles map[string]*fsHandle // at most cfg.MaxFileHandles
	ended   bool
}

// NewSession returns the file system of the executor session sessionID.
func NewSession(cfg Config, sessionID string) *Session {
	return &Session{cfg: cfg, id: sessionID}
}

// fsHandle is an open file of a session.
type fsHandle struct {
	mu    sync.Mutex // one block at a time, so blocks mostly pass in order
	f     *os.File
	write bool
	// replace: an fs/open "replace" handle (stream_write.go), written in
	// place; write stays false, as there is nothing to commit or remove.
	replace bool
	// sum hashes the blocks that passed in order from offset 0; hashed is
	// how far. A transfer that went in order gets its digest from fs/close
	// without a second pass over the file.
	sum    hash.Hash
	alg    string // sum's algorithm, as the client named it
	hashed uint64
	early  []byteRange // ranges past hashed, sorted, waiting for the gap to fill
	broken bool        // no running digest for this handle
	// For writes: the verified parent directory, the temporary name the
	// blocks go to and the final name.
	dir       *fsDir
	tmp, base string
}

// The running digest keeps no data: a block that passes ahead of the
// digest is remembered as a range, and once the gap before it fills the
// digest reads it back from the file (from the page cache, just written or
// read). Bounds: maxEarlyRanges ranges, and a block may start at most
// maxEarlyGap past the digest; beyond either the handle has no running
// digest (fs/hash still works), so a client cannot make the executor hold
// or re-read much for it.
const (
	maxEarlyRanges = 32
	maxEarlyGap    = 16 << 20
)

type byteRange struct{ off, end uint64 }

// account feeds the block [off, off+len(b)) into the running digest, under
// h.mu.
func (h *fsHandle) account(off uint64, b []byte) {
	end := off + uint64(len(b))
	switch {
	case h.broken || len(b) == 0:
		return
	case end <= h.hashed && !h.write:
		return // a read of what was already hashed: no news
	case off < h.hashed, off > h.hashed+maxEarlyGap:
		h.broken, h.early = true, nil // a rewrite of hashed bytes, or too far ahead
		return
	case off == h.hashed:
		h.sum.Write(b)
		h.hashed = end
	default:
		h.early = append(h.early, byteRange{off, end})
		sort.Slice(h.early, func(i, j int) bool { return h.early[i].off < h.early[j].off })
		if len(h.early) > maxEarlyRanges {
			h.broken, h.early = true, nil
			return
		}
	}
	// Catch up over ranges that now join the digest.
	for len(h.early) > 0 && h.early[0].off <= h.hashed {
		r := h.early[0]
		h.early = h.early[1:]
		if r.end <= h.hashed {
			continue
		}
		if r.off < h.hashed && h.write {
			h.broken, h.early = true, nil // overlapping writes
			return
		}
		if _, err := io.Copy(h.sum, io.NewSectionReader(h.f, int64(h.hashed), int64(r.end-h.hashed))); err != nil {
			h.broken, h.early = true, nil
			return
		}
		h.hashed = r.end
	}
}

// digest is the running digest if the whole file of size passed in order.
func (h *fsHandle) digest(size uint64) *protocol.FsHashResult {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.broken || h.hashed != size || len(h.early) > 0 {
		return nil
	}
	res := digest.Result(h.alg, h.sum, size)
	return &res
}

// commit moves a written file into place.
func (h *fsHandle) commit() error {
	defer h.dir.Close()
	// No fsync: the rename is atomic for every reader, and durability
	// across a power cut is left to the filesystem, as scp and rsync do
	// (an fsync of 1 GiB costs seconds on this machine's disk).
	if err := h.f.Close(); err != nil {
		unix.Unlinkat(h.dir.fd, h.tmp, 0)
		return err
	}
	if err := unix.Renameat(h.dir.fd, h.tmp, h.dir.fd, h.base); err != nil {
		unix.Unlinkat(h.dir.fd, h.tmp, 0)
		return err
	}
	return nil
}

// discard drops a handle: a read is closed, an unfinished write removed.
func (h *fsHandle) discard() {
	h.f.Close()
	if h.write {
		unix.Unlinkat(h.dir.fd, h.tmp, 0)
		h.dir.Close()
	}
}

// fsReq is one fs call: its method (for messages) and its policy (nil:
// unrestricted, as the executor's user).
type fsReq struct {
	s      *Session
	method string
	pol    *sandbox.Resolved
	// noFollow: the call's path is resolved without following any
	// symlink, and a symlink at its final name is replaced, not written
	// through (the noFollow of fs/create, fs/createDirectory and
	// fs/createSymlink).
	noFollow bool
}

func (s *Session) fsRequest(method string, rawPolicy any) (*fsReq, error) {
	r := &fsReq{s: s, method: method}
	if rawPolicy == nil {
		return r, nil
	}
	data, err := json.Marshal(rawPolicy)
	if err != nil {
		return nil, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "invalid params for %s: sandbox: %v", method, err)
	}
	ctx, err := sandbox.ParseContext(data)
	if err != nil {
		return nil, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "invalid params for %s: %v", method, err)
	}
	pol := ctx.Policy
	var roots []string
	for _, r := range ctx.WorkspaceRoots {
		n, err := s.cfg.Paths.ToExecutor(r)
		if err != nil {
			return nil, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "invalid params for %s: sandbox workspaceRoots: %v", method, err)
		}
		roots = append(roots, n)
	}
	// A policy without a cwd is judged against its own roots: ":cwd" (and
	// ":project_roots") then grant nothing, never the executor's own
	// working directory.
	cwd, err := pathmap.NativeDir(ctx.Cwd, "", s.cfg.Paths.ToExecutor)
	if err != nil {
		return nil, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "invalid params for %s: sandbox cwd: %v", method, err)
	}
	// The executor's own secrets are hidden from fs calls as from
	// commands. Shared sticky temporary roots (/tmp) are not scanned for
	// protected names: an fs call judges every component it touches by
	// name (Allows, and the walks of fstree_linux.go).
	res, err := pol.Resolve(sandbox.Env{Cwd: cwd, ProjectRoots: roots, NoProjectRootFallback: ctx.Codex, Translate: s.cfg.Paths.ToExecutor,
		Hidden: s.cfg.Hidden, SharedTempUnscanned: true})
	if err != nil {
		return nil, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "invalid params for %s: %v", method, err)
	}
	r.pol = &res
	return r, nil
}

// fsBegin starts a one-path fs call: its policy and its native path.
func (s *Session) fsBegin(method string, policy any, path string) (*fsReq, string, error) {
	r, err := s.fsRequest(method, policy)
	if err != nil {
		return nil, "", err
	}
	n, err := r.native("path", path)
	if err != nil {
		return nil, "", err
	}
	return r, n, nil
}

// native turns a request path into a clean absolute path on this machine.
func (r *fsReq) native(field, p string) (string, error) {
	if p == "" {
		return "", protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "invalid params for %s: %s is required", r.method, field)
	}
	n, err := r.s.cfg.Paths.ToExecutor(p)
	if err != nil {
		return "", protocol.KindErrorf(errkind.Of(err, protocol.KindInvalid), protocol.CodeInvalidRequest, "%s: %s %q: %v", r.method, field, p, err)
	}
	return n, nil
}

// realPath resolves the symlinks of p's longest existing prefix and
// appends the rest: where an operation on p would land now. It only
// pre-judges (a refusal before anything is opened); what is done is
// judged by descriptor.
func realPath(p string) string {
	rest := ""
	for cur := p; ; {
		if real, err := filepath.EvalSymlinks(cur); err == nil {
			return filepath.Join(real, rest)
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return p
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = parent
	}
}

func (r *fsReq) denied(shown string, write bool) error {
	need := "read"
	if write {
		need = "write"
	}
	return protocol.KindErrorf(protocol.KindPermission, protocol.CodeInvalidRequest, "%s: %s: access denied by the sandbox policy (needs %s access)", r.method, shown, need)
}

// check judges the path string p as written and where it leads now: a
// pre-judgement only, for a path that cannot be opened.
func (r *fsReq) check(shown, p string, write bool) error {
	if r.pol == nil {
		return nil
	}
	if !r.pol.Allows(p, write) || !r.pol.Allows(realPath(p), write) {
		return r.denied(shown, write)
	}
	return nil
}

// fsError maps an I/O error as codex does, naming the path.
func (r *fsReq) fsError(shown string, err error) error {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return pe
	}
	var perr *fs.PathError
	if errors.As(err, &perr) {
		err = perr.Err
	}
	var lerr *os.LinkError
	if errors.As(err, &lerr) {
		err = lerr.Err
	}
	code := protocol.CodeInternal
	switch {
	case errors.Is(err, fs.ErrNotExist):
		code = protocol.CodeNotFound
	case errors.Is(err, fs.ErrPermission), errors.Is(err, fs.ErrExist), errors.Is(err, syscall.EINVAL),
		errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.ENOTEMPTY),
		errors.Is(err, syscall.ELOOP), errors.Is(err, syscall.EROFS), errors.Is(err, syscall.ENAMETOOLONG):
		code = protocol.CodeInvalidRequest
	}
	return protocol.KindErrorf(errkind.Of(err, protocol.KindInternal), code, "%s: %s: %v", r.method, shown, err)
}

func (r *fsReq) fsErrorOrNil(shown string, err error) error {
	if err == nil {
		return nil
	}
	return r.fsError(shown, err)
}

// failed maps an error of resolving p: a path that is missing but would be
// refused anyway is refused (as codex judges before it looks), so a
// policy does not tell what exists where it denies.
func (r *fsReq) failed(shown, p string, write bool, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		if derr := r.check(shown, p, write); derr != nil {
			return derr
		}
	}
	return r.fsError(shown, err)
}

func (r *fsReq) tooLarge(shown string, limit int64, what, instead string) error {
	return protocol.KindErrorf(protocol.KindTooLarge, protocol.CodeInvalidRequest, "%s: %s: file is too large to %s: limit is %d bytes; use %s", r.method, shown, what, limit, instead)
}

// openRead opens the regular file p leads to for reading: judged by what
// it is before it is opened for I/O, then reopened through its
// descriptor.
func (r *fsReq) openRead(shown, p string) (*os.File, os.FileInfo, error) {
	o, err := r.openObject(shown, p)
	if err != nil {
		return nil, nil, r.failed(shown, p, false, err)
	}
	defer o.Close()
	return r.openReadObject(shown, o)
}

func (r *fsReq) openReadObject(shown string, o *fsObject) (*os.File, os.FileInfo, error) {
	if o.isDir() {
		return nil, nil, r.fsError(shown, syscall.EISDIR)
	}
	if !o.isRegular() {
		return nil, nil, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidRequest, "%s: %s: not a regular file", r.method, shown)
	}
	f, err := reopen(o.fd, unix.O_RDONLY|unix.O_NONBLOCK, o.path)
	if err != nil {
		return nil, nil, r.fsError(shown, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, r.fsError(shown, err)
	}
	return f, fi, nil
}

// createTemp opens a temporary file beside p (or beside what p links to)
// for a write that fs/close or commit moves into place.
func (r *fsReq) createTemp(shown, p string, mode *uint32) (*fsHandle, error) {
	d, base, st, err := r.writePlace(shown, p)
	if err != nil {
		return nil, r.failed(shown, p, true, err)
	}
	if !r.allows(d.child(base), true) {
		d.Close()
		return nil, r.denied(shown, true)
	}
	perm := uint32(0o644)
	if st != nil {
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			d.Close()
			return nil, r.fsError(shown, syscall.EISDIR)
		}
		perm = uint32(st.Mode) & 0o777
	}
	if mode != nil {
		perm = *mode & 0o777
	}
	f, tmp, err := createTempIn(d, base, perm)
	if err != nil {
		d.Close()
		return nil, r.fsError(shown, err)
	}
	return &fsHandle{f: f, write: true, dir: d, tmp: tmp, base: base}, nil
}

// writePlace finds where a write to p lands: p's parent directory, opened,
// and p's final name — or, when that is a symlink, where it leads (a
// write goes through a link, as a shell's redirection does). st describes
// what is there now (nil: nothing).
func (r *fsReq) writePlace(shown, p string) (*fsDir, string, *unix.Stat_t, error) {
	for hop := 0; ; hop++ {
		d, base, err := r.parent(shown, p)
		if err != nil {
			return nil, "", nil, err
		}
		var st unix.Stat_t
		err = unix.Fstatat(d.fd, base, &st, unix.AT_SYMLINK_NOFOLLOW)
		switch {
		case err == unix.ENOENT:
			return d, base, nil, nil
		case err != nil:
			d.Close()
			return nil, "", nil, err
		case st.Mode&unix.S_IFMT != unix.S_IFLNK:
			return d, base, &st, nil
		case r.noFollow:
			return d, base, nil, nil // the rename replaces the link itself
		}
		link, err := readlinkAt(d.fd, base)
		d.Close()
		if err != nil {
			return nil, "", nil, err
		}
		if hop >= maxLinkHops {
			return nil, "", nil, unix.ELOOP
		}
		if !filepath.IsAbs(link) {
			link = filepath.Join(d.path, link) // relative to the link's real directory
		}
		p = filepath.Clean(link)
	}
}

// --- methods ------------------------------------------------------------

func (s *Session) ReadFile(p protocol.FsReadFileParams) (any, error) {
	r, n, err := s.fsBegin(protocol.MethodFsReadFile, p.Sandbox, p.Path)
	if err != nil {
		return nil, err
	}
	f, fi, err := r.openRead(p.Path, n)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	limit := s.cfg.MaxFileBytes
	if p.MaxBytes != nil && int64(*p.MaxBytes) < limit && int64(*p.MaxBytes) >= 0 {
		limit = int64(*p.MaxBytes)
	}
	if fi.Size() > limit {
		return nil, r.tooLarge(p.Path, limit, "read", "fs/open and fs/readBlock")
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, r.fsError(p.Path, err)
	}
	if int64(len(data)) > limit { // it grew meanwhile
		return nil, r.tooLarge(p.Path, limit, "read", "fs/open and fs/readBlock")
	}
	return protocol.FsReadFileResult{Data: data}, nil
}

func (s *Session) WriteFile(p protocol.FsWriteFileParams) (any, error) {
	r, n, err := s.fsBegin(protocol.MethodFsWriteFile, p.Sandbox, p.Path)
	if err != nil {
		return nil, err
	}
	if int64(len(p.Data)) > s.cfg.MaxFileBytes {
		return nil, r.tooLarge(p.Path, s.cfg.MaxFileBytes, "write in one call", "fs/create and fs/writeBlock")
	}
	h, err := r.createTemp(p.Path, n, p.Mode)
	if err != nil {
		return nil, err
	}
	if _, err := fsio.Write(h.f, p.Data); err != nil {
		h.discard()
		return nil, r.fsError(p.Path, err)
	}
	if err := h.commit(); err != nil {
		return nil, r.fsError(p.Path, err)
	}
	return protocol.Empty{}, nil
}

func (s *Session) CreateDirectory(p protocol.FsCreateDirectoryParams) (any, error) {
	r, n, err := s.fsBegin(protocol.MethodFsCreateDirectory, p.Sandbox, p.Path)
	if err != nil {
		return nil, err
	}
	r.noFollow = p.NoFollow
	recursive := p.Recursive == nil || *p.Recursive
	switch {
	case p.Mode != nil:
		err = r.mkdirMode(p.Path, n, *p.Mode&0o7777, recursive)
	case recursive:
		var d *fsDir
		if d, err = r.mkdirAll(p.Path, n, 0o755); err == nil {
			d.Close()
		}
	default:
		err = r.mkdir(p.Path, n, 0o755)
	}
	if err != nil {
		return nil, r.failed(p.Path, n, true, err)
	}
	return protocol.Empty{}, nil
}

func (s *Session) GetMetadata(p protocol.FsPathParams) (any, error) {
	r, n, err := s.fsBegin(protocol.MethodFsGetMetadata, p.Sandbox, p.Path)
	if err != nil {
		return nil, err
	}
	d, base, err := r.parent(p.Path, n)
	if err != nil {
		return nil, r.failed(p.Path, n, false, err)
	}
	defer d.Close()
	if !r.allows(d.child(base), false) {
		return nil, r.denied(p.Path, false)
	}
	md, err := statAt(d.fd, base)
	if err != nil {
		return nil, r.failed(p.Path, n, false, err)
	}
	if md.IsSymlink {
		// Read by the same descriptor and name as the stat: the text
		// lets a copy keep the link as a link.
		if md.SymlinkTarget, err = readlinkAt(d.fd, base); err != nil {
			return nil, r.failed(p.Path, n, false, err)
		}
	}
	return md, nil
}

func (s *Session) Canonicalize(p protocol.FsPathParams) (any, error) {
	r, n, err := s.fsBegin(protocol.MethodFsCanonicalize, p.Sandbox, p.Path)
	if err != nil {
		return nil, err
	}
	o, err := r.openObject(p.Path, n)
	if err != nil {
		return nil, r.failed(p.Path, n, false, err)
	}
	o.Close()
	out := s.cfg.Paths.ToClient(o.path)
	if strings.HasPrefix(p.Path, "file:") && strings.HasPrefix(out, "/") {
		// Answered in the caller's spelling: a URI for a URI, as codex's
		// server answers (codex 0.171 takes no plain path back).
		out = pathmap.URI(out)
	}
	return protocol.FsCanonicalizeResult{Path: out}, nil
}

func (s *Session) ReadDirectory(p protocol.FsPathParams) (any, error) {
	r, n, err := s.fsBegin(protocol.MethodFsReadDirectory, p.Sandbox, p.Path)
	if err != nil {
		return nil, err
	}
	o, err := r.openObject(p.Path, n)
	if err != nil {
		return nil, r.failed(p.Path, n, false, err)
	}
	defer o.Close()
	if !o.isDir() {
		return nil, r.fsError(p.Path, syscall.ENOTDIR)
	}
	d, err := reopen(o.fd, unix.O_RDONLY|unix.O_DIRECTORY, o.path)
	if err != nil {
		return nil, r.fsError(p.Path, err)
	}
	defer d.Close()
	ents, err := d.ReadDir(maxDirEntries + 1)
	if err != nil && err != io.EOF {
		return nil, r.fsError(p.Path, err)
	}
	if len(ents) > maxDirEntries {
		return nil, protocol.KindErrorf(protocol.KindTooLarge, protocol.CodeInvalidRequest, "%s: %s: more than %d entries", r.method, p.Path, maxDirEntries)
	}
	res := protocol.FsReadDirectoryResult{Entries: make([]protocol.FsDirEntry, 0, len(ents))}
	for _, e := range ents {
		t := e.Type()
		res.Entries = append(res.Entries, protocol.FsDirEntry{FileName: e.Name(), IsDirectory: t.IsDir(), IsFile: t.IsRegular(), IsSymlink: t&fs.ModeSymlink != 0})
	}
	sort.Slice(res.Entries, func(i, j int) bool { return res.Entries[i].FileName < res.Entries[j].FileName })
	return res, nil
}

func (s *Session) Remove(p protocol.FsRemoveParams) (any, error) {
	r, n, err := s.fsBegin(protocol.MethodFsRemove, p.Sandbox, p.Path)
	if err != nil {
		return nil, err
	}
	recursive, force := p.Recursive == nil || *p.Recursive, p.Force == nil || *p.Force
	if n == "/" {
		return nil, protocol.KindErrorf(protocol.KindPermission, protocol.CodeInvalidRequest, "%s: refusing to remove /", r.method)
	}
	// The path itself goes, not what a link at it leads to: its parent is
	// resolved and judged, the rest happens relative to it.
	d, base, err := r.parent(p.Path, n)
	if errors.Is(err, fs.ErrNotExist) && force {
		if err := r.check(p.Path, n, true); err != nil {
			return nil, err
		}
		return protocol.Empty{}, nil
	}
	if err != nil {
		return nil, r.failed(p.Path, n, true, err)
	}
	defer d.Close()
	if err := r.removeIn(p.Path, d, base, recursive, force); err != nil {
		return nil, r.fsError(p.Path, err)
	}
	return protocol.Empty{}, nil
}

func (s *Session) Copy(p protocol.FsCopyParams) (any, error) {
	r, err := s.fsRequest(protocol.MethodFsCopy, p.Sandbox)
	if err != nil {
		return nil, err
	}
	src, err := r.native("sourcePath", p.SourcePath)
	if err != nil {
		return nil, err
	}
	dst, err := r.native("destinationPath", p.DestinationPath)
	if err != nil {
		return nil, err
	}
	o, err := r.openObject(p.SourcePath, src)
	if err != nil {
		return nil, r.failed(p.SourcePath, src, false, err)
	}
	defer o.Close()
	r.noFollow = p.NoFollow // for the destination: the source is open
	if o.isDir() {
		if !p.Recursive {
			return nil, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidRequest, "%s: %s: is a directory (set recursive)", r.method, p.SourcePath)
		}
		if err := r.copyTree(p.SourcePath, p.DestinationPath, o, dst); err != nil {
			return nil, r.fsError(p.DestinationPath, err)
		}
		return protocol.Empty{}, nil
	}
	in, _, err := r.openReadObject(p.SourcePath, o)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	mode := uint32(o.st.Mode) & 0o777
	h, err := r.createTemp(p.DestinationPath, dst, &mode)
	if err != nil {
		return nil, err
	}
	if _, err := io.Copy(h.f, in); err != nil {
		h.discard()
		return nil, r.fsError(p.SourcePath, err)
	}
	if err := h.commit(); err != nil {
		return nil, r.fsError(p.DestinationPath, err)
	}
	return protocol.Empty{}, nil
}

// CreateSymlink makes the symlink p.Path holding p.Target as given. It is
// made under a temporary name and renamed into place, so an entry already
// at the path (a file or another link, never a directory) is replaced
// whole and nothing is written through it.
func (s *Session) CreateSymlink(p protocol.FsCreateSymlinkParams) (any, error) {
	r, n, err := s.fsBegin(protocol.MethodFsCreateSymlink, p.Sandbox, p.Path)
	if err != nil {
		return nil, err
	}
	if p.Target == "" || strings.IndexByte(p.Target, 0) >= 0 {
		return nil, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "invalid params for %s: target must be non-empty and hold no NUL byte", r.method)
	}
	r.noFollow = p.NoFollow
	d, base, err := r.parent(p.Path, n)
	if err != nil {
		return nil, r.failed(p.Path, n, true, err)
	}
	defer d.Close()
	// The link's own place is judged, not where it leads: what is later
	// opened through it is judged by where it really is.
	if base == "." || !r.allows(d.child(base), true) || !r.linkPlaceWritable(d, base) {
		return nil, r.denied(p.Path, true)
	}
	tmp := tempName(base)
	if err := unix.Symlinkat(p.Target, d.fd, tmp); err != nil {
		return nil, r.fsError(p.Path, err)
	}
	if err := unix.Renameat(d.fd, tmp, d.fd, base); err != nil {
		unix.Unlinkat(d.fd, tmp, 0)
		return nil, r.fsError(p.Path, err)
	}
	return protocol.Empty{}, nil
}

func within(root, p string) bool {
	return p == root || strings.HasPrefix(p, strings.TrimSuffix(root, "/")+"/")
}

// newDigest is the hash for a digest algorithm a client named.
func newDigest(method, alg string) (hash.Hash, error) {
	h, ok := digest.New(alg)
	if !ok {
		return nil, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "invalid params for %s: unknown digest %q (known: %s, %s)", method, alg, protocol.DigestSHA256, protocol.DigestXXH3)
	}
	return h, nil
}

func (s *Session) Hash(p protocol.FsHashParams) (any, error) {
	h, err := newDigest(protocol.MethodFsHash, p.Digest)
	if err != nil {
		return nil, err
	}
	r, n, err := s.fsBegin(protocol.MethodFsHash, p.Sandbox, p.Path)
	if err != nil {
		return nil, err
	}
	f, _, err := r.openRead(p.Path, n)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size, err := io.Copy(h, f)
	if err != nil {
		return nil, r.fsError(p.Path, err)
	}
	return digest.Result(p.Digest, h, uint64(size)), nil
}

// --- handles ----------------------------------------------------------------

func (s *Session) addHandle(method, id string, h *fsHandle) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.ended:
		return protocol.KindErrorf(protocol.KindUnknownSession, protocol.CodeInvalidRequest, "session %s has ended", s.id)
	case s.handles[id] != nil:
		return protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidRequest, "%s: handle %s is already open", method, id)
	case len(s.handles) >= s.cfg.MaxFileHandles:
		return protocol.KindErrorf(protocol.KindExhausted, protocol.CodeInvalidRequest, "%s: too many open file handles in this session (limit %d)", method, s.cfg.MaxFileHandles)
	}
	if s.handles == nil {
		s.handles = map[string]*fsHandle{}
	}
	s.handles[id] = h
	return nil
}

// validHandleID checks a client's handle id as codex 0.171 does: at most
// MaxHandleIDBytes, the empty id included.
func validHandleID(method, id string) error {
	if len(id) > protocol.MaxHandleIDBytes {
		return protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidRequest, "%s", protocol.ErrHandleIDTooLong)
	}
	return nil
}

func (s *Session) handle(method, id string) (*fsHandle, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.handles[id]
	if h == nil {
		return nil, protocol.KindErrorf(protocol.KindNotFound, protocol.CodeNotFound, "%s: unknown handle %s", method, id) // codex: -32004
	}
	return h, nil
}

func (s *Session) Open(p protocol.FsOpenParams) (any, error) {
	if err := validHandleID(protocol.MethodFsOpen, p.HandleID); err != nil {
		return nil, err
	}
	if p.Mode != "" && p.Mode != protocol.FsOpenRead {
		return s.openReplace(p) // stream_write.go
	}
	sum, err := newDigest(protocol.MethodFsOpen, p.Digest)
	if err != nil {
		return nil, err
	}
	r, n, err := s.fsBegin(protocol.MethodFsOpen, p.Sandbox, p.Path)
	if err != nil {
		return nil, err
	}
	f, _, err := r.openRead(p.Path, n)
	if err != nil {
		return nil, err
	}
	if err := s.addHandle(r.method, p.HandleID, &fsHandle{f: f, sum: sum, alg: p.Digest}); err != nil {
		f.Close()
		return nil, err
	}
	return protocol.FsHandleResult{HandleID: p.HandleID, Digest: p.Digest}, nil
}

func (s *Session) Create(p protocol.FsCreateParams) (any, error) {
	if err := validHandleID(protocol.MethodFsCreate, p.HandleID); err != nil {
		return nil, err
	}
	sum, err := newDigest(protocol.MethodFsCreate, p.Digest)
	if err != nil {
		return nil, err
	}
	r, n, err := s.fsBegin(protocol.MethodFsCreate, p.Sandbox, p.Path)
	if err != nil {
		return nil, err
	}
	r.noFollow = p.NoFollow
	h, err := r.createTemp(p.Path, n, p.Mode)
	if err != nil {
		return nil, err
	}
	h.sum, h.alg = sum, p.Digest
	if err := s.addHandle(r.method, p.HandleID, h); err != nil {
		h.discard()
		return nil, err
	}
	return protocol.FsHandleResult{HandleID: p.HandleID, Digest: p.Digest}, nil
}

func (s *Session) ReadBlock(p protocol.FsReadBlockParams) (any, error) {
	h, err := s.handle(protocol.MethodFsReadBlock, p.HandleID)
	if err != nil {
		return nil, err
	}
	if h.replace {
		return nil, s.readReplaceHandle(p, h) // stream_write.go
	}
	if h.write {
		return nil, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidRequest, "%s: handle %s was opened for writing", protocol.MethodFsReadBlock, p.HandleID)
	}
	n := min(p.Len, maxBlockBytes)
	if p.Offset > 1<<62 {
		return nil, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "invalid params for %s: offset out of range", protocol.MethodFsReadBlock)
	}
	var buf []byte
	if n == pooledBlockBytes {
		buf = *blockPool.Get().(*[]byte)
	} else {
		buf = make([]byte, n)
	}
	h.mu.Lock()
	got, err := h.f.ReadAt(buf, int64(p.Offset))
	h.account(p.Offset, buf[:got])
	h.mu.Unlock()
	if err != nil && err != io.EOF {
		return nil, protocol.KindErrorf(errkind.Of(err, protocol.KindInternal), protocol.CodeInternal, "%s: handle %s: %v", protocol.MethodFsReadBlock, p.HandleID, err)
	}
	return protocol.FsReadBlockResult{Chunk: buf[:got], EOF: err == io.EOF || n == 0}, nil
}

// fs/readBlock buffers of the size clients ask for are pooled: a fresh
// 1 MiB per block is memory the runtime zeroes and, handed back to the
// kernel between GCs, faults in again (on a VM that reports free memory
// to its host, from the host). The pool holds what the GC lets it: at
// most the blocks in flight between two collections.
const pooledBlockBytes = 1 << 20

var blockPool = sync.Pool{New: func() any { b := make([]byte, pooledBlockBytes); return &b }}

// ReleaseBlock gives the buffer of an fs/readBlock result back once the
// result has been written (and is not used again); any other result is
// left alone.
func ReleaseBlock(result any) {
	if r, ok := result.(protocol.FsReadBlockResult); ok && cap(r.Chunk) == pooledBlockBytes {
		b := r.Chunk[:pooledBlockBytes]
		blockPool.Put(&b)
	}
}

func (s *Session) WriteBlock(p protocol.FsWriteBlockParams) (any, error) {
	h, err := s.handle(protocol.MethodFsWriteBlock, p.HandleID)
	if h == nil || h.replace {
		return s.writeReplaceBlock(p, h, err) // stream_write.go: codex's checks come first
	}
	if !h.write {
		// codex: a read handle's descriptor refuses the write (EBADF).
		return nil, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInternal, "%s: handle %s was opened for reading", protocol.MethodFsWriteBlock, p.HandleID)
	}
	if len(p.Chunk) > maxBlockBytes || p.Offset > 1<<62 {
		return nil, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "invalid params for %s: a block is at most %d bytes at an offset below 2^62", protocol.MethodFsWriteBlock, maxBlockBytes)
	}
	h.mu.Lock()
	_, err = fsio.WriteAt(h.f, p.Chunk, int64(p.Offset))
	if err == nil {
		h.account(p.Offset, p.Chunk)
	}
	h.mu.Unlock()
	if err != nil {
		return nil, protocol.KindErrorf(errkind.Of(err, protocol.KindInternal), protocol.CodeInternal, "%s: handle %s: %v", protocol.MethodFsWriteBlock, p.HandleID, err)
	}
	return protocol.Empty{}, nil
}

func (s *Session) Close(p protocol.FsCloseParams) (any, error) {
	s.mu.Lock()
	h := s.handles[p.HandleID]
	delete(s.handles, p.HandleID)
	s.mu.Unlock()
	if h == nil {
		return nil, protocol.KindErrorf(protocol.KindNotFound, protocol.CodeNotFound, "%s: unknown handle %s", protocol.MethodFsClose, p.HandleID)
	}
	var res protocol.FsCloseResult
	if fi, err := h.f.Stat(); err == nil && !p.Discard {
		res.Digest = h.digest(uint64(fi.Size()))
	}
	if !h.write || p.Discard {
		h.discard()
		return res, nil
	}
	if err := h.commit(); err != nil {
		return nil, protocol.KindErrorf(errkind.Of(err, protocol.KindInternal), protocol.CodeInternal, "%s: handle %s: %v", protocol.MethodFsClose, p.HandleID, err)
	}
	return res, nil
}

// End drops every handle of an ending session (an unfinished write is
// removed) and refuses new ones.
func (s *Session) End() {
	s.mu.Lock()
	hs := s.handles
	s.handles = nil
	s.ended = true
	s.mu.Unlock()
	for _, h := range hs {
		h.discard()
	}
}
