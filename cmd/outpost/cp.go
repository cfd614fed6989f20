package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/outpost-exec/outpost/client"
)

// cpOperand is one side of a copy: a local path, or a path on an
// executor (EXECUTOR:PATH through the relay, or :PATH on --target).
type cpOperand struct {
	remote   bool
	executor string
	path     string
}

// parseOperand: "ID:/p" and ":/p" are remote; anything whose part before
// the first ':' holds a '/' (or that has no ':') is local.
func parseOperand(s string) cpOperand {
	i := strings.IndexByte(s, ':')
	if i < 0 || strings.ContainsRune(s[:i], '/') {
		return cpOperand{path: s}
	}
	return cpOperand{remote: true, executor: s[:i], path: s[i+1:]}
}

func cmdCp(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("outpost cp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, `usage: outpost cp [flags] SRC DST

EXECUTOR:PATH is on executor EXECUTOR, reached through --relay (or
$OUTPOST_RELAY) with --token (or $OUTPOST_TOKEN); :PATH is on the --target
executor (or $OUTPOST_TARGET, the config file). One side or both may be
remote: within one executor it copies by itself; between two, files stream
through here. Every file is checked end to end with sha256.

`)
		fs.PrintDefaults()
	}
	recursive := fs.Bool("r", false, "copy directories recursively")
	target := fs.String("target", "", "executor URL for :PATH operands (default $OUTPOST_TARGET or the config file)")
	relayURL := fs.String("relay", os.Getenv("OUTPOST_RELAY"), "relay URL for EXECUTOR:PATH operands")
	token := fs.String("token", os.Getenv("OUTPOST_TOKEN"), "client token for the relay")
	mode := fs.String("sandbox", "", "judge the remote side by this sandbox mode (read-only, workspace-write, full-access)")
	quiet := fs.Bool("q", false, "no progress bar")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() != 2 {
		fs.Usage()
		return exitUsage
	}
	src, dst := parseOperand(fs.Arg(0)), parseOperand(fs.Arg(1))
	if !src.remote && !dst.remote {
		fmt.Fprintln(stderr, "outpost cp: SRC or DST must be EXECUTOR:PATH or :PATH (for two local paths, use cp)")
		return exitUsage
	}
	for _, o := range []cpOperand{src, dst} {
		if o.remote && o.path == "" {
			fmt.Fprintln(stderr, "outpost cp: a remote path is empty")
			return exitUsage
		}
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	var policy any
	if *mode != "" {
		policy = map[string]any{"mode": *mode}
	}
	// connect reaches the executor of a remote operand (one connection per
	// executor, shared when both operands are on the same one).
	conns := map[string]*client.Files{}
	var closers []io.Closer
	connect := func(o cpOperand) (*client.Files, int) {
		if f := conns[o.executor]; f != nil {
			return f, 0
		}
		url, opts := *target, client.Options{ClientName: "outpost-cp"}
		if o.executor != "" {
			if *relayURL == "" {
				fmt.Fprintf(stderr, "outpost cp: %s:PATH needs --relay (or $OUTPOST_RELAY)\n", o.executor)
				return nil, exitUsage
			}
			url, opts.Executor, opts.Token = *relayURL, o.executor, *token
		}
		if url == "" {
			url = os.Getenv("OUTPOST_TARGET")
		}
		if url == "" {
			url = configTarget()
		}
		if url == "" {
			fmt.Fprintln(stderr, "outpost cp: no executor: give --target (or $OUTPOST_TARGET) for :PATH, or --relay for EXECUTOR:PATH")
			return nil, exitUsage
		}
		env, err := client.Dial(ctx, url, opts)
		if err != nil {
			fmt.Fprintf(stderr, "outpost cp: cannot reach the executor: %v\n", err)
			return nil, exitTransport
		}
		f := env.Files(policy)
		conns[o.executor] = f
		closers = append(closers, env)
		return f, 0
	}
	defer func() {
		for _, c := range closers {
			c.Close()
		}
	}()
	c := &copier{ctx: ctx, recursive: *recursive, stderr: stderr, progress: !*quiet && isTerminal(os.Stderr)}
	var err error
	switch {
	case src.remote && dst.remote:
		from, code := connect(src)
		if code != 0 {
			return code
		}
		to, code := connect(dst)
		if code != 0 {
			return code
		}
		err = c.between(from, src.path, to, dst.path, src.executor == dst.executor)
	case src.remote:
		f, code := connect(src)
		if code != 0 {
			return code
		}
		c.files = f
		err = c.download(src.path, dst.path)
	default:
		f, code := connect(dst)
		if code != 0 {
			return code
		}
		c.files = f
		err = c.upload(src.path, dst.path)
	}
	if err != nil {
		fmt.Fprintln(stderr, "outpost cp:", err)
		return 1
	}
	return 0
}

// between copies from one executor to another (or within one, where the
// executor copies by itself with fs/copy). Across executors each file
// streams through this client and is checked by both executors' digests.
func (c *copier) between(from *client.Files, src string, to *client.Files, dst string, same bool) error {
	info, err := from.Stat(c.ctx, src)
	if err != nil {
		return err
	}
	if info.IsDir() && !c.recursive {
		return fmt.Errorf("%s is a directory (use -r)", src)
	}
	if di, err := to.Stat(c.ctx, dst); err == nil && di.IsDir() || strings.HasSuffix(dst, "/") {
		dst = path.Join(dst, path.Base(src))
	}
	if same {
		return from.Copy(c.ctx, src, dst, info.IsDir())
	}
	if !info.IsDir() {
		return c.stream(from, src, to, dst, info)
	}
	return fs.WalkDir(from.FS(c.ctx, src), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fromPath, toPath := path.Join(src, p), path.Join(dst, p)
		switch {
		case d.IsDir():
			return to.MkdirAll(c.ctx, toPath)
		case d.Type().IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			return c.stream(from, fromPath, to, toPath, info)
		default:
			fmt.Fprintf(c.stderr, "outpost cp: skipping %s (not a regular file or directory)\n", fromPath)
			return nil
		}
	})
}

// stream copies one file between executors; the source's digest (of what
// it sent) must equal the destination's (of what it wrote).
func (c *copier) stream(from *client.Files, src string, to *client.Files, dst string, info fs.FileInfo) error {
	r, err := from.Open(c.ctx, src)
	if err != nil {
		return err
	}
	defer r.Close()
	w, err := to.Create(c.ctx, dst, info.Mode().Perm())
	if err != nil {
		return err
	}
	h := sha256.New()
	bar := c.bar(path.Base(src), info.Size())
	n, err := io.Copy(io.MultiWriter(w, h, bar), r)
	bar.done()
	if err != nil {
		w.Abort()
		return fmt.Errorf("%s: %w", src, err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("%s: %w", dst, err)
	}
	if err := r.Close(); err != nil {
		return err
	}
	got := hex.EncodeToString(h.Sum(nil))
	for _, side := range []struct {
		f    *client.Files
		name string
		sum  func() (string, int64, bool)
	}{{from, src, r.Sum}, {to, dst, w.Sum}} {
		sum, size, ok := side.sum()
		if !ok {
			if sum, size, err = side.f.Hash(c.ctx, side.name); err != nil {
				return err
			}
		}
		if sum != got || size != n {
			return fmt.Errorf("%s: %w (%s, %d bytes; passed through %s, %d bytes)", side.name, ErrChecksum, sum, size, got, n)
		}
	}
	return nil
}

type copier struct {
	ctx       context.Context
	files     *client.Files
	recursive bool
	stderr    io.Writer
	progress  bool
}

// ErrChecksum reports a file whose digest differs after the transfer.
var ErrChecksum = errors.New("checksum mismatch after the transfer")

// upload copies a local file or tree to the executor.
func (c *copier) upload(src, dst string) error {
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	// Into an existing remote directory (or one named with a trailing /)
	// the source keeps its name, as with cp.
	if info, err := c.files.Stat(c.ctx, dst); err == nil && info.IsDir() || strings.HasSuffix(dst, "/") {
		dst = path.Join(dst, filepath.Base(src))
	}
	if !fi.IsDir() {
		return c.uploadFile(src, dst, fi)
	}
	if !c.recursive {
		return fmt.Errorf("%s is a directory (use -r)", src)
	}
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := path.Join(dst, filepath.ToSlash(rel))
		switch {
		case d.IsDir():
			return c.files.MkdirAll(c.ctx, to)
		case d.Type().IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			return c.uploadFile(p, to, info)
		default:
			fmt.Fprintf(c.stderr, "outpost cp: skipping %s (not a regular file or directory)\n", p)
			return nil
		}
	})
}

func (c *copier) uploadFile(src, dst string, fi os.FileInfo) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	w, err := c.files.Create(c.ctx, dst, fi.Mode().Perm())
	if err != nil {
		return err
	}
	h := sha256.New()
	bar := c.bar(filepath.Base(src), fi.Size())
	_, err = io.Copy(io.MultiWriter(w, h, bar), in)
	bar.done()
	if err != nil {
		w.Abort()
		return fmt.Errorf("%s: %w", src, err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("%s: %w", dst, err)
	}
	// The executor hashed the blocks as they landed; ask again only if
	// they did not arrive in order.
	sum, size, ok := w.Sum()
	if !ok {
		if sum, size, err = c.files.Hash(c.ctx, dst); err != nil {
			return err
		}
	}
	if want := hex.EncodeToString(h.Sum(nil)); sum != want || size != fi.Size() {
		c.files.Remove(c.ctx, dst, false)
		return fmt.Errorf("%s: %w (local %s, %d bytes; remote %s, %d bytes)", dst, ErrChecksum, want, fi.Size(), sum, size)
	}
	return nil
}

// download copies a remote file or tree here.
func (c *copier) download(src, dst string) error {
	info, err := c.files.Stat(c.ctx, src)
	if err != nil {
		return err
	}
	if fi, err := os.Stat(dst); err == nil && fi.IsDir() || strings.HasSuffix(dst, "/") {
		dst = filepath.Join(dst, path.Base(src))
	}
	if !info.IsDir() {
		return c.downloadFile(src, dst, info)
	}
	if !c.recursive {
		return fmt.Errorf("%s is a directory (use -r)", src)
	}
	return fs.WalkDir(c.files.FS(c.ctx, src), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		to := filepath.Join(dst, filepath.FromSlash(p))
		from := path.Join(src, p)
		switch {
		case d.IsDir():
			info, err := d.Info()
			if err != nil {
				return err
			}
			return os.MkdirAll(to, info.Mode().Perm()|0o700)
		case d.Type().IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			return c.downloadFile(from, to, info)
		default:
			fmt.Fprintf(c.stderr, "outpost cp: skipping %s (not a regular file or directory)\n", from)
			return nil
		}
	})
}

func (c *copier) downloadFile(src, dst string, info fs.FileInfo) error {
	r, err := c.files.Open(c.ctx, src)
	if err != nil {
		return err
	}
	defer r.Close() // after an error; a no-op after the explicit Close
	// A temporary file beside the target, renamed into place once the
	// digest matches: an interrupted copy leaves the target untouched.
	var rnd [6]byte
	rand.Read(rnd[:])
	tmp := filepath.Join(filepath.Dir(dst), "."+filepath.Base(dst)+".outpost-"+hex.EncodeToString(rnd[:]))
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, info.Mode().Perm())
	if err != nil {
		return err
	}
	defer os.Remove(tmp) // after a successful rename, a no-op
	h := sha256.New()
	bar := c.bar(path.Base(src), info.Size())
	n, err := io.Copy(io.MultiWriter(out, h, bar), r)
	bar.done()
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	if err := r.Close(); err != nil {
		return err
	}
	sum, size, ok := r.Sum()
	if !ok {
		if sum, size, err = c.files.Hash(c.ctx, src); err != nil {
			return err
		}
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sum || n != size {
		return fmt.Errorf("%s: %w (remote %s, %d bytes; received %s, %d bytes)", src, ErrChecksum, sum, size, got, n)
	}
	os.Chmod(tmp, info.Mode().Perm())
	return os.Rename(tmp, dst)
}

// progressBar draws one line on stderr for transfers of 1 MiB or more.
type progressBar struct {
	c      *copier
	name   string
	total  int64
	n      atomic.Int64
	start  time.Time
	last   time.Time
	active bool
}

func (c *copier) bar(name string, total int64) *progressBar {
	return &progressBar{c: c, name: name, total: total, start: time.Now(), active: c.progress && total >= 1<<20}
}

func (b *progressBar) Write(p []byte) (int, error) {
	n := b.n.Add(int64(len(p)))
	if b.active && time.Since(b.last) >= 200*time.Millisecond {
		b.last = time.Now()
		b.draw(n)
	}
	return len(p), nil
}

func (b *progressBar) draw(n int64) {
	pct := 100.0
	if b.total > 0 {
		pct = float64(n) * 100 / float64(b.total)
	}
	rate := float64(n) / time.Since(b.start).Seconds() / (1 << 20)
	const width = 30
	fill := int(pct / 100 * width)
	fmt.Fprintf(b.c.stderr, "\r%-24.24s [%s%s] %5.1f%% %8.1f MiB/s", b.name, strings.Repeat("=", fill), strings.Repeat(" ", width-fill), pct, rate)
}

func (b *progressBar) done() {
	if b.active {
		b.draw(b.n.Load())
		fmt.Fprintln(b.c.stderr)
	}
}
