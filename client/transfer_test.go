package client

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/outpost-exec/outpost/executor"
	"github.com/outpost-exec/outpost/protocol"
)

// makeTree writes a tree with an executable, a nested private file, a
// 3 MiB blob, an empty file, an empty directory and a symlink; it returns
// the regular files' modes by path relative to dir.
func makeTree(t *testing.T, dir string) map[string]os.FileMode {
	t.Helper()
	os.MkdirAll(filepath.Join(dir, "nested", "empty"), 0o755)
	files := map[string]struct {
		data []byte
		mode os.FileMode
	}{
		"run.sh":      {[]byte("#!/bin/sh\necho hi\n"), 0o755},
		"nested/note": {[]byte("note"), 0o600},
		"blob":        {randomData(t, 3<<20+7), 0o644},
		"zero":        {nil, 0o640},
	}
	modes := map[string]os.FileMode{}
	for name, f := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, f.data, f.mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, f.mode) // past the umask
		modes[name] = f.mode
	}
	if err := os.Symlink("run.sh", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	return modes
}

// sameTree checks that every regular file of modes has the same bytes
// and mode under dst as under src.
func sameTree(t *testing.T, src, dst string, modes map[string]os.FileMode) {
	t.Helper()
	for name, mode := range modes {
		a, _ := os.ReadFile(filepath.Join(src, name))
		b, err := os.ReadFile(filepath.Join(dst, name))
		if err != nil || !bytes.Equal(a, b) {
			t.Fatalf("%s: %d bytes of %d (%v)", name, len(b), len(a), err)
		}
		if fi, _ := os.Stat(filepath.Join(dst, name)); fi.Mode().Perm() != mode {
			t.Fatalf("%s: mode %v, want %v", name, fi.Mode().Perm(), mode)
		}
	}
}

// leftovers lists temporary files a transfer left in dir.
func leftovers(t *testing.T, dir string) []string {
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), ".outpost-") {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// progressLog records Progress reports and checks them as a whole.
type progressLog struct{ reports []Progress }

func (l *progressLog) add(p Progress) { l.reports = append(l.reports, p) }

// check: every file is reported first with 0 bytes and last with Done
// and all its bytes; the totals never change, the counts never go back,
// and the last report has every byte and file of the transfer.
func (l *progressLog) check(t *testing.T, files int, size int64) {
	t.Helper()
	if len(l.reports) == 0 {
		t.Fatal("no progress reports")
	}
	var cur string
	var last Progress
	done := 0
	for i, p := range l.reports {
		if p.Size != size || p.FileCount != files {
			t.Fatalf("report %d: totals %d bytes, %d files; want %d, %d", i, p.Size, p.FileCount, size, files)
		}
		if i > 0 && (p.Bytes < last.Bytes || p.Files < last.Files) {
			t.Fatalf("report %d went back: %+v after %+v", i, p, last)
		}
		switch {
		case cur == "":
			if p.FileBytes != 0 || p.Done {
				t.Fatalf("report %d: %s begins with %+v", i, p.Path, p)
			}
			cur = p.Path
		case p.Path != cur:
			t.Fatalf("report %d: %s before %s was done", i, p.Path, cur)
		case p.Done:
			if p.FileBytes != p.FileSize {
				t.Fatalf("%s done at %d of %d bytes", p.Path, p.FileBytes, p.FileSize)
			}
			done++
			cur = ""
		}
		last = p
	}
	if cur != "" || done != files || !last.Done || last.Bytes != size || last.Files != files {
		t.Fatalf("%d of %d files done; last report %+v", done, files, last)
	}
}

func treeSize(modes map[string]os.FileMode, dir string) int64 {
	var n int64
	for name := range modes {
		fi, _ := os.Stat(filepath.Join(dir, name))
		n += fi.Size()
	}
	return n
}

func TestTransferUploadAndDownloadTreesAndFilesWithModesAndProgress(t *testing.T) {
	env := localFiles(t, nil)
	f := env.Files(nil)
	ctx := ctxT(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	modes := makeTree(t, src)
	size := treeSize(modes, src)
	remote := filepath.Join(dir, "remote")
	os.Mkdir(remote, 0o755)

	if _, err := Upload(ctx, f, src, remote, TransferOptions{}); err == nil || !strings.Contains(err.Error(), "is a directory (use -r)") {
		t.Fatalf("a tree without Recursive: %v", err)
	}
	// Into an existing directory the tree keeps its name, as with cp.
	var up progressLog
	var skipped []string
	res, err := Upload(ctx, f, src, remote, TransferOptions{Recursive: true, Progress: up.add, Skipped: func(p string, m fs.FileMode) {
		skipped = append(skipped, p)
	}})
	if err != nil {
		t.Fatal(err)
	}
	tree := filepath.Join(remote, "src")
	if res.Destination != tree || res.Files != 4 || res.Dirs != 3 || res.Links != 1 || res.Bytes != size || len(res.Skipped) != 0 || len(skipped) != 0 {
		t.Fatalf("upload result %+v, skipped %v", res, skipped)
	}
	sameTree(t, src, tree, modes)
	if fi, err := os.Stat(filepath.Join(tree, "nested", "empty")); err != nil || !fi.IsDir() {
		t.Fatalf("the empty directory: %v", err)
	}
	if l, err := os.Readlink(filepath.Join(tree, "link")); err != nil || l != "run.sh" {
		t.Fatalf("the symlink: %q %v", l, err)
	}
	up.check(t, 4, size)

	var down progressLog
	back := filepath.Join(dir, "back")
	res, err = Download(ctx, f, tree, back, TransferOptions{Recursive: true, Progress: down.add})
	if err != nil {
		t.Fatal(err)
	}
	if res.Destination != back || res.Files != 4 || res.Links != 1 || res.Bytes != size {
		t.Fatalf("download result %+v", res)
	}
	if l, err := os.Readlink(filepath.Join(back, "link")); err != nil || l != "run.sh" {
		t.Fatalf("the symlink: %q %v", l, err)
	}
	sameTree(t, src, back, modes)
	down.check(t, 4, size)
	if l := leftovers(t, dir); len(l) != 0 {
		t.Fatalf("temporary files left: %v", l)
	}

	// Single files, both ways; a name ending in / is a directory.
	var one progressLog
	res, err = Upload(ctx, f, filepath.Join(src, "run.sh"), remote+"/", TransferOptions{Progress: one.add})
	if err != nil || res.Destination != filepath.Join(remote, "run.sh") || res.Files != 1 {
		t.Fatalf("upload a file: %+v %v", res, err)
	}
	one.check(t, 1, int64(len("#!/bin/sh\necho hi\n")))
	res, err = Download(ctx, f, filepath.Join(tree, "blob"), filepath.Join(dir, "blob.copy"), TransferOptions{})
	if err != nil || res.Destination != filepath.Join(dir, "blob.copy") {
		t.Fatalf("download a file: %+v %v", res, err)
	}
	sameTree(t, src, remote, map[string]os.FileMode{"run.sh": 0o755})
	a, _ := os.ReadFile(filepath.Join(src, "blob"))
	if b, _ := os.ReadFile(filepath.Join(dir, "blob.copy")); !bytes.Equal(a, b) {
		t.Fatal("the downloaded blob differs")
	}
	if _, err := Download(ctx, f, filepath.Join(remote, "missing"), dir, TransferOptions{}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a missing file: %v", err)
	}
}

func TestTransferBetweenExecutorsAndWithinOne(t *testing.T) {
	a := localFiles(t, nil)
	ex := startExecutor(t, nil)
	b := dial(t, ex.url, Config{}) // a second executor, over TCP
	ctx := ctxT(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	modes := makeTree(t, src)
	size := treeSize(modes, src)

	var log progressLog
	var skipped []string
	res, err := CopyBetween(ctx, a.Files(nil), src, b.Files(nil), filepath.Join(dir, "via-client"), TransferOptions{
		Recursive: true, Progress: log.add, Skipped: func(p string, _ fs.FileMode) { skipped = append(skipped, p) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Files != 4 || res.Links != 1 || res.Bytes != size || len(skipped) != 0 {
		t.Fatalf("result %+v, skipped %v", res, skipped)
	}
	if l, err := os.Readlink(filepath.Join(dir, "via-client", "link")); err != nil || l != "run.sh" {
		t.Fatalf("the symlink: %q %v", l, err)
	}
	sameTree(t, src, filepath.Join(dir, "via-client"), modes)
	log.check(t, 4, size)
	res, err = CopyBetween(ctx, b.Files(nil), filepath.Join(src, "blob"), a.Files(nil), dir+"/", TransferOptions{})
	if err != nil || res.Destination != filepath.Join(dir, "blob") || res.Files != 1 {
		t.Fatalf("one file: %+v %v", res, err)
	}
	sameTree(t, src, dir, map[string]os.FileMode{"blob": 0o644})

	// One connection (two views of it with the same policy): the executor
	// copies by itself, a symlink as a symlink, nothing through here.
	var none progressLog
	if _, err := CopyBetween(ctx, a.Files(nil), src, a.Files(nil), filepath.Join(dir, "within"), TransferOptions{Recursive: true, Progress: none.add}); err != nil {
		t.Fatal(err)
	}
	if l, err := os.Readlink(filepath.Join(dir, "within", "link")); err != nil || l != "run.sh" || len(none.reports) != 0 {
		t.Fatalf("not fs/copy: link %q %v, %d progress reports", l, err, len(none.reports))
	}
	sameTree(t, src, filepath.Join(dir, "within"), modes)
	res, err = CopyWithin(ctx, b.Files(nil), src, filepath.Join(dir, "checked"), TransferOptions{Recursive: true, Verify: true})
	if err != nil || res.Files != 4 {
		t.Fatalf("within, verified: %+v %v", res, err)
	}
	if _, err := CopyWithin(ctx, b.Files(nil), src, filepath.Join(dir, "x"), TransferOptions{}); err == nil || !strings.Contains(err.Error(), "is a directory (use -r)") {
		t.Fatalf("a tree without Recursive: %v", err)
	}
}

// corruptor is a TCP proxy in front of a ws:// executor (codex's JSON
// protocol, where a block travels as base64 in a text frame) that changes
// one base64 character in the first frame, in one direction, holding
// "QUFBQUFB" (what a run of 'A's encodes to): real corruption in flight,
// past the transport, that only the end-to-end digests can see.
type corruptor struct {
	ln       net.Listener
	target   string
	toServer bool // what the client sends; else what it receives
	hit      atomic.Bool
	// from, when set, is replaced by to (as long) everywhere in the
	// frames instead: a hostile executor's answer.
	from, to []byte

	mu    sync.Mutex
	conns []net.Conn
}

func startCorruptor(t *testing.T, target string, toServer bool) *corruptor {
	return startRewriter(t, target, toServer, nil, nil)
}

// startRewriter is a corruptor that replaces from with to in every frame
// one way.
func startRewriter(t *testing.T, target string, toServer bool, from, to []byte) *corruptor {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &corruptor{ln: ln, target: strings.TrimPrefix(target, "ws://"), toServer: toServer, from: from, to: to}
	t.Cleanup(func() {
		ln.Close()
		c.mu.Lock()
		for _, conn := range c.conns {
			conn.Close()
		}
		c.mu.Unlock()
	})
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", c.target)
			if err != nil {
				in.Close()
				continue
			}
			c.mu.Lock()
			c.conns = append(c.conns, in, out)
			c.mu.Unlock()
			go c.pipe(out, in, c.toServer)
			go c.pipe(in, out, !c.toServer)
		}
	}()
	return c
}

func (c *corruptor) url() string { return "ws://" + c.ln.Addr().String() }

// pipe forwards the HTTP upgrade, then frame by frame (RFC 6455),
// unmasking a masked payload to look into it.
func (c *corruptor) pipe(dst, src net.Conn, corrupt bool) {
	defer dst.Close()
	defer src.Close()
	r := bufio.NewReader(src)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		if _, err := io.WriteString(dst, line); err != nil {
			return
		}
		if line == "\r\n" {
			break
		}
	}
	for {
		hdr := make([]byte, 2, 14)
		if _, err := io.ReadFull(r, hdr); err != nil {
			return
		}
		n := uint64(hdr[1] & 0x7f)
		switch n {
		case 126:
			hdr = append(hdr, 0, 0)
			if _, err := io.ReadFull(r, hdr[2:]); err != nil {
				return
			}
			n = uint64(binary.BigEndian.Uint16(hdr[2:]))
		case 127:
			hdr = append(hdr, make([]byte, 8)...)
			if _, err := io.ReadFull(r, hdr[2:]); err != nil {
				return
			}
			n = binary.BigEndian.Uint64(hdr[2:])
		}
		var key []byte
		if hdr[1]&0x80 != 0 {
			at := len(hdr)
			hdr = append(hdr, 0, 0, 0, 0)
			if _, err := io.ReadFull(r, hdr[at:]); err != nil {
				return
			}
			key = hdr[at:]
		}
		payload := make([]byte, n)
		if _, err := io.ReadFull(r, payload); err != nil {
			return
		}
		if corrupt && c.from != nil && hdr[0]&0x0f <= 2 {
			mask(payload, key)
			if bytes.Contains(payload, c.from) {
				payload = bytes.ReplaceAll(payload, c.from, c.to)
				c.hit.Store(true)
			}
			mask(payload, key)
		} else if corrupt && hdr[0]&0x0f <= 2 && !c.hit.Load() { // a data frame
			mask(payload, key)
			if i := bytes.Index(payload, []byte("QUFBQUFB")); i >= 0 && c.hit.CompareAndSwap(false, true) {
				payload[i+1] = 'k' // "QkFB": "BAA" where "AAA" was
			}
			mask(payload, key)
		}
		if _, err := dst.Write(append(hdr, payload...)); err != nil {
			return
		}
	}
}

func mask(b, key []byte) {
	if key == nil {
		return
	}
	for i := range b {
		b[i] ^= key[i%4]
	}
}

func wsExecutor(t *testing.T) string {
	srv, err := executor.NewServer(executor.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	l, err := srv.ListenWS("127.0.0.1:0", executor.WSConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l.URL()
}

func TestTransferDetectsCorruptionInFlight(t *testing.T) {
	ws := wsExecutor(t)
	ctx := ctxT(t)
	dir := t.TempDir()
	data := bytes.Repeat([]byte("A"), 2<<20+5)
	remote := filepath.Join(dir, "remote")
	os.WriteFile(remote, data, 0o644)

	// A download: the bytes received differ from what the executor read
	// and hashed, so the file is never renamed over the old one.
	c := startCorruptor(t, ws, false)
	f := dial(t, c.url(), Config{}).Files(nil)
	local := filepath.Join(dir, "local")
	os.WriteFile(local, []byte("old"), 0o644)
	_, err := Download(ctx, f, remote, local, TransferOptions{})
	if !c.hit.Load() {
		t.Fatal("nothing was corrupted")
	}
	if !errors.Is(err, ErrChecksum) || !strings.Contains(err.Error(), remote) {
		t.Fatalf("download: %v", err)
	}
	if b, _ := os.ReadFile(local); string(b) != "old" {
		t.Fatalf("a corrupt download replaced the file (%d bytes)", len(b))
	}
	if l := leftovers(t, dir); len(l) != 0 {
		t.Fatalf("temporary files left: %v", l)
	}

	// An upload: the executor's digest of what landed differs from what
	// was sent; the corrupt file is removed.
	c = startCorruptor(t, ws, true)
	f = dial(t, c.url(), Config{}).Files(nil)
	up := filepath.Join(dir, "uploaded")
	_, err = Upload(ctx, f, remote, up, TransferOptions{})
	if !c.hit.Load() || !errors.Is(err, ErrChecksum) || !strings.Contains(err.Error(), up) {
		t.Fatalf("upload (corrupted %v): %v", c.hit.Load(), err)
	}
	if _, err := os.Stat(up); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the corrupt upload stayed: %v", err)
	}

	// Between executors: the destination's digest differs from what
	// passed (the source's matches); the corrupt copy is removed.
	c = startCorruptor(t, ws, true)
	to := dial(t, c.url(), Config{}).Files(nil)
	from := localFiles(t, nil).Files(nil)
	between := filepath.Join(dir, "between")
	_, err = CopyBetween(ctx, from, remote, to, between, TransferOptions{})
	if !c.hit.Load() || !errors.Is(err, ErrChecksum) || !strings.HasPrefix(err.Error(), between+":") {
		t.Fatalf("between (corrupted %v): %v", c.hit.Load(), err)
	}
	if _, err := os.Stat(between); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the corrupt copy stayed: %v", err)
	}

	// Without corruption the same paths go through.
	f = dial(t, ws, Config{}).Files(nil)
	if _, err := Download(ctx, f, remote, local, TransferOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := Upload(ctx, f, local, up, TransferOptions{}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(up); !bytes.Equal(b, data) {
		t.Fatal("the round trip differs")
	}
}

// A transfer checks with the digest it is given: XXH3-128 by default,
// sha256 on request, the executor computing the same on its side; a
// name neither knows fails the copy and leaves nothing behind.
func TestTransferDigestChoices(t *testing.T) {
	ctx := ctxT(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	data := make([]byte, 3<<20+1)
	for i := range data {
		data[i] = byte(i * 7)
	}
	os.WriteFile(src, data, 0o644)
	f := dial(t, wsExecutor(t), Config{}).Files(nil)
	for _, alg := range []string{"", protocol.DigestXXH3, protocol.DigestSHA256} {
		up, down := filepath.Join(dir, "up"+alg), filepath.Join(dir, "down"+alg)
		if _, err := Upload(ctx, f, src, up, TransferOptions{Digest: alg}); err != nil {
			t.Fatalf("upload %q: %v", alg, err)
		}
		if _, err := Download(ctx, f, up, down, TransferOptions{Digest: alg}); err != nil {
			t.Fatalf("download %q: %v", alg, err)
		}
		if b, _ := os.ReadFile(down); !bytes.Equal(b, data) {
			t.Fatalf("%q: the copy differs", alg)
		}
	}
	for _, run := range []func() error{
		func() error {
			_, err := Upload(ctx, f, src, filepath.Join(dir, "bad-up"), TransferOptions{Digest: "md5"})
			return err
		},
		func() error {
			_, err := Download(ctx, f, src, filepath.Join(dir, "bad-down"), TransferOptions{Digest: "md5"})
			return err
		},
	} {
		if err := run(); protocol.KindOf(err) != protocol.KindInvalid {
			t.Fatalf("an unknown digest: %v (kind %q)", err, protocol.KindOf(err))
		}
	}
	if l := leftovers(t, dir); len(l) != 0 {
		t.Fatalf("left behind: %v", l)
	}
	for _, name := range []string{"bad-up", "bad-down"} {
		if _, err := os.Stat(filepath.Join(dir, name)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s: %v", name, err)
		}
	}
}
