package client

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// A relative remote path (and ~/) is resolved against the executor
// user's home directory, as scp does, in every direction.
func TestTransferResolvesRelativeRemotePathsAgainstHome(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home) // the in-process executor's user's home
	a := localFiles(t, nil).Files(nil)
	b := dial(t, startExecutor(t, nil).url, Config{}).Files(nil)
	ctx := ctxT(t)
	dir := t.TempDir()
	local := filepath.Join(dir, "rel.txt")
	os.WriteFile(local, []byte("rel"), 0o644)

	res, err := Upload(ctx, a, local, "rel.txt", TransferOptions{})
	if err != nil || res.Destination != filepath.Join(home, "rel.txt") {
		t.Fatalf("upload %+v %v", res, err)
	}
	if _, err := Download(ctx, a, "~/rel.txt", filepath.Join(dir, "back"), TransferOptions{}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "back")); string(b) != "rel" {
		t.Fatalf("back %q", b)
	}
	if _, err := CopyWithin(ctx, a, "rel.txt", "sub/", TransferOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := CopyBetween(ctx, a, "sub/rel.txt", b, "~/between.txt", TransferOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"rel.txt", "sub/rel.txt", "between.txt"} {
		if b, err := os.ReadFile(filepath.Join(home, p)); err != nil || string(b) != "rel" {
			t.Fatalf("%s: %q %v", p, b, err)
		}
	}
}

// A single file to a missing parent makes the parents, as a tree always
// did, in every direction.
func TestTransferMakesMissingParentsForASingleFile(t *testing.T) {
	a := localFiles(t, nil).Files(nil)
	b := dial(t, startExecutor(t, nil).url, Config{}).Files(nil)
	ctx := ctxT(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "f")
	os.WriteFile(src, []byte("f"), 0o600)
	for name, copy := range map[string]func(string) (TransferResult, error){
		"up":      func(dst string) (TransferResult, error) { return Upload(ctx, a, src, dst, TransferOptions{}) },
		"down":    func(dst string) (TransferResult, error) { return Download(ctx, a, src, dst, TransferOptions{}) },
		"between": func(dst string) (TransferResult, error) { return CopyBetween(ctx, a, src, b, dst, TransferOptions{}) },
		"within":  func(dst string) (TransferResult, error) { return CopyWithin(ctx, a, src, dst, TransferOptions{}) },
	} {
		for _, dst := range []string{filepath.Join(dir, name, "missing", "sub"), filepath.Join(dir, name, "dir") + "/"} {
			res, err := copy(dst)
			if err != nil {
				t.Fatalf("%s to %s: %v", name, dst, err)
			}
			if fi, err := os.Stat(res.Destination); err != nil || fi.Mode().Perm() != 0o600 {
				t.Fatalf("%s: %s: %v %v", name, res.Destination, fi, err)
			}
		}
		if _, err := os.Stat(filepath.Join(dir, name, "dir", "f")); err != nil {
			t.Fatalf("%s: a name ending in / is a directory: %v", name, err)
		}
	}
}

// An executor that lists a name that is not one path element ("..")
// cannot make a download write outside the destination.
func TestTransferRefusesUnsafeNamesFromTheExecutor(t *testing.T) {
	ws := wsExecutor(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	os.MkdirAll(filepath.Join(src, "zz"), 0o755)
	os.WriteFile(filepath.Join(src, "zz", "escaped"), []byte("x"), 0o644)
	// The executor's answer is rewritten: the entry "zz" becomes "..".
	c := startRewriter(t, ws, false, []byte(`"fileName":"zz"`), []byte(`"fileName":".."`))
	f := dial(t, c.url(), Config{}).Files(nil)
	dst := filepath.Join(dir, "deep", "dst")
	_, err := Download(ctxT(t), f, src, dst, TransferOptions{Recursive: true})
	if !c.hit.Load() || !errors.Is(err, ErrUnsafeName) {
		t.Fatalf("rewritten %v: %v", c.hit.Load(), err)
	}
	if _, err := os.Stat(filepath.Join(dir, "deep", "escaped")); err == nil {
		t.Fatal("written outside the destination")
	}
}
