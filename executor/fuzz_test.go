package executor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outpost-exec/outpost/protocol"
)

// FuzzNativePath: any string either fails with ErrForeignPath or yields a
// clean absolute path without NUL or "..".
func FuzzNativePath(f *testing.F) {
	for _, s := range []string{"file:///tmp", "/tmp/../etc", "file://localhost/a%20b", `C:\x`, "file:///C:/x", "relative", "file://host/x", "file:", "/\x00", `\\srv\share`, "file:///%2e%2e/etc"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := NativePath(s)
		if err != nil {
			if p != "" {
				t.Fatalf("error %v with path %q", err, p)
			}
			return
		}
		if !filepath.IsAbs(p) || filepath.Clean(p) != p || strings.ContainsRune(p, 0) {
			t.Fatalf("NativePath(%q) = %q: not a clean absolute path", s, p)
		}
		for _, part := range strings.Split(p, "/") {
			if part == ".." {
				t.Fatalf("NativePath(%q) = %q keeps ..", s, p)
			}
		}
	})
}

// FuzzChildEnv: no policy or overlay input may panic, and an accepted
// environment never holds a name with '=' or NUL.
func FuzzChildEnv(f *testing.F) {
	f.Add("all", "*KEY*", "PATH", "A", "1", "B=2")
	f.Add("core", "[", "", "", "", "")
	f.Add("none", "", "X*", "X\x00", "v", "")
	f.Fuzz(func(t *testing.T, inherit, exclude, include, key, value, base string) {
		policy := &protocol.EnvPolicy{Inherit: protocol.EnvPolicyInherit(inherit), Exclude: []string{exclude}, IncludeOnly: []string{include}, Set: map[string]string{key: value}}
		env, err := ChildEnv(policy, map[string]string{key: value}, strings.Split(base, "\n"))
		if err != nil {
			return
		}
		for _, kv := range env {
			k, _, ok := strings.Cut(kv, "=")
			if !ok || k == "" || strings.ContainsRune(kv, 0) {
				t.Fatalf("bad entry %q", kv)
			}
		}
	})
}

// FuzzFsPathJudgement: whatever path a client sends, an fs write that the
// workspace policy allows lands inside the workspace and outside .git, and
// a read never lands in the none path, wherever symlinks point.
func FuzzFsPathJudgement(f *testing.F) {
	root := f.TempDir()
	ws, secret, outside := filepath.Join(root, "ws"), filepath.Join(root, "secret"), filepath.Join(root, "outside")
	for _, d := range []string{filepath.Join(ws, ".git"), secret, outside, filepath.Join(ws, "sub")} {
		os.MkdirAll(d, 0o755)
	}
	os.Symlink(outside, filepath.Join(ws, "out"))
	os.Symlink(secret, filepath.Join(ws, "sec"))
	os.Symlink("../..", filepath.Join(ws, "sub", "up"))
	srv, err := NewServer(DefaultConfig())
	if err != nil {
		f.Fatal(err)
	}
	sess, err := NewSessionForTest(srv)
	if err != nil {
		f.Fatal(err)
	}
	policy := map[string]any{"entries": []map[string]any{
		{"path": ":root", "access": "read"}, {"path": ws, "access": "write"}, {"path": secret, "access": "none"},
	}}
	for _, s := range []string{ws + "/a", ws + "/../outside/a", ws + "/out/a", ws + "/sec/k", ws + "/sub/up/outside/x", "file://" + ws + "/.git/config", ws + "/./sub//x", ws + "/\x00", "C:\\x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		r, err := sess.fsRequest("fs/test", policy)
		if err != nil {
			t.Fatal(err)
		}
		n, err := r.native("path", p)
		if err != nil {
			return
		}
		real := realPath(n)
		if r.check(p, n, true) == nil {
			if !within(ws, real) || within(filepath.Join(ws, ".git"), real) {
				t.Fatalf("write allowed for %q, which lands at %q", p, real)
			}
		}
		if r.check(p, n, false) == nil && within(secret, real) {
			t.Fatalf("read allowed for %q, which lands at %q", p, real)
		}
	})
}
