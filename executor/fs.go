package executor

// The fs/* methods. Every path goes through pathmap (file: URIs, prefix
// mappings) and, when the request carries a sandbox policy, is judged by
// it twice: as written and with its symlinks resolved, so a link cannot
// lead out of what the policy allows. Files that are opened are judged a
// third time by what was actually opened (/proc/self/fd), which closes the
// race of a path swapped for a symlink between check and open. Writes go
// to a temporary file created with O_EXCL|O_NOFOLLOW in the verified parent
// directory and renamed into place through that directory's descriptor.
//
// Bounds: whole-file reads and writes Config.MaxFileBytes (64 MiB); blocks
// maxBlockBytes; open handles Config.MaxFileHandles per session, closed
// (and unfinished writes discarded) when the session ends; directory
// listings maxDirEntries.

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
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

	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/sandbox"
)

const (
	// maxBlockBytes bounds one fs/readBlock or fs/writeBlock.
	maxBlockBytes = 4 << 20
	// maxDirEntries bounds one fs/readDirectory.
	maxDirEntries = 100_000
)

// fsHandle is an open file of a session.
type fsHandle struct {
	mu    sync.Mutex // one block at a time, so blocks mostly pass in order
	f     *os.File
	write bool
	// sum hashes the blocks that passed in order from offset 0; hashed is
	// how far. A transfer that went in order gets its digest from fs/close
	// without a second pass over the file.
	sum    hash.Hash
	hashed uint64
	early  []byteRange // ranges past hashed, sorted, waiting for the gap to fill
	broken bool        // no running digest for this handle
	// For writes: the verified parent directory, the temporary name the
	// blocks go to and the final name.
	dir       *os.File
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
	return &protocol.FsHashResult{Sha256: hex.EncodeToString(h.sum.Sum(nil)), Size: size}
}

// commit moves a written file into place.
func (h *fsHandle) commit() error {
	defer h.dir.Close()
	// No fsync: the rename is atomic for every reader, and durability
	// across a power cut is left to the filesystem, as scp and rsync do
	// (an fsync of 1 GiB costs seconds on this machine's disk).
	if err := h.f.Close(); err != nil {
		unix.Unlinkat(int(h.dir.Fd()), h.tmp, 0)
		return err
	}
	if err := unix.Renameat(int(h.dir.Fd()), h.tmp, int(h.dir.Fd()), h.base); err != nil {
		unix.Unlinkat(int(h.dir.Fd()), h.tmp, 0)
		return err
	}
	return nil
}

// discard drops a handle: a read is closed, an unfinished write removed.
func (h *fsHandle) discard() {
	h.f.Close()
	if h.write {
		unix.Unlinkat(int(h.dir.Fd()), h.tmp, 0)
		h.dir.Close()
	}
}

// fsReq is one fs call: its method (for messages) and its policy (nil:
// unrestricted, as the executor's user).
type fsReq struct {
	s      *Session
	method string
	pol    *sandbox.Resolved
}

func (s *Session) fsRequest(method string, rawPolicy any) (*fsReq, error) {
	r := &fsReq{s: s, method: method}
	if rawPolicy == nil {
		return r, nil
	}
	data, err := json.Marshal(rawPolicy)
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeInvalidParams, "invalid params for %s: sandbox: %v", method, err)
	}
	pol, err := sandbox.ParsePolicy(data)
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeInvalidParams, "invalid params for %s: %v", method, err)
	}
	var ctx struct {
		Cwd string `json:"cwd"`
	}
	json.Unmarshal(data, &ctx)
	cwd, err := NativeDir(ctx.Cwd, s.srv.cfg.DefaultCwd, s.srv.translate)
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeInvalidParams, "invalid params for %s: sandbox cwd: %v", method, err)
	}
	res, err := pol.Resolve(sandbox.Env{Cwd: cwd, Translate: s.srv.translate})
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeInvalidParams, "invalid params for %s: %v", method, err)
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
		return "", protocol.Errorf(protocol.CodeInvalidParams, "invalid params for %s: %s is required", r.method, field)
	}
	n, err := r.s.srv.translate(p)
	if err != nil {
		return "", protocol.Errorf(protocol.CodeInvalidRequest, "%s: %s %q: %v", r.method, field, p, err)
	}
	return n, nil
}

// realPath resolves the symlinks of p's longest existing prefix and
// appends the rest: where an operation on p would land.
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
	return protocol.Errorf(protocol.CodeInvalidRequest, "%s: %s: access denied by the sandbox policy (needs %s access)", r.method, shown, need)
}

// check judges p as written and where it leads.
func (r *fsReq) check(shown, p string, write bool) error {
	if r.pol == nil {
		return nil
	}
	if !r.pol.Allows(p, write) || !r.pol.Allows(realPath(p), write) {
		return r.denied(shown, write)
	}
	return nil
}

// checkTree also refuses when anything inside p is less accessible than
// the operation needs (a recursive remove, copy or write of a tree).
func (r *fsReq) checkTree(shown, p string, write bool) error {
	if err := r.check(shown, p, write); err != nil {
		return err
	}
	if r.pol != nil && !r.pol.AllowsTree(realPath(p), write) {
		return r.denied(shown, write)
	}
	return nil
}

// checkOpened judges what a descriptor actually refers to.
func (r *fsReq) checkOpened(shown string, f *os.File, write bool) error {
	if r.pol == nil {
		return nil
	}
	real, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
	if err != nil || !r.pol.Allows(real, write) {
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
	return protocol.Errorf(code, "%s: %s: %v", r.method, shown, err)
}

func (r *fsReq) tooLarge(shown string, limit int64, what, instead string) error {
	return protocol.Errorf(protocol.CodeInvalidRequest, "%s: %s: file is too large to %s: limit is %d bytes; use %s", r.method, shown, what, limit, instead)
}

// openRead opens p for reading after judging it.
func (r *fsReq) openRead(shown, p string) (*os.File, os.FileInfo, error) {
	if err := r.check(shown, p, false); err != nil {
		return nil, nil, err
	}
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, r.fsError(shown, err)
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
		if fi.IsDir() {
			err = syscall.EISDIR
		}
		err = r.fsError(shown, err)
		if !fi.IsDir() {
			err = protocol.Errorf(protocol.CodeInvalidRequest, "%s: %s: not a regular file", r.method, shown)
		}
	}
	if err == nil {
		err = r.checkOpened(shown, f, false)
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

// createTemp opens a temporary file beside p (or beside what p links to)
// for a write that fs/close or commit moves into place.
func (r *fsReq) createTemp(shown, p string, mode *uint32) (*fsHandle, error) {
	target := p
	if fi, err := os.Lstat(p); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			target = real // write where the link leads, judged there
		}
	}
	if err := r.check(shown, p, true); err != nil {
		return nil, err
	}
	if err := r.check(shown, target, true); err != nil {
		return nil, err
	}
	perm := os.FileMode(0o644)
	if fi, err := os.Stat(target); err == nil {
		if fi.IsDir() {
			return nil, r.fsError(shown, syscall.EISDIR)
		}
		perm = fi.Mode().Perm()
	}
	if mode != nil {
		perm = os.FileMode(*mode) & os.ModePerm
	}
	dirPath, base := filepath.Split(target)
	dir, err := os.OpenFile(dirPath, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, r.fsError(shown, err)
	}
	if r.pol != nil {
		real, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", dir.Fd()))
		if err != nil || !r.pol.Allows(filepath.Join(real, base), true) {
			dir.Close()
			return nil, r.denied(shown, true)
		}
	}
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := "." + base + ".outpost-" + hex.EncodeToString(rnd[:])
	if len(tmp) > 255 {
		tmp = ".outpost-" + hex.EncodeToString(rnd[:])
	}
	// Read-write: the running digest may read back blocks that landed
	// ahead of it.
	fd, err := unix.Openat(int(dir.Fd()), tmp, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(perm))
	if err != nil {
		dir.Close()
		return nil, r.fsError(shown, err)
	}
	f := os.NewFile(uintptr(fd), filepath.Join(dirPath, tmp))
	f.Chmod(perm) // past the umask
	return &fsHandle{f: f, write: true, dir: dir, tmp: tmp, base: base, sum: sha256.New()}, nil
}

// --- methods ------------------------------------------------------------

func (s *Session) fsReadFile(p protocol.FsReadFileParams) (any, error) {
	r, n, err := s.fsBegin(protocol.MethodFsReadFile, p.Sandbox, p.Path)
	if err != nil {
		return nil, err
	}
	f, fi, err := r.openRead(p.Path, n)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	limit := s.srv.cfg.MaxFileBytes
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

func (s *Session) fsWriteFile(p protocol.FsWriteFileParams) (any, error) {
	r, n, err := s.fsBegin(protocol.MethodFsWriteFile, p.Sandbox, p.Path)
	if err != nil {
		return nil, err
	}
	if int64(len(p.Data)) > s.srv.cfg.MaxFileBytes {
		return nil, r.tooLarge(p.Path, s.srv.cfg.MaxFileBytes, "write in one call", "fs/create and fs/writeBlock")
	}
	h, err := r.createTemp(p.Path, n, p.Mode)
	if err != nil {
		return nil, err
	}
	if _, err := h.f.Write(p.Data); err != nil {
		h.discard()
		return nil, r.fsError(p.Path, err)
	}
	if err := h.commit(); err != nil {
		return nil, r.fsError(p.Path, err)
	}
	return protocol.Empty{}, nil
}

func (s *Session) fsCreateDirectory(p protocol.FsCreateDirectoryParams) (any, error) {
	r, n, err := s.fsBegin(protocol.MethodFsCreateDirectory, p.Sandbox, p.Path)
	if err != nil {
		return nil, err
	}
	if err := r.check(p.Path, n, true); err != nil {
		return nil, err
	}
	if p.Recursive == nil || *p.Recursive {
		err = os.MkdirAll(n, 0o755)
	} else {
		err = os.Mkdir(n, 0o755)
	}
	if err != nil {
		return nil, r.fsError(p.Path, err)
	}
	if err := r.check(p.Path, n, true); err != nil { // a link swapped in meanwhile
		return nil, err
	}
	return protocol.Empty{}, nil
}

func (s *Session) fsGetMetadata(p protocol.FsPathParams) (any, error) {
	r, n, err := s.fsBegin(protocol.MethodFsGetMetadata, p.Sandbox, p.Path)
	if err != nil {
		return nil, err
	}
	if err := r.check(p.Path, n, false); err != nil {
		return nil, err
	}
	fi, err := os.Lstat(n)
	if err != nil {
		return nil, r.fsError(p.Path, err)
	}
	md := protocol.FsMetadata{
		IsDirectory:  fi.IsDir(),
		IsFile:       fi.Mode().IsRegular(),
		IsSymlink:    fi.Mode()&os.ModeSymlink != 0,
		Size:         uint64(fi.Size()),
		ModifiedAtMs: fi.ModTime().UnixMilli(),
		Mode:         uint32(fi.Mode().Perm()),
	}
	var stx unix.Statx_t
	if unix.Statx(unix.AT_FDCWD, n, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BTIME, &stx) == nil && stx.Mask&unix.STATX_BTIME != 0 {
		md.CreatedAtMs = stx.Btime.Sec*1000 + int64(stx.Btime.Nsec)/1e6
	}
	return md, nil
}

func (s *Session) fsCanonicalize(p protocol.FsPathParams) (any, error) {
	r, n, err := s.fsBegin(protocol.MethodFsCanonicalize, p.Sandbox, p.Path)
	if err != nil {
		return nil, err
	}
	if err := r.check(p.Path, n, false); err != nil {
		return nil, err
	}
	real, err := filepath.EvalSymlinks(n)
	if err != nil {
		return nil, r.fsError(p.Path, err)
	}
	return protocol.FsCanonicalizeResult{Path: s.srv.mapper.ToClient(real)}, nil
}

func (s *Session) fsReadDirectory(p protocol.FsPathParams) (any, error) {
	r, n, err := s.fsBegin(protocol.MethodFsReadDirectory, p.Sandbox, p.Path)
	if err != nil {
		return nil, err
	}
	if err := r.check(p.Path, n, false); err != nil {
		return nil, err
	}
	d, err := os.Open(n)
	if err != nil {
		return nil, r.fsError(p.Path, err)
	}
	defer d.Close()
	if err := r.checkOpened(p.Path, d, false); err != nil {
		return nil, err
	}
	ents, err := d.ReadDir(maxDirEntries + 1)
	if err != nil && err != io.EOF {
		return nil, r.fsError(p.Path, err)
	}
	if len(ents) > maxDirEntries {
		return nil, protocol.Errorf(protocol.CodeInvalidRequest, "%s: %s: more than %d entries", r.method, p.Path, maxDirEntries)
	}
	res := protocol.FsReadDirectoryResult{Entries: make([]protocol.FsDirEntry, 0, len(ents))}
	for _, e := range ents {
		t := e.Type()
		res.Entries = append(res.Entries, protocol.FsDirEntry{FileName: e.Name(), IsDirectory: t.IsDir(), IsFile: t.IsRegular(), IsSymlink: t&fs.ModeSymlink != 0})
	}
	sort.Slice(res.Entries, func(i, j int) bool { return res.Entries[i].FileName < res.Entries[j].FileName })
	return res, nil
}

func (s *Session) fsRemove(p protocol.FsRemoveParams) (any, error) {
	r, n, err := s.fsBegin(protocol.MethodFsRemove, p.Sandbox, p.Path)
	if err != nil {
		return nil, err
	}
	recursive, force := p.Recursive == nil || *p.Recursive, p.Force == nil || *p.Force
	// The path itself goes, not what a link at it leads to: judge the
	// link's own place (its parent resolved) and, for a tree, everything
	// under it.
	place := filepath.Join(realPath(filepath.Dir(n)), filepath.Base(n))
	if err := r.check(p.Path, n, true); err != nil {
		return nil, err
	}
	if r.pol != nil && (!r.pol.Allows(place, true) || !r.pol.AllowsTree(place, true)) {
		return nil, r.denied(p.Path, true)
	}
	if n == "/" {
		return nil, protocol.Errorf(protocol.CodeInvalidRequest, "%s: refusing to remove /", r.method)
	}
	fi, err := os.Lstat(n)
	switch {
	case errors.Is(err, fs.ErrNotExist) && force:
		return protocol.Empty{}, nil
	case err != nil:
		return nil, r.fsError(p.Path, err)
	case fi.IsDir() && recursive:
		err = os.RemoveAll(n)
	default:
		err = os.Remove(n)
	}
	if err != nil {
		return nil, r.fsError(p.Path, err)
	}
	return protocol.Empty{}, nil
}

func (s *Session) fsCopy(p protocol.FsCopyParams) (any, error) {
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
	fi, err := os.Stat(src)
	if err != nil {
		return nil, r.fsError(p.SourcePath, err)
	}
	if fi.IsDir() {
		if !p.Recursive {
			return nil, protocol.Errorf(protocol.CodeInvalidRequest, "%s: %s: is a directory (set recursive)", r.method, p.SourcePath)
		}
		if err := r.checkTree(p.SourcePath, src, false); err != nil {
			return nil, err
		}
		if err := r.checkTree(p.DestinationPath, dst, true); err != nil {
			return nil, err
		}
		if within(realPath(src), realPath(dst)) {
			return nil, protocol.Errorf(protocol.CodeInvalidRequest, "%s: cannot copy %s into itself (%s)", r.method, p.SourcePath, p.DestinationPath)
		}
		return protocol.Empty{}, r.copyTree(src, dst)
	}
	return protocol.Empty{}, r.copyFile(p.SourcePath, src, dst, fi.Mode().Perm())
}

func within(root, p string) bool {
	return p == root || strings.HasPrefix(p, strings.TrimSuffix(root, "/")+"/")
}

// copyFile copies one regular file through the same checks as a read and
// a write.
func (r *fsReq) copyFile(shown, src, dst string, perm os.FileMode) error {
	in, _, err := r.openRead(shown, src)
	if err != nil {
		return err
	}
	defer in.Close()
	mode := uint32(perm)
	h, err := r.createTemp(dst, dst, &mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(h.f, in); err != nil {
		h.discard()
		return r.fsError(shown, err)
	}
	if err := h.commit(); err != nil {
		return r.fsError(dst, err)
	}
	return nil
}

// copyTree copies a directory: directories and files with their modes,
// symlinks as symlinks (not followed).
func (r *fsReq) copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return r.fsError(path, err)
		}
		rel, _ := filepath.Rel(src, path)
		to := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return r.fsError(path, err)
		}
		switch {
		case d.IsDir():
			if err := os.MkdirAll(to, info.Mode().Perm()|0o700); err != nil {
				return r.fsError(to, err)
			}
			return r.check(to, to, true)
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return r.fsError(path, err)
			}
			return r.fsErrorOrNil(to, os.Symlink(target, to))
		case d.Type().IsRegular():
			return r.copyFile(path, path, to, info.Mode().Perm())
		}
		return nil // sockets, devices, fifos are not copied
	})
}

func (r *fsReq) fsErrorOrNil(shown string, err error) error {
	if err == nil {
		return nil
	}
	return r.fsError(shown, err)
}

func (s *Session) fsHash(p protocol.FsPathParams) (any, error) {
	r, n, err := s.fsBegin(protocol.MethodFsHash, p.Sandbox, p.Path)
	if err != nil {
		return nil, err
	}
	f, _, err := r.openRead(p.Path, n)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	size, err := io.Copy(h, f)
	if err != nil {
		return nil, r.fsError(p.Path, err)
	}
	return protocol.FsHashResult{Sha256: hex.EncodeToString(h.Sum(nil)), Size: uint64(size)}, nil
}

// --- handles ----------------------------------------------------------------

func (s *Session) addHandle(method, id string, h *fsHandle) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.ended:
		return protocol.Errorf(protocol.CodeInvalidRequest, "session %s has ended", s.id)
	case s.handles[id] != nil:
		return protocol.Errorf(protocol.CodeInvalidRequest, "%s: handle %s is already open", method, id)
	case len(s.handles) >= s.srv.cfg.MaxFileHandles:
		return protocol.Errorf(protocol.CodeInvalidRequest, "%s: too many open file handles in this session (limit %d)", method, s.srv.cfg.MaxFileHandles)
	}
	if s.handles == nil {
		s.handles = map[string]*fsHandle{}
	}
	s.handles[id] = h
	return nil
}

func validHandleID(method, id string) error {
	if id == "" || len(id) > protocol.MaxHandleIDBytes {
		return protocol.Errorf(protocol.CodeInvalidParams, "invalid params for %s: handleId must be 1 to %d bytes", method, protocol.MaxHandleIDBytes)
	}
	return nil
}

func (s *Session) handle(method, id string) (*fsHandle, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.handles[id]
	if h == nil {
		return nil, protocol.Errorf(protocol.CodeNotFound, "%s: unknown handle %s", method, id) // codex: -32004
	}
	return h, nil
}

func (s *Session) fsOpen(p protocol.FsOpenParams) (any, error) {
	if err := validHandleID(protocol.MethodFsOpen, p.HandleID); err != nil {
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
	if err := s.addHandle(r.method, p.HandleID, &fsHandle{f: f, sum: sha256.New()}); err != nil {
		f.Close()
		return nil, err
	}
	return protocol.FsHandleResult{HandleID: p.HandleID}, nil
}

func (s *Session) fsCreate(p protocol.FsCreateParams) (any, error) {
	if err := validHandleID(protocol.MethodFsCreate, p.HandleID); err != nil {
		return nil, err
	}
	r, n, err := s.fsBegin(protocol.MethodFsCreate, p.Sandbox, p.Path)
	if err != nil {
		return nil, err
	}
	h, err := r.createTemp(p.Path, n, p.Mode)
	if err != nil {
		return nil, err
	}
	if err := s.addHandle(r.method, p.HandleID, h); err != nil {
		h.discard()
		return nil, err
	}
	return protocol.FsHandleResult{HandleID: p.HandleID}, nil
}

func (s *Session) fsReadBlock(p protocol.FsReadBlockParams) (any, error) {
	h, err := s.handle(protocol.MethodFsReadBlock, p.HandleID)
	if err != nil {
		return nil, err
	}
	if h.write {
		return nil, protocol.Errorf(protocol.CodeInvalidRequest, "%s: handle %s was opened for writing", protocol.MethodFsReadBlock, p.HandleID)
	}
	n := min(p.Len, maxBlockBytes)
	if p.Offset > 1<<62 {
		return nil, protocol.Errorf(protocol.CodeInvalidParams, "invalid params for %s: offset out of range", protocol.MethodFsReadBlock)
	}
	buf := make([]byte, n)
	h.mu.Lock()
	got, err := h.f.ReadAt(buf, int64(p.Offset))
	h.account(p.Offset, buf[:got])
	h.mu.Unlock()
	if err != nil && err != io.EOF {
		return nil, protocol.Errorf(protocol.CodeInternal, "%s: handle %s: %v", protocol.MethodFsReadBlock, p.HandleID, err)
	}
	return protocol.FsReadBlockResult{Chunk: buf[:got], EOF: err == io.EOF || n == 0}, nil
}

func (s *Session) fsWriteBlock(p protocol.FsWriteBlockParams) (any, error) {
	h, err := s.handle(protocol.MethodFsWriteBlock, p.HandleID)
	if err != nil {
		return nil, err
	}
	if !h.write {
		return nil, protocol.Errorf(protocol.CodeInvalidRequest, "%s: handle %s was opened for reading", protocol.MethodFsWriteBlock, p.HandleID)
	}
	if len(p.Chunk) > maxBlockBytes || p.Offset > 1<<62 {
		return nil, protocol.Errorf(protocol.CodeInvalidParams, "invalid params for %s: a block is at most %d bytes at an offset below 2^62", protocol.MethodFsWriteBlock, maxBlockBytes)
	}
	h.mu.Lock()
	_, err = h.f.WriteAt(p.Chunk, int64(p.Offset))
	if err == nil {
		h.account(p.Offset, p.Chunk)
	}
	h.mu.Unlock()
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeInternal, "%s: handle %s: %v", protocol.MethodFsWriteBlock, p.HandleID, err)
	}
	return protocol.Empty{}, nil
}

func (s *Session) fsClose(p protocol.FsCloseParams) (any, error) {
	s.mu.Lock()
	h := s.handles[p.HandleID]
	delete(s.handles, p.HandleID)
	s.mu.Unlock()
	if h == nil {
		return nil, protocol.Errorf(protocol.CodeNotFound, "%s: unknown handle %s", protocol.MethodFsClose, p.HandleID)
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
		return nil, protocol.Errorf(protocol.CodeInternal, "%s: handle %s: %v", protocol.MethodFsClose, p.HandleID, err)
	}
	return res, nil
}

// closeFiles drops every handle of an ending session.
func (s *Session) closeFiles() {
	s.mu.Lock()
	hs := s.handles
	s.handles = nil
	s.mu.Unlock()
	for _, h := range hs {
		h.discard()
	}
}
