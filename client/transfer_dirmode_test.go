package client

import (
	"os"
	"path/filepath"
	"testing"
)

// Directories keep their modes as files do, both ways: a 0700 tree is not
// opened up to 0755 on the other side (the owner's rwx is always kept, so
// the copy can fill what it makes).
func TestTransferKeepsDirectoryModes(t *testing.T) {
	env := localFiles(t, nil)
	f := env.Files(nil)
	ctx := ctxT(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	modes := map[string]os.FileMode{".": 0o700, "group": 0o750, "group/private": 0o700, "open": 0o755, "sticky": 0o1777 &^ 0o022}
	for _, rel := range []string{".", "group", "group/private", "open", "sticky"} {
		if err := os.MkdirAll(filepath.Join(src, rel), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(src, "group/private/f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for rel, m := range modes {
		if err := os.Chmod(filepath.Join(src, rel), m); err != nil {
			t.Fatal(err)
		}
	}
	check := func(root string) {
		t.Helper()
		for rel, m := range modes {
			fi, err := os.Stat(filepath.Join(root, rel))
			if err != nil {
				t.Fatal(err)
			}
			want := m.Perm()
			if got := fi.Mode().Perm(); got != want {
				t.Errorf("%s: mode %04o, want %04o", filepath.Join(root, rel), got, want)
			}
		}
	}
	remote := filepath.Join(dir, "remote")
	if _, err := Upload(ctx, f, src, remote, TransferOptions{Recursive: true}); err != nil {
		t.Fatal(err)
	}
	check(remote)
	back := filepath.Join(dir, "back")
	if _, err := Download(ctx, f, remote, back, TransferOptions{Recursive: true}); err != nil {
		t.Fatal(err)
	}
	check(back)
}
