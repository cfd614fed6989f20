//go:build linux || darwin || freebsd

package remotefs

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/outpost-exec/outpost/protocol"
)

// With noFollow a copy into a tree cannot be led out of it: a symlink
// planted for a directory of the path makes fs/create and
// fs/createDirectory fail, and one at the final name is replaced by the
// new file, never written through. Without noFollow both are followed,
// as a shell would.
func TestNoFollowNeverLeadsThroughAPlantedSymlink(t *testing.T) {
	sess := NewSession(fsTestConfig(t), "test")
	dir := t.TempDir()
	outside := filepath.Join(dir, "outside")
	os.Mkdir(outside, 0o755)
	victim := filepath.Join(outside, "victim")
	os.WriteFile(victim, []byte("keep"), 0o644)
	dst := filepath.Join(dir, "dst")
	os.Mkdir(dst, 0o755)
	os.Symlink(outside, filepath.Join(dst, "sub"))
	os.Symlink(victim, filepath.Join(dst, "file"))

	write := func(p string, noFollow bool) error {
		if _, err := sess.Create(protocol.FsCreateParams{HandleID: "h", Path: p, NoFollow: noFollow}); err != nil {
			return err
		}
		if _, err := sess.WriteBlock(protocol.FsWriteBlockParams{HandleID: "h", Chunk: []byte("new")}); err != nil {
			t.Fatal(err)
		}
		_, err := sess.Close(protocol.FsCloseParams{HandleID: "h"})
		return err
	}
	if err := write(filepath.Join(dst, "sub", "victim"), true); protocol.KindOf(err) != protocol.KindInvalid {
		t.Fatalf("through a linked directory: %v", err)
	}
	if _, err := sess.CreateDirectory(protocol.FsCreateDirectoryParams{Path: filepath.Join(dst, "sub", "x"), NoFollow: true}); protocol.KindOf(err) != protocol.KindInvalid {
		t.Fatalf("mkdir through a linked directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "x")); !os.IsNotExist(err) {
		t.Fatalf("a directory was made outside: %v", err)
	}
	if err := write(filepath.Join(dst, "file"), true); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Fatalf("written through the link: %q", b)
	}
	if fi, err := os.Lstat(filepath.Join(dst, "file")); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("the link was not replaced: %v %v", fi, err)
	}
	// Without noFollow the link at the final name is followed.
	os.Remove(filepath.Join(dst, "file"))
	os.Symlink(victim, filepath.Join(dst, "file"))
	if err := write(filepath.Join(dst, "file"), false); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "new" {
		t.Fatalf("not followed without noFollow: %q", b)
	}
}

// fs/createSymlink stores the text as given, replaces a file or link at
// the path (never writing through it), refuses to replace a directory,
// and fs/getMetadata reads the text back.
func TestCreateSymlinkKeepsTheTextAndReplacesOnlyNonDirectories(t *testing.T) {
	sess := NewSession(fsTestConfig(t), "test")
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	os.WriteFile(victim, []byte("keep"), 0o644)
	link := filepath.Join(dir, "link")
	os.Symlink(victim, link)
	if _, err := sess.CreateSymlink(protocol.FsCreateSymlinkParams{Path: link, Target: "../nowhere/x", NoFollow: true}); err != nil {
		t.Fatal(err)
	}
	if l, err := os.Readlink(link); err != nil || l != "../nowhere/x" {
		t.Fatalf("%q %v", l, err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Fatalf("victim %q", b)
	}
	md, err := sess.GetMetadata(protocol.FsPathParams{Path: link})
	if err != nil || !md.(protocol.FsMetadata).IsSymlink || md.(protocol.FsMetadata).SymlinkTarget != "../nowhere/x" {
		t.Fatalf("%+v %v", md, err)
	}
	os.Mkdir(filepath.Join(dir, "d"), 0o755)
	if _, err := sess.CreateSymlink(protocol.FsCreateSymlinkParams{Path: filepath.Join(dir, "d"), Target: "x"}); protocol.KindOf(err) == "" {
		t.Fatalf("a directory replaced: %v", err)
	}
	if _, err := sess.CreateSymlink(protocol.FsCreateSymlinkParams{Path: filepath.Join(dir, "e"), Target: ""}); protocol.KindOf(err) != protocol.KindInvalid {
		t.Fatalf("empty target: %v", err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 3 {
		t.Fatalf("left behind: %v", ents)
	}
}
