package client

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/outpost-exec/outpost/protocol"
)

// linkTree is a tree whose symlinks say different things: a relative
// link to a file, an absolute one, a dangling one and a link to a
// directory of the tree.
func linkTree(t *testing.T, dir string) {
	t.Helper()
	os.MkdirAll(filepath.Join(dir, "sub"), 0o755)
	os.WriteFile(filepath.Join(dir, "sub", "f"), []byte("f"), 0o640)
	for link, target := range map[string]string{"rel": "sub/f", "abs": "/nonexistent/abs", "dangling": "gone", "dirlink": "sub"} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
}

func sameLinks(t *testing.T, dir string) {
	t.Helper()
	for link, target := range map[string]string{"rel": "sub/f", "abs": "/nonexistent/abs", "dangling": "gone", "dirlink": "sub"} {
		if l, err := os.Readlink(filepath.Join(dir, link)); err != nil || l != target {
			t.Fatalf("%s: %q %v, want %q", link, l, err, target)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "sub", "f")); err != nil || string(b) != "f" {
		t.Fatalf("sub/f: %q %v", b, err)
	}
}

// Symlinks of a tree are copied as symlinks, their text kept (dangling,
// absolute, to a directory), in every direction: up, down, between
// executors and within one.
func TestTransferCopiesSymlinksAsSymlinksEveryWay(t *testing.T) {
	a := localFiles(t, nil).Files(nil)
	b := dial(t, startExecutor(t, nil).url, Config{}).Files(nil)
	ctx := ctxT(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	linkTree(t, src)

	res, err := Upload(ctx, a, src, filepath.Join(dir, "up"), TransferOptions{Recursive: true})
	if err != nil || res.Links != 4 || res.Files != 1 {
		t.Fatalf("upload %+v %v", res, err)
	}
	sameLinks(t, filepath.Join(dir, "up"))
	if res, err = Download(ctx, a, filepath.Join(dir, "up"), filepath.Join(dir, "down"), TransferOptions{Recursive: true}); err != nil || res.Links != 4 {
		t.Fatalf("download %+v %v", res, err)
	}
	sameLinks(t, filepath.Join(dir, "down"))
	if res, err = CopyBetween(ctx, a, src, b, filepath.Join(dir, "between"), TransferOptions{Recursive: true}); err != nil || res.Links != 4 {
		t.Fatalf("between %+v %v", res, err)
	}
	sameLinks(t, filepath.Join(dir, "between"))
	if _, err = CopyWithin(ctx, a, src, filepath.Join(dir, "within"), TransferOptions{Recursive: true}); err != nil {
		t.Fatal(err)
	}
	sameLinks(t, filepath.Join(dir, "within"))
	// Again onto the copy's own path, as a directory's contents: every
	// link is replaced, none refused or followed.
	if _, err := Download(ctx, a, src, filepath.Join(dir, "down2"), TransferOptions{Recursive: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := Download(ctx, a, src, filepath.Join(dir, "down2"), TransferOptions{Recursive: true}); err != nil {
		t.Fatal(err) // now into down2/src
	}
	sameLinks(t, filepath.Join(dir, "down2", "src"))
	if _, err := Upload(ctx, a, filepath.Join(dir, "down2", "src"), filepath.Join(dir, "down2"), TransferOptions{Recursive: true}); err != nil {
		t.Fatal(err) // over down2/src itself: each link replaced by itself
	}
	sameLinks(t, filepath.Join(dir, "down2", "src"))
}

// With FollowLinks what a link leads to is copied (a directory as a
// tree); a dangling link is then an error, and so is a loop.
func TestTransferFollowLinks(t *testing.T) {
	a := localFiles(t, nil).Files(nil)
	b := dial(t, startExecutor(t, nil).url, Config{}).Files(nil)
	ctx := ctxT(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	os.MkdirAll(filepath.Join(src, "sub"), 0o755)
	os.WriteFile(filepath.Join(src, "sub", "f"), []byte("f"), 0o640)
	os.Symlink("sub/f", filepath.Join(src, "rel"))
	os.Symlink("sub", filepath.Join(src, "dirlink"))
	follow := TransferOptions{Recursive: true, FollowLinks: true}
	check := func(dst string) {
		t.Helper()
		for _, p := range []string{"rel", "dirlink/f"} {
			fi, err := os.Lstat(filepath.Join(dst, p))
			if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o640 {
				t.Fatalf("%s: %v %v", p, fi, err)
			}
		}
	}
	if _, err := Upload(ctx, a, src, filepath.Join(dir, "up"), follow); err != nil {
		t.Fatal(err)
	}
	check(filepath.Join(dir, "up"))
	if _, err := Download(ctx, a, src, filepath.Join(dir, "down"), follow); err != nil {
		t.Fatal(err)
	}
	check(filepath.Join(dir, "down"))
	if _, err := CopyBetween(ctx, a, src, b, filepath.Join(dir, "between"), follow); err != nil {
		t.Fatal(err)
	}
	check(filepath.Join(dir, "between"))
	if _, err := CopyWithin(ctx, a, src, filepath.Join(dir, "within"), follow); err != nil {
		t.Fatal(err)
	}
	check(filepath.Join(dir, "within"))

	os.Symlink("gone", filepath.Join(src, "dangling"))
	if _, err := Upload(ctx, a, src, filepath.Join(dir, "x"), follow); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a dangling link followed: %v", err)
	}
	if _, err := Download(ctx, a, src, filepath.Join(dir, "y"), follow); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a dangling link followed down: %v", err)
	}
	os.Remove(filepath.Join(src, "dangling"))
	os.Symlink("..", filepath.Join(src, "sub", "loop"))
	if _, err := Upload(ctx, a, src, filepath.Join(dir, "z"), follow); err == nil {
		t.Fatal("a loop was followed")
	}
	if _, err := Download(ctx, a, src, filepath.Join(dir, "w"), follow); err == nil {
		t.Fatal("a loop was followed down")
	}
}

// A symlink planted in the destination is never written through: for a
// directory of the copy it stops the copy, at a file's own name it is
// replaced by the file. Up, down, between executors and within one.
func TestTransferNeverWritesThroughAPlantedSymlink(t *testing.T) {
	a := localFiles(t, nil).Files(nil)
	b := dial(t, startExecutor(t, nil).url, Config{}).Files(nil)
	ctx := ctxT(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	os.MkdirAll(filepath.Join(src, "sub"), 0o755)
	os.WriteFile(filepath.Join(src, "sub", "victim"), []byte("evil"), 0o644)
	os.WriteFile(filepath.Join(src, "top"), []byte("evil"), 0o644)
	outside := filepath.Join(dir, "outside")
	os.Mkdir(outside, 0o755)
	victim := filepath.Join(outside, "victim")
	os.WriteFile(victim, []byte("keep"), 0o644)
	// plant makes dst with a copy of src already there whose "sub" is a
	// link out, and a link out at dst/top.
	plant := func(name string) string {
		dst := filepath.Join(dir, name)
		os.MkdirAll(filepath.Join(dst, "src"), 0o755)
		os.Symlink(outside, filepath.Join(dst, "src", "sub"))
		os.Symlink(victim, filepath.Join(dst, "top"))
		return dst
	}
	untouched := func(how string) {
		t.Helper()
		if b, _ := os.ReadFile(victim); string(b) != "keep" {
			t.Fatalf("%s wrote through a link: %q", how, b)
		}
		if ents, _ := os.ReadDir(outside); len(ents) != 1 {
			t.Fatalf("%s left files outside: %v", how, ents)
		}
	}
	tree := TransferOptions{Recursive: true}
	if _, err := Upload(ctx, a, src, plant("up"), tree); protocol.KindOf(err) != protocol.KindInvalid {
		t.Fatalf("upload: %v", err)
	}
	untouched("upload")
	if _, err := CopyBetween(ctx, a, src, b, plant("between"), tree); protocol.KindOf(err) != protocol.KindInvalid {
		t.Fatalf("between: %v", err)
	}
	untouched("between")
	if _, err := Download(ctx, a, src, plant("down"), tree); !errors.Is(err, ErrDestinationSymlink) {
		t.Fatalf("download: %v", err)
	}
	untouched("download")
	if _, err := CopyWithin(ctx, a, src, plant("within"), tree); protocol.KindOf(err) == "" {
		t.Fatalf("within: %v", err)
	}
	untouched("within")

	// A single file onto a link at its name: the link is replaced.
	one := filepath.Join(src, "top")
	for name, copy := range map[string]func(string) error{
		"up":      func(dst string) error { _, err := Upload(ctx, a, one, dst, TransferOptions{}); return err },
		"down":    func(dst string) error { _, err := Download(ctx, a, one, dst, TransferOptions{}); return err },
		"between": func(dst string) error { _, err := CopyBetween(ctx, a, one, b, dst, TransferOptions{}); return err },
		"within":  func(dst string) error { _, err := CopyWithin(ctx, a, one, dst, TransferOptions{}); return err },
	} {
		dst := filepath.Join(dir, name, "top")
		if err := copy(dst); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		untouched(name)
		if fi, err := os.Lstat(dst); err != nil || !fi.Mode().IsRegular() {
			t.Fatalf("%s: the link was not replaced: %v %v", name, fi, err)
		}
	}
}

// A link that cannot be made (a directory holds its name) is an error,
// not a silent skip, both ways.
func TestTransferALinkThatCannotBeMadeIsAnError(t *testing.T) {
	a := localFiles(t, nil).Files(nil)
	ctx := ctxT(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	os.MkdirAll(src, 0o755)
	os.Symlink("x", filepath.Join(src, "link"))
	for _, name := range []string{"up", "down"} {
		os.MkdirAll(filepath.Join(dir, name, "src", "link", "full"), 0o755)
	}
	var fe *FileError
	if _, err := Upload(ctx, a, src, filepath.Join(dir, "up"), TransferOptions{Recursive: true}); !errors.As(err, &fe) {
		t.Fatalf("upload: %v", err)
	}
	if _, err := Download(ctx, a, src, filepath.Join(dir, "down"), TransferOptions{Recursive: true}); !errors.Is(err, syscall.EISDIR) && !errors.Is(err, syscall.ENOTEMPTY) {
		t.Fatalf("download: %v", err)
	}
}
