//go:build linux || darwin || freebsd

package remotefs

// Helpers shared by the fs/* tests: a session over a private directory,
// snapshots of a tree to prove nothing outside changed.

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/outpost-exec/outpost/pathmap"
)

// fsTestConfig is the file system of an executor with default settings:
// no path mappings, the default limits.
func fsTestConfig(t testing.TB) Config {
	t.Helper()
	m, err := pathmap.NewMapper()
	if err != nil {
		t.Fatal(err)
	}
	return Config{Paths: m, MaxFileBytes: 64 << 20, MaxFileHandles: 64}
}

// fsTestSession is a session's file system, as fs calls reach it.
func fsTestSession(t *testing.T) *Session {
	t.Helper()
	sess := NewSession(fsTestConfig(t), "test")
	t.Cleanup(sess.End)
	return sess
}

// fsPrivateDir is a fresh directory outside /tmp and $TMPDIR, which a
// workspace-write policy makes writable (":tmpdir", ":slash_tmp"): what
// lies there is outside the workspace for the policy.
func fsPrivateDir(t *testing.T) string {
	t.Helper()
	base := "/var/tmp"
	if fi, err := os.Stat(base); err != nil || !fi.IsDir() || within(realPath(os.TempDir()), realPath(base)) || within("/tmp", realPath(base)) {
		t.Skip("no directory outside the temporary directories a workspace-write policy makes writable")
	}
	dir, err := os.MkdirTemp(base, "outpost-fs-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	dir, _ = filepath.EvalSymlinks(dir)
	return dir
}

// fsSnapshot records a tree: every entry's type, mode, size and content
// (files) or target (symlinks), without following links.
func fsSnapshot(t *testing.T, root string) map[string]string {
	t.Helper()
	snap := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		desc := fmt.Sprintf("%v size=%d", fi.Mode(), fi.Size())
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			desc += " sha256=" + hex.EncodeToString(sum[:])
		case fi.Mode()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += " -> " + l
		case fi.IsDir():
			desc = fmt.Sprintf("%v", fi.Mode()) // a directory's size varies with what it held
		}
		snap[p] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

func fsSnapshotDiff(before, after map[string]string) []string {
	var diff []string
	for p, d := range before {
		if a, ok := after[p]; !ok {
			diff = append(diff, "removed "+p)
		} else if a != d {
			diff = append(diff, fmt.Sprintf("changed %s: %s -> %s", p, d, a))
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			diff = append(diff, "added "+p)
		}
	}
	sort.Strings(diff)
	return diff
}

func fsMustWrite(t *testing.T, p, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func ptrTrue() *bool  { b := true; return &b }
func ptrFalse() *bool { b := false; return &b }
