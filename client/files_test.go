package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/outpost-exec/outpost/executor"
	"github.com/outpost-exec/outpost/transport"
)

// inProcess is an executor in this test process reached through DialConn
// over in-memory pipes, as package local's is (which cannot be imported
// here: it imports this package). Close, like local's, ends the session
// and its processes and files.
type inProcess struct {
	*Remote
	srv  *executor.Server
	stop context.CancelFunc
	wg   sync.WaitGroup
}

func (l *inProcess) Close() error {
	err := l.Remote.Close()
	l.stop()
	l.wg.Wait()
	l.srv.Shutdown(context.Background())
	return err
}

// localFiles is an in-process executor configured by mutate.
func localFiles(t *testing.T, mutate func(*executor.Config)) *inProcess {
	t.Helper()
	cfg := executor.DefaultConfig()
	if mutate != nil {
		mutate(&cfg)
	}
	srv, err := executor.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l := &inProcess{srv: srv}
	srvCtx, stop := context.WithCancel(context.Background())
	l.stop = stop
	r, err := DialConn(ctxT(t), "local", func(context.Context) (net.Conn, error) {
		a, b := net.Pipe()
		sess, err := transport.MuxServer(b, transport.DefaultMuxConfig())
		if err != nil {
			return nil, err
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			srv.ServeMux(srvCtx, sess, 0)
		}()
		return a, nil
	}, Config{NoResume: true})
	if err != nil {
		stop()
		t.Fatal(err)
	}
	l.Remote = r
	t.Cleanup(func() { l.Close() })
	return l
}

func randomData(t *testing.T, n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

func TestFilesRoundTripWholeAndStreamed(t *testing.T) {
	env := localFiles(t, nil)
	dir := t.TempDir()
	ctx := ctxT(t)
	small := filepath.Join(dir, "small.txt")
	if err := env.WriteFile(ctx, small, []byte("hello\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if got, err := env.ReadFile(ctx, small); err != nil || string(got) != "hello\n" {
		t.Fatalf("%q %v", got, err)
	}
	if fi, err := os.Stat(small); err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("mode %v %v", fi.Mode(), err)
	}
	info, err := env.Stat(ctx, small)
	if err != nil || info.Size() != 6 || info.Mode().Perm() != 0o640 || info.IsDir() {
		t.Fatalf("stat %v %v", info, err)
	}

	// 10 MiB streamed both ways, pipelined blocks, checked by digest.
	data := randomData(t, 10<<20+123)
	big := filepath.Join(dir, "big.bin")
	w, err := env.Create(ctx, big, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(w, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(big); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the file appeared before Close: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	if h, n, ok := w.Sum(); !ok || h != hex.EncodeToString(sum[:]) || n != int64(len(data)) {
		t.Fatalf("the executor's running digest: %s %d %v", h, n, ok)
	}
	r, err := env.Open(ctx, big)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes (want %d): %v", len(got), len(data), err)
	}
	if h, _, ok := r.Sum(); !ok || h != hex.EncodeToString(sum[:]) {
		t.Fatalf("the executor's digest of the read: %s %v", h, ok)
	}
	if h, n, err := env.Files(nil).Hash(ctx, big); err != nil || h != hex.EncodeToString(sum[:]) || n != int64(len(data)) {
		t.Fatalf("hash %s %d %v", h, n, err)
	}
	ents, err := env.ReadDir(ctx, dir)
	if err != nil || len(ents) != 2 || ents[0].Name() != "big.bin" || ents[1].Name() != "small.txt" {
		t.Fatalf("entries %v %v", ents, err)
	}
}

func TestFilesMissingPathIsNotExistNamingThePath(t *testing.T) {
	env := localFiles(t, nil)
	missing := filepath.Join(t.TempDir(), "nope")
	_, err := env.ReadFile(ctxT(t), missing)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("%v", err)
	}
	var fe *FileError
	if !errors.As(err, &fe) || fe.Err.Code != -32004 {
		t.Fatalf("%#v", err)
	}
}

func TestFilesTooLargeForAWholeFileCallPointsToStreaming(t *testing.T) {
	env := localFiles(t, func(c *executor.Config) { c.MaxFileBytes = 1 << 20 })
	ctx := ctxT(t)
	p := filepath.Join(t.TempDir(), "f")
	err := env.WriteFile(ctx, p, make([]byte, 2<<20), 0o644)
	if err == nil || !strings.Contains(err.Error(), "file is too large") || !strings.Contains(err.Error(), "fs/create") {
		t.Fatalf("write: %v", err)
	}
	w, _ := env.Create(ctx, p, 0o644)
	w.Write(make([]byte, 2<<20))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = env.ReadFile(ctx, p)
	if err == nil || !strings.Contains(err.Error(), "file is too large to read: limit is 1048576 bytes") || !strings.Contains(err.Error(), "fs/open") {
		t.Fatalf("read: %v", err)
	}
}

func TestFilesUnderReadOnlyPolicyWriteNothing(t *testing.T) {
	env := localFiles(t, nil)
	ctx := ctxT(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "keep"), []byte("x"), 0o644)
	ro := env.Files(map[string]any{"mode": "read-only"})
	for name, err := range map[string]error{
		"write":  ro.WriteFile(ctx, filepath.Join(dir, "new"), []byte("x"), 0o644),
		"mkdir":  ro.MkdirAll(ctx, filepath.Join(dir, "d")),
		"remove": ro.Remove(ctx, filepath.Join(dir, "keep"), false),
		"copy":   ro.Copy(ctx, filepath.Join(dir, "keep"), filepath.Join(dir, "copy"), false),
	} {
		if !errors.Is(err, fs.ErrPermission) || !strings.Contains(err.Error(), "access denied by the sandbox policy") {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := ro.Create(ctx, filepath.Join(dir, "streamed"), 0o644); !errors.Is(err, fs.ErrPermission) {
		t.Errorf("create: %v", err)
	}
	if got, err := ro.ReadFile(ctx, filepath.Join(dir, "keep")); err != nil || string(got) != "x" {
		t.Fatalf("reading is allowed: %q %v", got, err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("read-only policy wrote: %v", ents)
	}
}

// A workspace policy: read everywhere, write only in ws; .git inside it
// stays read-only; /secret is not even readable.
func workspace(ws, secret string) map[string]any {
	return map[string]any{"entries": []map[string]any{
		{"path": ":root", "access": "read"},
		{"path": ws, "access": "write"},
		{"path": secret, "access": "none"},
	}}
}

func TestFilesPolicyRefusesEscapesProtectedPathsAndNonePaths(t *testing.T) {
	env := localFiles(t, nil)
	ctx := ctxT(t)
	ws, outside, secret := t.TempDir(), t.TempDir(), t.TempDir()
	os.MkdirAll(filepath.Join(ws, ".git"), 0o755)
	os.WriteFile(filepath.Join(ws, ".git", "config"), []byte("[core]\n"), 0o644)
	os.WriteFile(filepath.Join(secret, "key"), []byte("s3cret"), 0o600)
	os.WriteFile(filepath.Join(outside, "target"), []byte("orig"), 0o644)
	os.Symlink(outside, filepath.Join(ws, "dirlink"))
	os.Symlink(filepath.Join(outside, "target"), filepath.Join(ws, "filelink"))
	os.Symlink(filepath.Join(secret, "key"), filepath.Join(ws, "secretlink"))
	f := env.Files(workspace(ws, secret))

	if err := f.WriteFile(ctx, filepath.Join(ws, "ok.txt"), []byte("fine"), 0o644); err != nil {
		t.Fatalf("a write inside the workspace: %v", err)
	}
	denied := map[string]error{
		"outside":                 f.WriteFile(ctx, filepath.Join(outside, "x"), []byte("x"), 0o644),
		"dot-dot escape":          f.WriteFile(ctx, ws+"/../"+filepath.Base(outside)+"/x", []byte("x"), 0o644),
		"through a dir symlink":   f.WriteFile(ctx, filepath.Join(ws, "dirlink", "x"), []byte("x"), 0o644),
		"through a file symlink":  f.WriteFile(ctx, filepath.Join(ws, "filelink"), []byte("x"), 0o644),
		".git":                    f.WriteFile(ctx, filepath.Join(ws, ".git", "config"), []byte("x"), 0o644),
		"remove .git":             f.Remove(ctx, filepath.Join(ws, ".git"), true),
		"remove the workspace":    f.Remove(ctx, ws, true),
		"mkdir in .git":           f.MkdirAll(ctx, filepath.Join(ws, ".git", "hooks")),
		"copy into .git":          f.Copy(ctx, filepath.Join(ws, "ok.txt"), filepath.Join(ws, ".git", "ok"), false),
		"streamed through a link": createErr(f, ctx, filepath.Join(ws, "dirlink", "y")),
	}
	for name, err := range denied {
		if !errors.Is(err, fs.ErrPermission) {
			t.Errorf("%s: %v", name, err)
		}
	}
	for name, err := range map[string]error{
		"read none":            readErr(f, ctx, filepath.Join(secret, "key")),
		"read none via a link": readErr(f, ctx, filepath.Join(ws, "secretlink")),
		"list none":            listErr(f, ctx, secret),
		"hash none":            hashErr(f, ctx, filepath.Join(secret, "key")),
	} {
		if !errors.Is(err, fs.ErrPermission) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "target")); string(b) != "orig" {
		t.Fatalf("the file behind the symlink changed: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, ".git", "config")); string(b) != "[core]\n" {
		t.Fatalf(".git/config changed: %q", b)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 1 {
		t.Fatalf("something was written outside: %v", ents)
	}
	// Reads outside the workspace are fine (":root" is readable).
	if b, err := f.ReadFile(ctx, filepath.Join(ws, "filelink")); err != nil || string(b) != "orig" {
		t.Fatalf("%q %v", b, err)
	}
}

func createErr(f *Files, ctx context.Context, p string) error {
	w, err := f.Create(ctx, p, 0o644)
	if err == nil {
		w.Abort()
	}
	return err
}

func readErr(f *Files, ctx context.Context, p string) error {
	_, err := f.ReadFile(ctx, p)
	return err
}

func listErr(f *Files, ctx context.Context, p string) error {
	_, err := f.ReadDir(ctx, p)
	return err
}

func hashErr(f *Files, ctx context.Context, p string) error {
	_, _, err := f.Hash(ctx, p)
	return err
}

func TestFilesHandlesAreBoundedAndUnfinishedWritesDiscarded(t *testing.T) {
	env := localFiles(t, func(c *executor.Config) { c.MaxFileHandles = 2 })
	ctx := ctxT(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	os.WriteFile(p, []byte("x"), 0o644)
	a, err := env.Open(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	w, err := env.Create(ctx, filepath.Join(dir, "partial"), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("half"))
	if _, err := env.Open(ctx, p); err == nil || !strings.Contains(err.Error(), "too many open file handles") {
		t.Fatalf("third handle: %v", err)
	}
	a.Close()
	if err := w.Abort(); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("an aborted write left %v", ents)
	}
	// A write still open when the session ends leaves nothing behind.
	w2, err := env.Create(ctx, filepath.Join(dir, "orphan"), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	w2.Write(make([]byte, 3<<20))
	env.Close()
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("the session ended, leaving %v", ents)
	}
}

func TestFilesCopyTreeKeepsModesAndSymlinks(t *testing.T) {
	env := localFiles(t, nil)
	ctx := ctxT(t)
	src, dst := t.TempDir(), filepath.Join(t.TempDir(), "copy")
	os.MkdirAll(filepath.Join(src, "sub"), 0o750)
	os.WriteFile(filepath.Join(src, "sub", "run.sh"), []byte("#!/bin/sh\n"), 0o755)
	os.Symlink("sub/run.sh", filepath.Join(src, "link"))
	if err := env.Copy(ctx, src, dst, true); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dst, "sub", "run.sh")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("%v %v", fi, err)
	}
	if l, err := os.Readlink(filepath.Join(dst, "link")); err != nil || l != "sub/run.sh" {
		t.Fatalf("%q %v", l, err)
	}
	if err := env.Copy(ctx, src, filepath.Join(src, "sub", "inside"), true); err == nil {
		t.Fatal("copied a tree into itself")
	}
	if c, err := env.Files(nil).Canonicalize(ctx, filepath.Join(dst, "link")); err != nil || c != filepath.Join(dst, "sub", "run.sh") {
		t.Fatalf("canonicalize %q %v", c, err)
	}
}

func TestFilesFSPassesFstest(t *testing.T) {
	env := localFiles(t, nil)
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "sub", "deeper"), 0o755)
	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("alpha"), 0o644)
	os.WriteFile(filepath.Join(dir, "sub", "b.txt"), randomData(t, 3<<20), 0o600)
	os.WriteFile(filepath.Join(dir, "sub", "deeper", "c"), nil, 0o644)
	if err := fstest.TestFS(env.Files(nil).FS(ctxT(t), dir), "a.txt", "sub/b.txt", "sub/deeper/c"); err != nil {
		t.Fatal(err)
	}
}

func TestFilesWorkspaceWriteModeKeepsGitReadOnly(t *testing.T) {
	env := localFiles(t, nil)
	ctx := ctxT(t)
	ws := t.TempDir()
	os.MkdirAll(filepath.Join(ws, ".git"), 0o755)
	os.WriteFile(filepath.Join(ws, ".git", "HEAD"), []byte("ref: refs/heads/main\n"), 0o644)
	f := env.Files(map[string]any{"mode": "workspace-write", "cwd": ws})
	if err := f.WriteFile(ctx, filepath.Join(ws, "main.go"), []byte("package main\n"), 0o644); err != nil {
		t.Fatalf("a write in the workspace: %v", err)
	}
	if err := f.WriteFile(ctx, filepath.Join(ws, ".git", "HEAD"), []byte("x"), 0o644); !errors.Is(err, fs.ErrPermission) {
		t.Fatalf(".git/HEAD: %v", err)
	}
	if err := f.Remove(ctx, filepath.Join(ws, ".git"), true); !errors.Is(err, fs.ErrPermission) {
		t.Fatalf("remove .git: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, ".git", "HEAD")); string(b) != "ref: refs/heads/main\n" {
		t.Fatalf(".git/HEAD is now %q", b)
	}
}

// Over codex's JSON-RPC (ws), binary fields travel as base64: the same
// Files calls work, streamed blocks included.
func TestFilesOverWebSocketJSON(t *testing.T) {
	srv, _ := executor.NewServer(executor.DefaultConfig())
	l, err := srv.ListenWS("127.0.0.1:0", executor.WSConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	env := dial(t, l.URL(), Config{})
	ctx := ctxT(t)
	dir := t.TempDir()
	data := randomData(t, 3<<20+11)
	w, err := env.Create(ctx, filepath.Join(dir, "f"), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(data)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := env.Open(ctx, filepath.Join(dir, "f"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("%d bytes back, %v", len(got), err)
	}
	if b, err := env.ReadFile(ctx, filepath.Join(dir, "f")); err != nil || !bytes.Equal(b, data) {
		t.Fatalf("ReadFile: %v", err)
	}
	if _, err := env.ReadFile(ctx, filepath.Join(dir, "nope")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing: %v", err)
	}
}
