package client

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"strings"

	"github.com/outpost-exec/outpost/internal/digest"
	"github.com/outpost-exec/outpost/protocol"
)

// Checked transfers: Upload, Download, CopyBetween and CopyWithin copy a
// file, or a directory tree with TransferOptions.Recursive, as `outpost
// cp` does. Every file that passes through the client is hashed (sha256)
// on the way and compared with the executor's digest of what it wrote or
// read (fs/close's, or fs/hash's when the blocks did not go in order); a
// difference is ErrChecksum.
//
// As with cp, a destination that is an existing directory (or a symlink
// to one), or that ends in "/", receives the source under its own name.
// Missing parent directories of the destination are made, for a single
// file as for a tree (as `-r` always did; refusing only one of the two
// surprised users, and `mkdir -p` then cp is what they wanted). Files
// keep their permission bits; directories are made with the executor's
// default mode (fs/createDirectory takes none), or here with their own
// bits plus the owner's rwx, under the umask.
//
// Symlinks: the source named is followed (it is what was asked for, as
// with cp's -H and scp); inside a tree a symlink is copied as a symlink
// holding the same text (cp -a, rsync -l), or with FollowLinks what it
// leads to is copied (cp -L). Devices, sockets and fifos are not copied:
// each is reported to TransferOptions.Skipped.
//
// Nothing is written through a symlink in the destination: the
// directory the destination lands in is resolved once (the user's own
// path, symlinks and all), and everything below it is reached without
// following any symlink — here by descriptors (openat with O_NOFOLLOW),
// on an executor with noFollow — so a link planted in the destination
// tree makes the copy fail instead of leading elsewhere, and a link at a
// file's own name is replaced by the file. Names listed by a source
// executor are checked to be single path elements (ErrUnsafeName).
//
// A relative remote path ("rel.txt", "~/rel.txt") is resolved against
// the executor user's home directory, as scp does, or, when the executor
// reports none, against its working directory (environment/info).
//
// A tree is listed before anything is copied, so the totals are known
// from the first Progress report.

// ErrChecksum reports a file whose digest after a transfer differs from
// what passed through the client (errors.Is).
var ErrChecksum = errors.New("checksum mismatch after the transfer")

// ErrUnsafeName reports a directory listing from an executor holding a
// name that is not one path element ("", ".", "..", or with "/" or a NUL
// byte): a broken or hostile executor's way to place a file outside the
// destination. Nothing is copied.
var ErrUnsafeName = errors.New("unsafe name in a directory listing")

// ErrDestinationSymlink reports a symlink where a local copy needed a
// directory of its own: it is not followed, so the copy stops there.
var ErrDestinationSymlink = errors.New("a symlink in the destination, not followed")

// ErrNoRemoteHome reports a relative remote path on an executor that
// reports neither a home directory nor a working directory.
var ErrNoRemoteHome = errors.New("a relative remote path, but the executor reports no home or working directory")

// maxTreeDepth bounds how deep a listing goes (a symlink loop with
// FollowLinks, or an executor describing an endless tree).
const maxTreeDepth = 4096

// TransferOptions shape a transfer.
type TransferOptions struct {
	// Recursive copies a directory tree; without it a directory is an
	// error.
	Recursive bool
	// FollowLinks copies what each symlink of a tree leads to instead of
	// the link (cp -L). A link leading nowhere is then an error, and so is
	// a loop.
	FollowLinks bool
	// Progress, if set, is called on the transferring goroutine for every
	// file: first with FileBytes 0, then after each chunk that passed,
	// and last with Done set (also when the copy failed). Keep it quick.
	Progress func(Progress)
	// Skipped, if set, is called for each entry of a tree that is neither
	// a regular file, a directory nor a symlink (and so is not copied), in
	// the order of the walk, with its source path and type bits.
	Skipped func(path string, mode fs.FileMode)
	// Verify makes CopyWithin compare fs/hash of every regular file it
	// copied with its source's. (fs/copy moves the bytes on the executor
	// without the client; transfers through the client are always
	// checked.)
	Verify bool
	// Digest is the algorithm of the end-to-end check:
	// protocol.DigestXXH3 when empty (what passes is already authenticated
	// by the Noise channel; the check catches lost, misplaced or torn
	// blocks and storage faults, at a twelfth of sha256's CPU), or
	// protocol.DigestSHA256.
	Digest string
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
	// Files were copied and checked, Dirs made, Links (symlinks) made,
	// Bytes passed through the client. CopyWithin counts Files only with
	// Verify, the rest never.
	Files, Dirs, Links int
	Bytes              int64
	// Skipped lists the source paths left out (see TransferOptions.Skipped).
	Skipped []string
}

// Upload copies the local file or tree localPath to remotePath on the
// executor. Each file is checked against the executor's digest of what
// landed; one that fails the check is removed.
func Upload(ctx context.Context, files *Files, localPath, remotePath string, opts TransferOptions) (TransferResult, error) {
	t := &transfer{ctx: ctx, opts: opts}
	files = files.withDigest(t.digest())
	dstPath, err := remoteAbs(ctx, files, remotePath)
	if err != nil {
		return t.res, err
	}
	fi, err := os.Stat(localPath)
	if err != nil {
		return t.res, err
	}
	if fi.IsDir() && !opts.Recursive {
		return t.res, fmt.Errorf("%s is a directory (use -r)", localPath)
	}
	dst, err := t.remoteDest(files, dstPath, filepath.Base(localPath))
	if err != nil {
		return t.res, err
	}
	if err := t.walk(localSource{}, localPath, dst.top, 0, nil); err != nil {
		return t.res, err
	}
	return t.run(localSource{}, nil, dst)
}

// Download copies the file or tree remotePath on the executor to
// localPath here. Each file is written to a temporary file beside its
// destination and renamed into place only once its digest matches the
// executor's of what it read.
func Download(ctx context.Context, files *Files, remotePath, localPath string, opts TransferOptions) (TransferResult, error) {
	t := &transfer{ctx: ctx, opts: opts, dirModes: true}
	files = files.withDigest(t.digest())
	srcPath, err := remoteAbs(ctx, files, remotePath)
	if err != nil {
		return t.res, err
	}
	src := remoteSource{t: t, f: files}
	if _, err := t.sourceInfo(src, srcPath); err != nil {
		return t.res, err
	}
	dst, err := t.localDest(localPath, path.Base(srcPath))
	if err != nil {
		return t.res, err
	}
	defer dst.close()
	if err := t.walk(src, srcPath, dst.top, 0, nil); err != nil {
		return t.res, err
	}
	return t.run(src, files, dst)
}

// CopyBetween copies the file or tree srcPath on one executor to dstPath
// on another; each file streams through the client and both executors'
// digests (of what one read and the other wrote) must equal what passed;
// a copy that fails the check is removed. When src and dst are one
// connection with the same sandbox policy, it is CopyWithin.
func CopyBetween(ctx context.Context, src *Files, srcPath string, dst *Files, dstPath string, opts TransferOptions) (TransferResult, error) {
	if src == dst || src.r == dst.r && reflect.DeepEqual(src.Sandbox, dst.Sandbox) {
		return CopyWithin(ctx, src, srcPath, dstPath, opts)
	}
	t := &transfer{ctx: ctx, opts: opts}
	return t.between(src.withDigest(t.digest()), srcPath, dst.withDigest(t.digest()), dstPath)
}

func (t *transfer) between(src *Files, srcPath string, dst *Files, dstPath string) (TransferResult, error) {
	var err error
	if srcPath, err = remoteAbs(t.ctx, src, srcPath); err != nil {
		return t.res, err
	}
	if dstPath, err = remoteAbs(t.ctx, dst, dstPath); err != nil {
		return t.res, err
	}
	from := remoteSource{t: t, f: src}
	if _, err := t.sourceInfo(from, srcPath); err != nil {
		return t.res, err
	}
	to, err := t.remoteDest(dst, dstPath, path.Base(srcPath))
	if err != nil {
		return t.res, err
	}
	if err := t.walk(from, srcPath, to.top, 0, nil); err != nil {
		return t.res, err
	}
	return t.run(from, src, to)
}

// CopyWithin copies the file or tree srcPath to dstPath on one executor,
// which copies by itself (fs/copy: modes kept, symlinks copied as
// symlinks); nothing passes through the client, so there is no Progress.
// With opts.Verify every regular file copied is then compared, by
// fs/hash, with its source. With opts.FollowLinks, which fs/copy cannot
// do, the files stream through the client as with CopyBetween.
func CopyWithin(ctx context.Context, files *Files, srcPath, dstPath string, opts TransferOptions) (TransferResult, error) {
	t := &transfer{ctx: ctx, opts: opts}
	files = files.withDigest(t.digest())
	if opts.FollowLinks {
		return t.between(files, srcPath, files, dstPath)
	}
	var err error
	if srcPath, err = remoteAbs(ctx, files, srcPath); err != nil {
		return t.res, err
	}
	if dstPath, err = remoteAbs(ctx, files, dstPath); err != nil {
		return t.res, err
	}
	info, err := t.sourceInfo(remoteSource{t: t, f: files}, srcPath)
	if err != nil {
		return t.res, err
	}
	dst, err := t.remoteDest(files, dstPath, path.Base(srcPath))
	if err != nil {
		return t.res, err
	}
	return t.within(files, srcPath, dst, info)
}

// remoteAbs resolves a relative remote path ("x", "~", "~/x") against the
// executor user's home directory, or its working directory when it
// reports no home: what scp does. Absolute paths, file: URIs and foreign
// spellings (left to the executor's path mappings) pass as they are.
func remoteAbs(ctx context.Context, files *Files, p string) (string, error) {
	rel, ok := strings.CutPrefix(p, "~")
	switch {
	case ok && (rel == "" || rel[0] == '/'):
		rel = strings.TrimLeft(rel, "/")
	case ok, strings.HasPrefix(p, "/"), strings.HasPrefix(p, `\`), strings.HasPrefix(p, "file:"),
		len(p) >= 2 && p[1] == ':' && (p[0]|0x20 >= 'a' && p[0]|0x20 <= 'z'):
		return p, nil // absolute, a URI, a Windows spelling, or ~user (not resolved)
	default:
		rel = p
	}
	info, err := files.r.Info(ctx)
	if err != nil {
		return "", err
	}
	base := uriPath(info.UserHomeDir)
	if base == "" {
		base = uriPath(info.Cwd)
	}
	if !strings.HasPrefix(base, "/") {
		return "", fmt.Errorf("%s: %w", p, ErrNoRemoteHome)
	}
	// Join keeps a trailing "/", which says "a directory" to the
	// destination rule.
	out := path.Join(base, rel)
	if strings.HasSuffix(rel, "/") {
		out += "/"
	}
	return out, nil
}

// uriPath is the path a file: URI names (executors since codex 0.171's
// wire shapes send URIs; older ones sent plain paths, kept as they are).
func uriPath(s string) string {
	if !strings.HasPrefix(s, "file:") {
		return s
	}
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "file" || u.Host != "" && u.Host != "localhost" {
		return ""
	}
	return u.Path
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

	dirModes bool // plan directories with their modes
}

type entryKind int

const (
	entryDir entryKind = iota
	entryFile
	entryLink
	entrySkip
)

// entry is one step of a plan: from (its source path) to to (its path
// relative to the destination's directory, slash-separated).
type entry struct {
	kind     entryKind
	from, to string
	mode     fs.FileMode
	size     int64
	link     string // a symlink's text
	noFollow bool   // read from without following a final symlink
}

// source is where a plan is listed from: here or an executor.
type source interface {
	// lstat describes p itself, with a symlink's text.
	lstat(p string) (fs.FileInfo, string, error)
	// stat describes what p leads to; id names it, to tell a loop.
	stat(p string) (fs.FileInfo, string, error)
	// names lists the directory p.
	names(p string) ([]string, error)
	join(dir, name string) string
}

// sourceInfo describes the source operand, following it.
func (t *transfer) sourceInfo(src source, p string) (fs.FileInfo, error) {
	info, _, err := src.stat(p)
	if err != nil {
		return nil, err
	}
	if info.IsDir() && !t.opts.Recursive {
		return nil, fmt.Errorf("%s is a directory (use -r)", p)
	}
	return info, nil
}

// walk plans from (and, for a directory, everything in it) to to. The
// operand itself (depth 0) is followed when it is a symlink; a tree's
// symlinks only with FollowLinks. seen holds the ids of the directories
// above, followed through links.
func (t *transfer) walk(src source, from, to string, depth int, seen []string) error {
	if depth > maxTreeDepth {
		return fmt.Errorf("%s: the tree is more than %d levels deep", from, maxTreeDepth)
	}
	info, link, err := src.lstat(from)
	if err != nil {
		return err
	}
	follow := depth == 0 || t.opts.FollowLinks
	id := ""
	if info.Mode()&fs.ModeSymlink != 0 {
		if !follow {
			if link == "" {
				return fmt.Errorf("%s: the executor did not say where the symlink leads", from)
			}
			t.plan = append(t.plan, entry{kind: entryLink, from: from, to: to, link: link})
			return nil
		}
		if info, id, err = src.stat(from); err != nil {
			return fmt.Errorf("following the symlink %s: %w", from, err)
		}
	}
	switch {
	case info.IsDir():
		if !t.opts.Recursive {
			return fmt.Errorf("%s is a directory (use -r)", from)
		}
		if t.opts.FollowLinks {
			if id == "" {
				if _, id, err = src.stat(from); err != nil {
					return err
				}
			}
			for _, s := range seen {
				if s == id {
					return fmt.Errorf("%s: a symlink loop (it leads to a directory above it)", from)
				}
			}
			seen = append(seen, id)
		}
		t.plan = append(t.plan, entry{kind: entryDir, from: from, to: to, mode: info.Mode()})
		names, err := src.names(from)
		if err != nil {
			return err
		}
		for _, name := range names {
			if err := t.walk(src, src.join(from, name), path.Join(to, name), depth+1, seen); err != nil {
				return err
			}
		}
	case info.Mode().IsRegular():
		t.plan = append(t.plan, entry{kind: entryFile, from: from, to: to, mode: info.Mode(), size: info.Size(), noFollow: !follow})
	default:
		t.plan = append(t.plan, entry{kind: entrySkip, from: from, mode: info.Mode().Type()})
	}
	return nil
}

// localSource lists the local file system.
type localSource struct{}

func (localSource) lstat(p string) (fs.FileInfo, string, error) {
	info, err := os.Lstat(p)
	if err != nil || info.Mode()&fs.ModeSymlink == 0 {
		return info, "", err
	}
	link, err := os.Readlink(p)
	return info, link, err
}

func (localSource) stat(p string) (fs.FileInfo, string, error) {
	info, err := os.Stat(p)
	if err != nil {
		return nil, "", err
	}
	id, err := fileIdentity(p, info)
	if err != nil {
		return nil, "", err
	}
	return info, id, nil
}

func (localSource) names(p string) ([]string, error) {
	ents, err := os.ReadDir(p)
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	return names, err
}

func (localSource) join(dir, name string) string { return filepath.Join(dir, name) }

// remoteSource lists an executor's file system.
type remoteSource struct {
	t *transfer
	f *Files
}

func (s remoteSource) lstat(p string) (fs.FileInfo, string, error) {
	info, err := s.f.Stat(s.t.ctx, p)
	if err != nil {
		return nil, "", err
	}
	return info, info.Sys().(protocol.FsMetadata).SymlinkTarget, nil
}

// stat follows p: fs/getMetadata describes a symlink itself, so p is
// resolved first; the resolved path is its id.
func (s remoteSource) stat(p string) (fs.FileInfo, string, error) {
	real, err := s.f.Canonicalize(s.t.ctx, p)
	if err != nil {
		return nil, "", err
	}
	info, err := s.f.Stat(s.t.ctx, real)
	return info, real, err
}

func (s remoteSource) names(p string) ([]string, error) {
	ents, err := s.f.ReadDir(s.t.ctx, p)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(ents))
	for i, e := range ents {
		n := e.Name()
		if n == "" || n == "." || n == ".." || strings.ContainsAny(n, "/\x00") {
			return nil, fmt.Errorf("%s: %w: %q", p, ErrUnsafeName, n)
		}
		names[i] = n
	}
	return names, nil
}

func (remoteSource) join(dir, name string) string { return path.Join(dir, name) }

// dest is where a plan is written: entries' paths are relative to its
// directory, and nothing below that directory is followed.
type dest interface {
	mkdir(to string, mode fs.FileMode) error
	symlink(to, target string) error
	create(to string, perm fs.FileMode) (sink, error)
	close()
}

// sink takes one file's bytes.
type sink interface {
	io.Writer
	// abort drops an unfinished write.
	abort()
	// digestAlg is the algorithm of the executor's digest finish returns
	// ("" when the bytes are written here).
	digestAlg() string
	// finish ends the write: the executor's digest of what it wrote, or
	// ok false when the bytes were written here.
	finish() (sum string, size int64, ok bool, err error)
	// commit puts a checked file in place (a remote one already is).
	commit() error
	// discard drops a finished file that failed its check.
	discard()
}

// destName applies cp's rule: an existing directory (or a symlink to
// one), or a name ending in "/", receives the source under its own name.
func destName(dst string, isDir bool, base string) (dir, name string, err error) {
	if isDir || strings.HasSuffix(dst, "/") {
		dst = path.Join(dst, base)
	}
	dst = path.Clean(dst)
	dir, name = path.Split(dst)
	if name == "" || name == "." || name == ".." {
		return "", "", fmt.Errorf("%s: not a name to copy to", dst)
	}
	if dir == "" {
		dir = "."
	}
	return path.Clean(dir), name, nil
}

// remoteDest prepares dstPath on an executor: the destination rule, its
// parents made (as the user's path says), and that directory resolved
// once, so everything below it is written with noFollow.
func (t *transfer) remoteDest(files *Files, dstPath, base string) (*remoteDst, error) {
	isDir := false
	if info, err := files.Stat(t.ctx, dstPath); err == nil {
		isDir = info.IsDir()
		if info.Mode()&fs.ModeSymlink != 0 {
			if real, err := files.Canonicalize(t.ctx, dstPath); err == nil {
				ri, err := files.Stat(t.ctx, real)
				isDir = err == nil && ri.IsDir()
			}
		}
	}
	dir, name, err := destName(dstPath, isDir, base)
	if err != nil {
		return nil, err
	}
	t.res.Destination = path.Join(dir, name)
	if err := files.MkdirAll(t.ctx, dir); err != nil {
		return nil, err
	}
	real, err := files.Canonicalize(t.ctx, dir)
	if err != nil {
		return nil, err
	}
	return &remoteDst{t: t, f: files, dir: real, top: name}, nil
}

type remoteDst struct {
	t   *transfer
	f   *Files
	dir string // resolved: nothing below it is followed
	top string
}

func (d *remoteDst) full(to string) string { return path.Join(d.dir, to) }

func (d *remoteDst) close() {}

func (d *remoteDst) mkdir(to string, perm fs.FileMode) error {
	name := d.full(to)
	// The source's mode, as files keep theirs, with the owner's rwx so
	// the copy can fill it (a read-only directory arrives owner-writable;
	// an executor from before directory modes ignores it: 0755).
	mode := uint32(perm.Perm() | 0o700)
	return d.f.call(d.t.ctx, true, protocol.MethodFsCreateDirectory, name, protocol.FsCreateDirectoryParams{Path: name, Sandbox: d.f.Sandbox, NoFollow: true, Mode: &mode}, nil)
}

func (d *remoteDst) symlink(to, target string) error {
	name := d.full(to)
	return d.f.call(d.t.ctx, true, protocol.MethodFsCreateSymlink, name, protocol.FsCreateSymlinkParams{Path: name, Target: target, Sandbox: d.f.Sandbox, NoFollow: true}, nil)
}

func (d *remoteDst) create(to string, perm fs.FileMode) (sink, error) {
	f, name := d.f, d.full(to)
	id := f.handleID()
	mode := uint32(perm.Perm())
	var res protocol.FsHandleResult
	if err := f.call(d.t.ctx, false, protocol.MethodFsCreate, name, protocol.FsCreateParams{HandleID: id, Path: name, Mode: &mode, Sandbox: f.Sandbox, NoFollow: true, Digest: f.Digest}, &res); err != nil {
		return nil, err
	}
	return &remoteSink{t: d.t, w: &FileWriter{f: f, ctx: d.t.ctx, name: name, id: id, alg: handleDigest(res), slots: make(chan struct{}, window)}}, nil
}

type remoteSink struct {
	t *transfer
	w *FileWriter
}

func (s *remoteSink) Write(b []byte) (int, error) { return s.w.Write(b) }
func (s *remoteSink) abort()                      { s.w.Abort() }
func (s *remoteSink) commit() error               { return nil }
func (s *remoteSink) discard()                    { s.w.f.Remove(s.t.ctx, s.w.name, false) }
func (s *remoteSink) digestAlg() string           { return s.w.alg }
func (s *remoteSink) finish() (string, int64, bool, error) {
	if err := s.w.Close(); err != nil {
		return "", 0, false, fmt.Errorf("%s: %w", s.w.name, err)
	}
	sum, size, err := executorSum(s.t.ctx, s.w.f, s.w.name, s.w.alg, s.w.Sum)
	return sum, size, true, err
}

// localDest prepares localPath here: the destination rule, its parents
// made, and that directory opened once; everything below it is reached
// by descriptors, following no symlink.
func (t *transfer) localDest(localPath, base string) (*localDst, error) {
	fi, err := os.Stat(localPath)
	dir, name, err := destName(filepath.ToSlash(localPath), err == nil && fi.IsDir(), base)
	if err != nil {
		return nil, err
	}
	dir = filepath.FromSlash(dir)
	t.res.Destination = filepath.Join(dir, name)
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, err
	}
	return openLocalDst(dir, name)
}

func (d *localDst) pathErr(to string, err error) error {
	return &fs.PathError{Op: "copy to", Path: filepath.Join(d.dir, filepath.FromSlash(to)), Err: err}
}

// tempName is a fresh name beside base for a file or link renamed into
// place once complete.
func tempName(base string) string {
	var rnd [6]byte
	rand.Read(rnd[:])
	tmp := "." + base + ".outpost-" + hex.EncodeToString(rnd[:])
	if len(tmp) > 255 {
		tmp = ".outpost-" + hex.EncodeToString(rnd[:])
	}
	return tmp
}

// run carries out the plan in order.
func (t *transfer) run(src source, srcFiles *Files, dst dest) (TransferResult, error) {
	for _, e := range t.plan {
		if e.kind == entryFile {
			t.size += e.size
			t.count++
		}
	}
	for _, e := range t.plan {
		var err error
		switch e.kind {
		case entrySkip:
			t.res.Skipped = append(t.res.Skipped, e.from)
			if t.opts.Skipped != nil {
				t.opts.Skipped(e.from, e.mode)
			}
			continue
		case entryDir:
			if err = dst.mkdir(e.to, e.mode); err == nil {
				t.res.Dirs++
			}
		case entryLink:
			if err = dst.symlink(e.to, e.link); err != nil {
				err = fmt.Errorf("cannot copy the symlink %s (-> %s): %w", e.from, e.link, err)
			} else {
				t.res.Links++
			}
		case entryFile:
			if err = t.copyFile(srcFiles, dst, e); err == nil {
				t.res.Files++
			}
		}
		if err != nil {
			return t.res, err
		}
	}
	return t.res, nil
}

// copyFile passes one file from its source (here when srcFiles is nil)
// to dst. What passed is hashed; the source executor's digest of what it
// read and the destination executor's of what it wrote must both equal
// it, and a file read here must still have its listed size.
func (t *transfer) copyFile(srcFiles *Files, dst dest, e entry) error {
	var r io.Reader
	var srcSum func() (string, int64, bool)
	var srcAlg string
	if srcFiles == nil {
		in, err := openLocalSource(e.from, e.noFollow)
		if err != nil {
			return err
		}
		defer in.Close()
		r = in
	} else {
		in, err := srcFiles.Open(t.ctx, e.from)
		if err != nil {
			return err
		}
		defer in.Close() // after an error; a no-op after the explicit Close
		r, srcAlg, srcSum = in, in.alg, func() (string, int64, bool) {
			if err := in.Close(); err != nil {
				return "", 0, false
			}
			return in.Sum()
		}
	}
	w, err := dst.create(e.to, e.mode)
	if err != nil {
		return err
	}
	// What passes is hashed in the algorithm of each executor's digest:
	// the transfer's, or sha256 from an executor that does not know named
	// digests (then both, when the other side does).
	got, n, err := t.pass(w, r, e, srcAlg, w.digestAlg())
	if err != nil {
		w.abort()
		return fmt.Errorf("%s: %w", e.from, err)
	}
	dsum, dsize, remote, err := w.finish()
	if err != nil {
		return err
	}
	mismatch := func(side, alg, sum string, size int64) error {
		w.discard()
		return fmt.Errorf("%s: %w (%s %s, %d bytes; passed %s, %d bytes)", side, ErrChecksum, side, sum, size, got[alg], n)
	}
	if srcFiles != nil {
		sum, size, err := executorSum(t.ctx, srcFiles, e.from, srcAlg, srcSum)
		if err != nil {
			w.discard()
			return err
		}
		if sum != got[srcAlg] || size != n {
			return mismatch(e.from, srcAlg, sum, size)
		}
	} else if n != e.size {
		// A file that changed size while it was read is not the file
		// that was asked for.
		return mismatch(e.from, "", "", e.size)
	}
	if remote && (dsum != got[w.digestAlg()] || dsize != n) {
		return mismatch(t.destShown(dst, e), w.digestAlg(), dsum, dsize)
	}
	return w.commit()
}

func (t *transfer) destShown(dst dest, e entry) string {
	if d, ok := dst.(*remoteDst); ok {
		return d.full(e.to)
	}
	return e.to
}

// within has the executor copy src to the destination, then (with
// Verify) compares each regular file's digest with its source's. fs/copy
// writes with noFollow below the resolved destination directory.
func (t *transfer) within(files *Files, src string, dst *remoteDst, info fs.FileInfo) (TransferResult, error) {
	to := dst.full(dst.top)
	if err := files.call(t.ctx, false, protocol.MethodFsCopy, src, protocol.FsCopyParams{SourcePath: src, DestinationPath: to, Recursive: info.IsDir(), Sandbox: files.Sandbox, NoFollow: true}, nil); err != nil || !t.opts.Verify {
		return t.res, err
	}
	if err := t.walk(remoteSource{t: t, f: files}, src, dst.top, 0, nil); err != nil {
		return t.res, err
	}
	for _, e := range t.plan {
		if e.kind != entryFile {
			continue
		}
		want, wsize, err := files.Hash(t.ctx, e.from)
		if protocol.KindOf(err) == protocol.KindUnsupported {
			// An executor from before named digests: both sides are
			// its files, so its sha256 compares them as well.
			files = files.withDigest(protocol.DigestSHA256)
			want, wsize, err = files.Hash(t.ctx, e.from)
		}
		if err != nil {
			return t.res, err
		}
		sum, size, err := files.Hash(t.ctx, dst.full(e.to))
		if err != nil {
			return t.res, err
		}
		if sum != want || size != wsize {
			return t.res, fmt.Errorf("%s: %w (source %s, %d bytes; copy %s, %d bytes)", dst.full(e.to), ErrChecksum, want, wsize, sum, size)
		}
		t.res.Files++
	}
	return t.res, nil
}

// pass copies one file's bytes from r to w, hashing them and reporting
// progress; it returns the digest (hex) and count of what passed.
func (t *transfer) pass(w io.Writer, r io.Reader, e entry, algs ...string) (map[string]string, int64, error) {
	hashes := map[string]hash.Hash{}
	writers := []io.Writer{w}
	for _, alg := range algs {
		if alg == "" || hashes[alg] != nil {
			continue
		}
		h, ok := digest.New(alg)
		if !ok {
			return nil, 0, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "unknown digest %q (known: %s, %s)", alg, protocol.DigestXXH3, protocol.DigestSHA256)
		}
		hashes[alg] = h
		writers = append(writers, h)
	}
	p := &progressWriter{t: t, p: Progress{Path: e.from, FileSize: e.size, Bytes: t.res.Bytes, Size: t.size, Files: t.passed, FileCount: t.count}}
	p.report()
	// Whole blocks at a time: a FileReader hands over the blocks it
	// received (no copy), anything else is read up to a block per call
	// instead of io.Copy's 32 KiB.
	var n int64
	var err error
	mw := io.MultiWriter(append(writers, p)...)
	if fr, ok := r.(*FileReader); ok {
		n, err = fr.WriteTo(mw)
	} else {
		n, err = io.CopyBuffer(mw, struct{ io.Reader }{r}, make([]byte, min(blockSize, max(32<<10, e.size+1))))
	}
	t.passed++
	p.p.Files, p.p.Done = t.passed, true
	p.report()
	sums := map[string]string{}
	for alg, h := range hashes {
		sums[alg] = hex.EncodeToString(h.Sum(nil))
	}
	return sums, n, err
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

// digest is the algorithm of the transfer's end-to-end check.
func (t *transfer) digest() string { return cmp.Or(t.opts.Digest, protocol.DigestXXH3) }

// executorSum is the executor's digest of a file that passed through a
// handle: the one fs/close returned, or fs/hash's when the blocks did not
// go in order.
func executorSum(ctx context.Context, files *Files, name, alg string, sum func() (string, int64, bool)) (string, int64, error) {
	if s, size, ok := sum(); ok {
		return s, size, nil
	}
	return files.withDigest(alg).Hash(ctx, name)
}
