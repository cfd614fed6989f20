package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strconv"
	"sync"
	"time"

	"github.com/outpost-exec/outpost/protocol"
)

// Streamed transfers move blocks of blockSize with at most window blocks
// in flight per file: 8 MiB of memory per open file, whatever its size,
// and the executor is never asked for more than the client can take.
// (Through a relay, 8 blocks in flight move a file 15% faster than 4.)
const (
	blockSize = 1 << 20
	window    = 8
)

// Files is a view of the executor's filesystem. When Sandbox is set, it is
// sent with every call and the executor judges the call by that policy
// (the same object as ExecParams.Sandbox, plus an optional "cwd").
type Files struct {
	r       *Remote
	Sandbox any
	// Digest is the algorithm of Hash and of the digests FileReader.Sum
	// and FileWriter.Sum report: protocol.DigestSHA256 when empty, or
	// protocol.DigestXXH3. (Transfers choose their own, by
	// TransferOptions.Digest.)
	Digest string
}

// withDigest is a copy of f whose digests are alg's.
func (f *Files) withDigest(alg string) *Files {
	c := *f
	c.Digest = alg
	return &c
}

// Files returns a view of the executor's filesystem under a sandbox
// policy (nil: as the executor's user).
func (r *Remote) Files(sandbox any) *Files { return &Files{r: r, Sandbox: sandbox} }

// ReadFile reads a whole file (at most the executor's limit, 64 MiB by
// default; use Open for more).
func (r *Remote) ReadFile(ctx context.Context, name string) ([]byte, error) {
	return r.Files(nil).ReadFile(ctx, name)
}

// WriteFile replaces a file atomically (at most the executor's limit; use
// Create for more).
func (r *Remote) WriteFile(ctx context.Context, name string, data []byte, perm os.FileMode) error {
	return r.Files(nil).WriteFile(ctx, name, data, perm)
}

// Open opens a file for streamed reading.
func (r *Remote) Open(ctx context.Context, name string) (*FileReader, error) {
	return r.Files(nil).Open(ctx, name)
}

// Create opens a file for a streamed write; it appears, atomically, when
// the writer is closed.
func (r *Remote) Create(ctx context.Context, name string, perm os.FileMode) (*FileWriter, error) {
	return r.Files(nil).Create(ctx, name, perm)
}

// Stat describes a path (a final symlink itself, not its target).
func (r *Remote) Stat(ctx context.Context, name string) (fs.FileInfo, error) {
	return r.Files(nil).Stat(ctx, name)
}

// ReadDir lists a directory, sorted by name.
func (r *Remote) ReadDir(ctx context.Context, name string) ([]fs.DirEntry, error) {
	return r.Files(nil).ReadDir(ctx, name)
}

// Remove removes a path; recursive removes a directory tree. A missing
// path is not an error.
func (r *Remote) Remove(ctx context.Context, name string, recursive bool) error {
	return r.Files(nil).Remove(ctx, name, recursive)
}

// MkdirAll makes a directory and its parents.
func (r *Remote) MkdirAll(ctx context.Context, name string) error {
	return r.Files(nil).MkdirAll(ctx, name)
}

// Copy copies a file, or a directory tree with recursive, on the executor.
func (r *Remote) Copy(ctx context.Context, src, dst string, recursive bool) error {
	return r.Files(nil).Copy(ctx, src, dst, recursive)
}

// FileError is a failed file operation. It unwraps to the executor's
// *protocol.Error and, by the error's kind, to fs.ErrNotExist or
// fs.ErrPermission where those apply, so errors.Is works as with os.
type FileError struct {
	Op, Path string
	Err      *protocol.Error
}

func (e *FileError) Error() string { return e.Err.Message }

func (e *FileError) Unwrap() []error {
	switch e.Err.Kind() {
	case protocol.KindNotFound:
		return []error{fs.ErrNotExist, e.Err}
	case protocol.KindPermission:
		return []error{fs.ErrPermission, e.Err}
	case "":
		// A peer that sends no kinds (codex): its not-found code.
		if e.Err.Code == protocol.CodeNotFound {
			return []error{fs.ErrNotExist, e.Err}
		}
	}
	return []error{e.Err}
}

func (f *Files) call(ctx context.Context, retryable bool, method, name string, params, result any) error {
	err := f.r.call(ctx, retryable, method, params, result)
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return &FileError{Op: method, Path: name, Err: pe}
	}
	return err
}

// ReadFile reads a whole file.
func (f *Files) ReadFile(ctx context.Context, name string) ([]byte, error) {
	var res protocol.FsReadFileResult
	err := f.call(ctx, true, protocol.MethodFsReadFile, name, protocol.FsReadFileParams{Path: name, Sandbox: f.Sandbox}, &res)
	return res.Data, err
}

// WriteFile replaces a file atomically.
func (f *Files) WriteFile(ctx context.Context, name string, data []byte, perm os.FileMode) error {
	mode := uint32(perm.Perm())
	return f.call(ctx, true, protocol.MethodFsWriteFile, name, protocol.FsWriteFileParams{Path: name, Data: data, Mode: &mode, Sandbox: f.Sandbox}, nil)
}

// Stat describes a path.
func (f *Files) Stat(ctx context.Context, name string) (fs.FileInfo, error) {
	var md protocol.FsMetadata
	if err := f.call(ctx, true, protocol.MethodFsGetMetadata, name, protocol.FsPathParams{Path: name, Sandbox: f.Sandbox}, &md); err != nil {
		return nil, err
	}
	return fileInfo{name: path.Base(name), md: md}, nil
}

// Hash returns a file's digest (hex, f.Digest's algorithm) and size,
// computed on the executor.
func (f *Files) Hash(ctx context.Context, name string) (string, int64, error) {
	var res protocol.FsHashResult
	if err := f.call(ctx, true, protocol.MethodFsHash, name, protocol.FsHashParams{Path: name, Sandbox: f.Sandbox, Digest: f.Digest}, &res); err != nil {
		return "", 0, err
	}
	if res.Sum(f.Digest) == "" {
		// An executor from before digests had names answers sha256
		// whatever was asked.
		return "", 0, protocol.KindErrorf(protocol.KindUnsupported, protocol.CodeInvalidParams, "%s: the executor does not compute %s digests (an older outpost?); ask for %s", name, f.Digest, protocol.DigestSHA256)
	}
	return res.Sum(f.Digest), int64(res.Size), nil
}

// ReadDir lists a directory.
func (f *Files) ReadDir(ctx context.Context, name string) ([]fs.DirEntry, error) {
	var res protocol.FsReadDirectoryResult
	if err := f.call(ctx, true, protocol.MethodFsReadDirectory, name, protocol.FsPathParams{Path: name, Sandbox: f.Sandbox}, &res); err != nil {
		return nil, err
	}
	out := make([]fs.DirEntry, len(res.Entries))
	for i, e := range res.Entries {
		out[i] = dirEntry{f: f, ctx: ctx, dir: name, e: e}
	}
	return out, nil
}

// Remove removes a path.
func (f *Files) Remove(ctx context.Context, name string, recursive bool) error {
	return f.call(ctx, true, protocol.MethodFsRemove, name, protocol.FsRemoveParams{Path: name, Recursive: &recursive, Sandbox: f.Sandbox}, nil)
}

// MkdirAll makes a directory and its parents.
func (f *Files) MkdirAll(ctx context.Context, name string) error {
	rec := true
	return f.call(ctx, true, protocol.MethodFsCreateDirectory, name, protocol.FsCreateDirectoryParams{Path: name, Recursive: &rec, Sandbox: f.Sandbox}, nil)
}

// Canonicalize resolves every symlink of an existing path.
func (f *Files) Canonicalize(ctx context.Context, name string) (string, error) {
	var res protocol.FsCanonicalizeResult
	err := f.call(ctx, true, protocol.MethodFsCanonicalize, name, protocol.FsPathParams{Path: name, Sandbox: f.Sandbox}, &res)
	return res.Path, err
}

// Copy copies on the executor.
func (f *Files) Copy(ctx context.Context, src, dst string, recursive bool) error {
	return f.call(ctx, false, protocol.MethodFsCopy, src, protocol.FsCopyParams{SourcePath: src, DestinationPath: dst, Recursive: recursive, Sandbox: f.Sandbox}, nil)
}

func (f *Files) handleID() string { return "h" + strconv.FormatInt(f.r.nextID.Add(1), 10) }

// Open opens a file for streamed reading.
func (f *Files) Open(ctx context.Context, name string) (*FileReader, error) {
	id := f.handleID()
	var res protocol.FsHandleResult
	if err := f.call(ctx, false, protocol.MethodFsOpen, name, protocol.FsOpenParams{HandleID: id, Path: name, Sandbox: f.Sandbox, Digest: f.Digest}, &res); err != nil {
		return nil, err
	}
	return &FileReader{f: f, ctx: ctx, name: name, id: id, alg: handleDigest(res)}, nil
}

// OpenAt opens a file for streamed reading from offset: the blocks
// before it are never read (a read far into a large or sparse file costs
// what it returns). Sum reports nothing for such a reader.
func (f *Files) OpenAt(ctx context.Context, name string, offset int64) (*FileReader, error) {
	if offset < 0 {
		return nil, fmt.Errorf("OpenAt %s: negative offset %d", name, offset)
	}
	r, err := f.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	r.next, r.partial = uint64(offset), offset > 0
	return r, nil
}

// handleDigest is the algorithm of a handle's running digest, as the
// executor answered fs/open or fs/create: one from before named digests
// says nothing, and computes sha256 whatever was asked.
func handleDigest(res protocol.FsHandleResult) string {
	return cmp.Or(res.Digest, protocol.DigestSHA256)
}

// FileReader reads a remote file block by block, keeping up to eight
// 1 MiB requests in flight.
type FileReader struct {
	f    *Files
	ctx  context.Context
	name string
	id   string
	alg  string // the executor's running digest's algorithm

	next    uint64 // offset of the next block to request
	partial bool   // opened past the start (OpenAt): no digest of the whole
	pending []chan blockResult
	ended   bool // a block came back with eof
	buf     []byte
	err     error
	closed  bool
	digest  *protocol.FsHashResult
}

// Sum is the executor's digest (hex, in DigestAlgorithm) and size of what
// was read, known after Close when the whole file was read in order.
func (r *FileReader) Sum() (sum string, size int64, ok bool) {
	if r.partial || r.digest == nil || r.digest.Sum(r.alg) == "" {
		return "", 0, false
	}
	return r.digest.Sum(r.alg), int64(r.digest.Size), true
}

// DigestAlgorithm is the algorithm of Sum: the Files' Digest, or
// protocol.DigestSHA256 from an executor that does not know named digests.
func (r *FileReader) DigestAlgorithm() string { return r.alg }

type blockResult struct {
	res protocol.FsReadBlockResult
	err error
}

func (r *FileReader) request() {
	ch := make(chan blockResult, 1)
	off := r.next
	r.next += blockSize
	r.pending = append(r.pending, ch)
	go func() {
		var res protocol.FsReadBlockResult
		err := r.f.call(r.ctx, true, protocol.MethodFsReadBlock, r.name, protocol.FsReadBlockParams{HandleID: r.id, Offset: off, Len: blockSize}, &res)
		ch <- blockResult{res, err}
	}()
}

// fill waits for the next block when the current one is used up: nil with
// r.buf non-empty, io.EOF at the end, or the error that ended the read.
func (r *FileReader) fill() error {
	for len(r.buf) == 0 {
		if r.err != nil {
			return r.err
		}
		if r.ended && len(r.pending) == 0 {
			return io.EOF
		}
		for !r.ended && len(r.pending) < window {
			r.request()
		}
		b := <-r.pending[0]
		r.pending = r.pending[1:]
		if b.err != nil {
			r.err = b.err
			continue
		}
		r.buf = b.res.Chunk
		if b.res.EOF || len(b.res.Chunk) < blockSize {
			// Blocks requested past the end come back empty; drain them.
			r.ended = true
			for _, ch := range r.pending {
				<-ch
			}
			r.pending = nil
		}
	}
	return nil
}

// Read implements io.Reader.
func (r *FileReader) Read(p []byte) (int, error) {
	if err := r.fill(); err != nil {
		return 0, err
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// WriteTo implements io.WriterTo: each block goes to w as it came, without
// the copy Read makes.
func (r *FileReader) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for {
		if err := r.fill(); err == io.EOF {
			return total, nil
		} else if err != nil {
			return total, err
		}
		n, err := w.Write(r.buf)
		total += int64(n)
		r.buf = r.buf[n:]
		if err != nil {
			return total, err
		}
	}
}

// Close releases the handle.
func (r *FileReader) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	for _, ch := range r.pending {
		<-ch
	}
	r.pending = nil
	var res protocol.FsCloseResult
	err := r.f.call(context.WithoutCancel(r.ctx), true, protocol.MethodFsClose, r.name, protocol.FsCloseParams{HandleID: r.id}, &res)
	r.digest = res.Digest
	return err
}

// Create opens a file for a streamed write.
func (f *Files) Create(ctx context.Context, name string, perm os.FileMode) (*FileWriter, error) {
	id := f.handleID()
	mode := uint32(perm.Perm())
	var res protocol.FsHandleResult
	if err := f.call(ctx, false, protocol.MethodFsCreate, name, protocol.FsCreateParams{HandleID: id, Path: name, Mode: &mode, Sandbox: f.Sandbox, Digest: f.Digest}, &res); err != nil {
		return nil, err
	}
	return &FileWriter{f: f, ctx: ctx, name: name, id: id, alg: handleDigest(res), slots: make(chan struct{}, window)}, nil
}

// FileWriter writes a remote file in 1 MiB blocks, up to eight in flight;
// the file appears when Close succeeds.
type FileWriter struct {
	f     *Files
	ctx   context.Context
	name  string
	id    string
	alg   string // the executor's running digest's algorithm
	off   uint64
	buf   []byte
	slots chan struct{}
	wg    sync.WaitGroup

	mu     sync.Mutex
	err    error
	closed bool
	digest *protocol.FsHashResult
}

// Sum is the executor's digest (hex, in DigestAlgorithm) and size of the
// written file, known after a successful Close (the executor hashes blocks
// as they land).
func (w *FileWriter) Sum() (sum string, size int64, ok bool) {
	if w.digest == nil || w.digest.Sum(w.alg) == "" {
		return "", 0, false
	}
	return w.digest.Sum(w.alg), int64(w.digest.Size), true
}

// DigestAlgorithm is the algorithm of Sum: the Files' Digest, or
// protocol.DigestSHA256 from an executor that does not know named digests.
func (w *FileWriter) DigestAlgorithm() string { return w.alg }

func (w *FileWriter) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

func (w *FileWriter) flush() {
	if len(w.buf) == 0 {
		return
	}
	chunk, off := w.buf, w.off
	w.off += uint64(len(chunk))
	w.buf = nil
	w.slots <- struct{}{}
	w.wg.Add(1)
	go func() {
		defer func() { <-w.slots; w.wg.Done() }()
		// A block at its offset is idempotent: safe to retry on resume.
		if err := w.f.call(w.ctx, true, protocol.MethodFsWriteBlock, w.name, protocol.FsWriteBlockParams{HandleID: w.id, Offset: off, Chunk: chunk}, nil); err != nil {
			w.mu.Lock()
			if w.err == nil {
				w.err = err
			}
			w.mu.Unlock()
		}
	}()
}

// Write implements io.Writer.
func (w *FileWriter) Write(p []byte) (int, error) {
	if err := w.failed(); err != nil {
		return 0, err
	}
	n := len(p)
	for len(p) > 0 {
		if w.buf == nil {
			w.buf = make([]byte, 0, blockSize)
		}
		k := copy(w.buf[len(w.buf):cap(w.buf)], p)
		w.buf = w.buf[:len(w.buf)+k]
		p = p[k:]
		if len(w.buf) == blockSize {
			w.flush()
		}
	}
	return n, w.failed()
}

// Close sends what is buffered, waits for every block and moves the file
// into place. After an error the partial file is discarded.
func (w *FileWriter) Close() error {
	if w.closed {
		return w.failed()
	}
	w.closed = true
	w.flush()
	w.wg.Wait()
	if err := w.failed(); err != nil {
		w.Abort()
		return err
	}
	var res protocol.FsCloseResult
	err := w.f.call(context.WithoutCancel(w.ctx), false, protocol.MethodFsClose, w.name, protocol.FsCloseParams{HandleID: w.id}, &res)
	w.digest = res.Digest
	return err
}

// Abort drops an unfinished write: the executor removes its temporary
// file and the destination is left as it was.
func (w *FileWriter) Abort() error {
	w.closed = true
	w.wg.Wait()
	return w.f.call(context.WithoutCancel(w.ctx), true, protocol.MethodFsClose, w.name, protocol.FsCloseParams{HandleID: w.id, Discard: true}, nil)
}

// fileInfo is fs.FileInfo from metadata.
type fileInfo struct {
	name string
	md   protocol.FsMetadata
}

func (i fileInfo) Name() string { return i.name }
func (i fileInfo) Size() int64  { return int64(i.md.Size) }
func (i fileInfo) Mode() fs.FileMode {
	m := fs.FileMode(i.md.Mode) & fs.ModePerm
	switch {
	case i.md.IsDirectory:
		m |= fs.ModeDir
	case i.md.IsSymlink:
		m |= fs.ModeSymlink
	case !i.md.IsFile:
		m |= fs.ModeIrregular
	}
	return m
}
func (i fileInfo) ModTime() time.Time { return time.UnixMilli(i.md.ModifiedAtMs) }
func (i fileInfo) IsDir() bool        { return i.md.IsDirectory }
func (i fileInfo) Sys() any           { return i.md }

// dirEntry is fs.DirEntry from a listing.
type dirEntry struct {
	f   *Files
	ctx context.Context
	dir string
	e   protocol.FsDirEntry
}

func (d dirEntry) Name() string { return d.e.FileName }
func (d dirEntry) IsDir() bool  { return d.e.IsDirectory }
func (d dirEntry) Type() fs.FileMode {
	switch {
	case d.e.IsDirectory:
		return fs.ModeDir
	case d.e.IsSymlink:
		return fs.ModeSymlink
	case !d.e.IsFile:
		return fs.ModeIrregular
	}
	return 0
}
func (d dirEntry) Info() (fs.FileInfo, error) { return d.f.Stat(d.ctx, path.Join(d.dir, d.e.FileName)) }

// FS returns an fs.FS of the directory root on the executor (for
// fs.WalkDir, fs.ReadFile, io/fs-based tools). Calls use ctx.
func (f *Files) FS(ctx context.Context, root string) fs.FS {
	return remoteFS{f: f, ctx: ctx, root: root}
}

type remoteFS struct {
	f    *Files
	ctx  context.Context
	root string
}

func (r remoteFS) full(op, name string) (string, error) {
	if !fs.ValidPath(name) {
		return "", &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	return path.Join(r.root, name), nil
}

func pathErr(op, name string, err error) error {
	return &fs.PathError{Op: op, Path: name, Err: err}
}

func (r remoteFS) Open(name string) (fs.File, error) {
	full, err := r.full("open", name)
	if err != nil {
		return nil, err
	}
	info, err := r.f.Stat(r.ctx, full)
	if err != nil {
		return nil, pathErr("open", name, err)
	}
	if name == "." {
		info = fileInfo{name: ".", md: info.Sys().(protocol.FsMetadata)}
	}
	if info.IsDir() {
		return &remoteDir{fsys: r, full: full, info: info}, nil
	}
	rd, err := r.f.Open(r.ctx, full)
	if err != nil {
		return nil, pathErr("open", name, err)
	}
	return &remoteFile{FileReader: rd, info: info}, nil
}

func (r remoteFS) ReadDir(name string) ([]fs.DirEntry, error) {
	full, err := r.full("readdir", name)
	if err != nil {
		return nil, err
	}
	ents, err := r.f.ReadDir(r.ctx, full)
	if err != nil {
		return nil, pathErr("readdir", name, err)
	}
	return ents, nil
}

func (r remoteFS) Stat(name string) (fs.FileInfo, error) {
	full, err := r.full("stat", name)
	if err != nil {
		return nil, err
	}
	info, err := r.f.Stat(r.ctx, full)
	if err != nil {
		return nil, pathErr("stat", name, err)
	}
	if name == "." {
		info = fileInfo{name: ".", md: info.Sys().(protocol.FsMetadata)}
	}
	return info, nil
}

type remoteFile struct {
	*FileReader
	info fs.FileInfo
}

func (f *remoteFile) Stat() (fs.FileInfo, error) { return f.info, nil }

type remoteDir struct {
	fsys    remoteFS
	full    string
	info    fs.FileInfo
	entries []fs.DirEntry
	read    bool
}

func (d *remoteDir) Stat() (fs.FileInfo, error) { return d.info, nil }
func (d *remoteDir) Read([]byte) (int, error) {
	return 0, pathErr("read", d.info.Name(), errors.New("is a directory"))
}
func (d *remoteDir) Close() error { return nil }

func (d *remoteDir) ReadDir(n int) ([]fs.DirEntry, error) {
	if !d.read {
		ents, err := d.fsys.f.ReadDir(d.fsys.ctx, d.full)
		if err != nil {
			return nil, err
		}
		d.entries, d.read = ents, true
	}
	if n <= 0 {
		out := d.entries
		d.entries = nil
		return out, nil
	}
	if len(d.entries) == 0 {
		return nil, io.EOF
	}
	k := min(n, len(d.entries))
	out := d.entries[:k]
	d.entries = d.entries[k:]
	return out, nil
}
