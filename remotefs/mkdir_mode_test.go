//go:build linux || darwin || freebsd

package remotefs

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/outpost-exec/outpost/protocol"
)

// fs/createDirectory's mode: exact on what the call makes (the umask does
// not apply), parents 0755, an existing directory left as it is, and a
// symlink in the directory's place never followed.
func TestCreateDirectoryWithAMode(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	sess := NewSession(fsTestConfig(t), "test")
	defer sess.End()
	dir := t.TempDir()
	mode := func(m uint32) *uint32 { return &m }
	no := false
	if _, err := sess.CreateDirectory(protocol.FsCreateDirectoryParams{Path: filepath.Join(dir, "a/b/c"), Mode: mode(0o750)}); err != nil {
		t.Fatal(err)
	}
	for rel, want := range map[string]os.FileMode{"a": 0o700, "a/b": 0o700, "a/b/c": 0o750} {
		// Parents are made as mkdir -p makes them (0755 less the umask).
		fi, err := os.Stat(filepath.Join(dir, rel))
		if err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v %v, want %04o", rel, fi.Mode(), err, want)
		}
	}
	// Existing: left alone; without recursive, an error.
	if _, err := sess.CreateDirectory(protocol.FsCreateDirectoryParams{Path: filepath.Join(dir, "a/b/c"), Mode: mode(0o700)}); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "a/b/c")); fi.Mode().Perm() != 0o750 {
		t.Errorf("an existing directory was changed to %v", fi.Mode())
	}
	if _, err := sess.CreateDirectory(protocol.FsCreateDirectoryParams{Path: filepath.Join(dir, "a/b/c"), Mode: mode(0o700), Recursive: &no}); err == nil {
		t.Error("a non-recursive create of an existing directory succeeded")
	}
	// A symlink where the directory goes: refused, its target untouched.
	target := filepath.Join(dir, "target")
	os.Mkdir(target, 0o755)
	os.Chmod(target, 0o755)
	os.Symlink(target, filepath.Join(dir, "link"))
	if _, err := sess.CreateDirectory(protocol.FsCreateDirectoryParams{Path: filepath.Join(dir, "link"), Mode: mode(0o700)}); err == nil {
		t.Error("a symlink in the directory's place was taken for it")
	}
	if fi, _ := os.Stat(target); fi.Mode().Perm() != 0o755 {
		t.Errorf("the symlink's target changed to %v", fi.Mode())
	}
}
