package client

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"strings"
)

// Checked transfers: Upload, Download, CopyBetween and CopyWithin copy a
// file, or a directory tree with TransferOptions.Recursive, as `outpost
// cp` does. Every file that passes through the client is hashed (sha256)
// on the way and compared with the executor's digest of what it wrote or
// read (fs/close's, or fs/hash's when the blocks did not go in order); a
// difference is ErrChecksum.
//
// As with cp, a destination that is an existing directory, or that ends
// in "/", receives the source under its own name. Files keep their
// permission bits; directories are made with the executor's default mode
// (fs/createDirectory takes none), or here with their own bits plus the
// owner's rwx, under the umask. A tree's symlinks, devices, sockets and fifos are not copied:
// each is reported to TransferOptions.Skipped (except within one
// executor, where fs/copy copies a symlink as a symlink). A tree is
// listed before anything is copied, so the totals are known from the
// first Progress report.

// ErrChecksum reports a file whose digest after a transfer differs from
// what passed through the client (errors.Is).
var ErrChecksum = errors.New("checksum mismatch after the transfer")

// TransferOptions shape a transfer.
type TransferOptions struct {
	// Recursive copies a directory tree; without it a directory is an
	// error.
	Recursive bool
	// Progress, if set, is called on the transferring goroutine for every
	// file: first with FileBytes 0, then after each chunk that passed,
	// and last with Done set (also when the copy failed). Keep it quick.
	Progress func(Progress)
	// Skipped, if set, is called for each entry of a tree that is neither
	// a regular file nor a directory (and so is not copied), in the
	// order of the walk, with its source path and type bits.
	Skipped func(path string, mode fs.FileMode)
	// Verify makes CopyWithin compare fs/hash of every regular file it
	// copied with its source's. (fs/copy moves the bytes on the executor
	// without the client; transfers through the client are always
	// checked.)
	Verify bool
}

// Progress is a report of a transfer under way.
type Progress struct {
	// Path is the source path of the file in flight.
	Path string
	// FileBytes of its FileSize (as listed when the transfer began) have
	// passed.
	FileBytes, FileSize int64
	// Bytes of Size (every file of the transfer) have passed.
	Bytes, Size int64
	// Files of FileCount files have passed, this one included when Done.
	Files, FileCount int
	// Done: the file's bytes have all passed (or its copy failed); its
	// check comes next.
	Done bool
}

// TransferResult describes a finished transfer.
type TransferResult struct {
	// Destination is where the copy is: the destination given, or the
	// source's name inside it when it is a directory.
	Destination string
	// Files were copied and checked, Dirs made, Bytes passed through the
	// client. CopyWithin counts Files only with Verify, the rest never.
	Files, Dirs int
	Bytes       int64
	// Skipped lists the source paths left out (see TransferOptions.Skipped).
	Skipped []string
}

// Upload copies the local file or tree localPath to remotePath on the
// executor. Each file is checked against the executor's digest of what
// landed; one that fails the check is removed.
func Upload(ctx context.Context, files *Files, localPath, remotePath string, opts TransferOptions) (TransferResult, error) {
	t := &transfer{ctx: ctx, opts: opts}
	src, dst := localPath, remotePath
	fi, err := os.Stat(src)
	if err != nil {
		return t.res, err
	}
	if info, err := files.Stat(ctx, dst); err == nil && info.IsDir() || strings.HasSuffix(dst, "/") {
		dst = path.Join(dst, filepath.Base(src))
	}
	t.res.Destination = dst
	if !fi.IsDir() {
		t.plan = []entry{{kind: entryFile, from: src, to: dst, mode: fi.Mode(), size: fi.Size()}}
	} else if !opts.Recursive {
		return t.res, fmt.Errorf("%s is a directory (use -r)", src)
	} else if err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		return t.add(d, p, path.Join(dst, filepath.ToSlash(rel)))
	}); err != nil {
		return t.res, err
	}
	return t.run(func(e entry) error {
		if e.kind == entryDir {
			return files.MkdirAll(ctx, e.to)
		}
		return t.upload(files, e)
	})
}

// Download copies the file or tree remotePath on the executor to
// localPath here. Each file is written to a temporary file beside its
// destination and renamed into place only once its digest matches the
// executor's of what it read.
func Download(ctx context.Context, files *Files, remotePath, localPath string, opts TransferOptions) (TransferResult, error) {
	t := &transfer{ctx: ctx, opts: opts, dirModes: true}
	src, dst := remotePath, localPath
	info, err := files.Stat(ctx, src)
	if err != nil {
		return t.res, err
	}
	if fi, err := os.Stat(dst); err == nil && fi.IsDir() || strings.HasSuffix(dst, "/") {
		dst = filepath.Join(dst, path.Base(src))
	}
	t.res.Destination = dst
	if !info.IsDir() {
		t.plan = []entry{{kind: entryFile, from: src, to: dst, mode: info.Mode(), size: info.Size()}}
	} else if !opts.Recursive {
		return t.res, fmt.Errorf("%s is a directory (use -r)", src)
	} else if err := t.walkRemote(files, src, func(p string) string { return filepath.Join(dst, filepath.FromSlash(p)) }); err != nil {
		return t.res, err
	}
	return t.run(func(e entry) error {
		if e.kind == entryDir {
			return os.MkdirAll(e.to, e.mode.Perm()|0o700)
		}
		return t.download(files, e)
	})
}

// CopyBetween copies the file or tree srcPath on one executor to dstPath
// on another; each file streams through the client and both executors'
// digests (of what one read and the other wrote) must equal what passed;
// a copy that fails the check is removed. When src and dst are one
// connection with the same sandbox policy, it is CopyWithin.
func CopyBetween(ctx context.Context, src *Files, srcPath string, dst *Files, dstPath string, opts TransferOptions) (TransferResult, error) {
	t := &transfer{ctx: ctx, opts: opts}
	info, dstPath, err := t.prepare(src, srcPath, dst, dstPath)
	if err != nil {
		return t.res, err
	}
	if src == dst || src.r == dst.r && reflect.DeepEqual(src.Sandbox, dst.Sandbox) {
		return t.within(src, srcPath, dstPath, info)
	}
	if !info.IsDir() {
		t.plan = []entry{{kind: entryFile, from: srcPath, to: dstPath, mode: info.Mode(), size: info.Size()}}
	} else if err := t.walkRemote(src, srcPath, func(p string) string { return path.Join(dstPath, p) }); err != nil {
		return t.res, err
	}
	return t.run(func(e entry) error {
		if e.kind == entryDir {
			return dst.MkdirAll(ctx, e.to)
		}
		return t.stream(src, dst, e)
	})
}

// CopyWithin copies the file or tree srcPath to dstPath on one executor,
// which copies by itself (fs/copy: modes kept, symlinks copied as
// symlinks); nothing passes through the client, so there is no Progress.
// With opts.Verify every regular file copied is then compared, by
// fs/hash, with its source.
func CopyWithin(ctx context.Context, files *Files, srcPath, dstPath string, opts TransferOptions) (TransferResult, error) {
	t := &transfer{ctx: ctx, opts: opts}
	info, dstPath, err := t.prepare(files, srcPath, files, dstPath)
	if err != nil {
		return t.res, err
	}
	return t.within(files, srcPath, dstPath, info)
}

// transfer is one call of the API: its plan, as listed before anything
// is copied, and its running totals.
type transfer struct {
	ctx  context.Context
	opts TransferOptions
	plan []entry
	res  TransferResult

	size   int64 // bytes of the files planned
	count  int   // files planned
	passed int   // files whose bytes have passed

	dirModes bool // plan directories with their modes (one more stat each)
}

type entryKind int

const (
	entryDir entryKind = iota
	entryFile
	entrySkip
)

// entry is one step of a plan.
type entry struct {
	kind     entryKind
	from, to string
	mode     fs.FileMode
	size     int64
}

// add plans a walked entry: from (its source path) to to.
func (t *transfer) add(d fs.DirEntry, from, to string) error {
	switch {
	case d.IsDir():
		e := entry{kind: entryDir, from: from, to: to, mode: fs.ModeDir}
		if t.dirModes {
			info, err := d.Info()
			if err != nil {
				return err
			}
			e.mode = info.Mode()
		}
		t.plan = append(t.plan, e)
	case d.Type().IsRegular():
		info, err := d.Info()
		if err != nil {
			return err
		}
		t.plan = append(t.plan, entry{kind: entryFile, from: from, to: to, mode: info.Mode(), size: info.Size()})
	default:
		t.plan = append(t.plan, entry{kind: entrySkip, from: from, mode: d.Type()})
	}
	return nil
}

// walkRemote plans the tree src on the executor; to maps a path relative
// to src to its destination.
func (t *transfer) walkRemote(files *Files, src string, to func(string) string) error {
	return fs.WalkDir(files.FS(t.ctx, src), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return t.add(d, path.Join(src, p), to(p))
	})
}

// run carries out the plan in order, copying each directory and file with
// do.
func (t *transfer) run(do func(entry) error) (TransferResult, error) {
	for _, e := range t.plan {
		if e.kind == entryFile {
			t.size += e.size
			t.count++
		}
	}
	for _, e := range t.plan {
		switch e.kind {
		case entrySkip:
			t.res.Skipped = append(t.res.Skipped, e.from)
			if t.opts.Skipped != nil {
				t.opts.Skipped(e.from, e.mode)
			}
			continue
		}
		if err := do(e); err != nil {
			return t.res, err
		}
		if e.kind == entryDir {
			t.res.Dirs++
		} else {
			t.res.Files++
		}
	}
	return t.res, nil
}

// prepare checks src for a copy between executors (or within one) and
// applies cp's rule for a destination directory.
func (t *transfer) prepare(src *Files, srcPath string, dst *Files, dstPath string) (fs.FileInfo, string, error) {
	info, err := src.Stat(t.ctx, srcPath)
	if err != nil {
		return nil, dstPath, err
	}
	if info.IsDir() && !t.opts.Recursive {
		return nil, dstPath, fmt.Errorf("%s is a directory (use -r)", srcPath)
	}
	if di, err := dst.Stat(t.ctx, dstPath); err == nil && di.IsDir() || strings.HasSuffix(dstPath, "/") {
		dstPath = path.Join(dstPath, path.Base(srcPath))
	}
	t.res.Destination = dstPath
	return info, dstPath, nil
}

// within has the executor copy src to dst, then (with Verify) compares
// each regular file's digest with its source's.
func (t *transfer) within(files *Files, src, dst string, info fs.FileInfo) (TransferResult, error) {
	if err := files.Copy(t.ctx, src, dst, info.IsDir()); err != nil || !t.opts.Verify {
		return t.res, err
	}
	if !info.IsDir() {
		t.plan = []entry{{kind: entryFile, from: src, to: dst, mode: info.Mode(), size: info.Size()}}
	} else if err := t.walkRemote(files, src, func(p string) string { return path.Join(dst, p) }); err != nil {
		return t.res, err
	}
	for _, e := range t.plan {
		if e.kind != entryFile {
			continue
		}
		want, wsize, err := files.Hash(t.ctx, e.from)
		if err != nil {
			return t.res, err
		}
		sum, size, err := files.Hash(t.ctx, e.to)
		if err != nil {
			return t.res, err
		}
		if sum != want || size != wsize {
			return t.res, fmt.Errorf("%s: %w (source %s, %d bytes; copy %s, %d bytes)", e.to, ErrChecksum, want, wsize, sum, size)
		}
		t.res.Files++
	}
	return t.res, nil
}

// pass copies one file's bytes from r to w, hashing them and reporting
// progress; it returns the digest (hex) and count of what passed.
func (t *transfer) pass(w io.Writer, r io.Reader, e entry) (string, int64, error) {
	h := sha256.New()
	p := &progressWriter{t: t, p: Progress{Path: e.from, FileSize: e.size, Bytes: t.res.Bytes, Size: t.size, Files: t.passed, FileCount: t.count}}
	p.report()
	n, err := io.Copy(io.MultiWriter(w, h, p), r)
	t.passed++
	p.p.Files, p.p.Done = t.passed, true
	p.report()
	return hex.EncodeToString(h.Sum(nil)), n, err
}

type progressWriter struct {
	t *transfer
	p Progress
}

func (w *progressWriter) Write(b []byte) (int, error) {
	n := int64(len(b))
	w.t.res.Bytes += n
	w.p.FileBytes += n
	w.p.Bytes += n
	w.report()
	return len(b), nil
}

func (w *progressWriter) report() {
	if w.t.opts.Progress != nil {
		w.t.opts.Progress(w.p)
	}
}

// executorSum is the executor's digest of a file that passed through a
// handle: the one fs/close returned, or fs/hash's when the blocks did not
// go in order.
func executorSum(ctx context.Context, files *Files, name string, sum func() (string, int64, bool)) (string, int64, error) {
	if s, size, ok := sum(); ok {
		return s, size, nil
	}
	return files.Hash(ctx, name)
}

func (t *transfer) upload(files *Files, e entry) error {
	in, err := os.Open(e.from)
	if err != nil {
		return err
	}
	defer in.Close()
	w, err := files.Create(t.ctx, e.to, e.mode.Perm())
	if err != nil {
		return err
	}
	want, _, err := t.pass(w, in, e)
	if err != nil {
		w.Abort()
		return fmt.Errorf("%s: %w", e.from, err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("%s: %w", e.to, err)
	}
	sum, size, err := executorSum(t.ctx, files, e.to, w.Sum)
	if err != nil {
		return err
	}
	// Against the size listed: a file that changed size while it was read
	// is not the file that was asked for.
	if sum != want || size != e.size {
		files.Remove(t.ctx, e.to, false)
		return fmt.Errorf("%s: %w (local %s, %d bytes; remote %s, %d bytes)", e.to, ErrChecksum, want, e.size, sum, size)
	}
	return nil
}

func (t *transfer) download(files *Files, e entry) error {
	r, err := files.Open(t.ctx, e.from)
	if err != nil {
		return err
	}
	defer r.Close() // after an error; a no-op after the explicit Close
	// A temporary file beside the target, renamed into place once the
	// digest matches: an interrupted or corrupt copy leaves the target
	// untouched.
	var rnd [6]byte
	rand.Read(rnd[:])
	tmp := filepath.Join(filepath.Dir(e.to), "."+filepath.Base(e.to)+".outpost-"+hex.EncodeToString(rnd[:]))
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, e.mode.Perm())
	if err != nil {
		return err
	}
	defer os.Remove(tmp) // after a successful rename, a no-op
	got, n, err := t.pass(out, r, e)
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", e.from, err)
	}
	if err := r.Close(); err != nil {
		return err
	}
	sum, size, err := executorSum(t.ctx, files, e.from, r.Sum)
	if err != nil {
		return err
	}
	if got != sum || n != size {
		return fmt.Errorf("%s: %w (remote %s, %d bytes; received %s, %d bytes)", e.from, ErrChecksum, sum, size, got, n)
	}
	if err := os.Chmod(tmp, e.mode.Perm()); err != nil {
		return err
	}
	return os.Rename(tmp, e.to)
}

// stream copies one file between executors: the source's digest (of
// what it sent) and the destination's (of what it wrote) must both equal
// what passed. A copy that fails the check is removed.
func (t *transfer) stream(from, to *Files, e entry) error {
	r, err := from.Open(t.ctx, e.from)
	if err != nil {
		return err
	}
	defer r.Close()
	w, err := to.Create(t.ctx, e.to, e.mode.Perm())
	if err != nil {
		return err
	}
	got, n, err := t.pass(w, r, e)
	if err != nil {
		w.Abort()
		return fmt.Errorf("%s: %w", e.from, err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("%s: %w", e.to, err)
	}
	if err := r.Close(); err != nil {
		return err
	}
	for _, side := range []struct {
		f    *Files
		name string
		sum  func() (string, int64, bool)
	}{{from, e.from, r.Sum}, {to, e.to, w.Sum}} {
		sum, size, err := executorSum(t.ctx, side.f, side.name, side.sum)
		if err != nil {
			return err
		}
		if sum != got || size != n {
			to.Remove(t.ctx, e.to, false)
			return fmt.Errorf("%s: %w (%s, %d bytes; passed through %s, %d bytes)", side.name, ErrChecksum, sum, size, got, n)
		}
	}
	return nil
}
