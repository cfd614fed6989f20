//go:build linux || darwin || freebsd

package remotefs

import (
	"os"
	"path/filepath"
	"testing"
)

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
	sess := NewSession(fsTestConfig(f), "fuzz")
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
