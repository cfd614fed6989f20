//go:build linux

package remotefs

// Races between fs/* calls judged by a workspace policy and a sandboxed
// command that swaps a directory of the workspace with a symlink leading
// out of it (renameat2 RENAME_EXCHANGE in a tight loop): whatever the
// interleaving, nothing outside the workspace and nothing in .git may
// change.

import (
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/outpost-exec/outpost/protocol"
)

// swapLoop exchanges a and b with renameat2(RENAME_EXCHANGE) until stop
// is closed, as a sandboxed command may; it counts the swaps.
func swapLoop(a, b string, stop <-chan struct{}, swaps *atomic.Int64) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for {
		select {
		case <-stop:
			return
		default:
		}
		if unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE) == nil {
			swaps.Add(1)
		}
	}
}

// TestFsRaceSwappedSymlinkCannotLeadOutOfTheWorkspace: a command swaps
// ws/a with a symlink to a tree outside the workspace and ws/b with a
// symlink to ws/.git while the client removes and creates trees through
// ws/a and ws/b under a workspace-write policy. Nothing outside the
// workspace and nothing in .git may change, and no .git may appear.
func TestFsRaceSwappedSymlinkCannotLeadOutOfTheWorkspace(t *testing.T) {
	root := fsPrivateDir(t)
	ws, outside := filepath.Join(root, "ws"), filepath.Join(root, "outside")
	// The tree outside, shaped like what the client works on inside, so
	// an operation that follows the swapped link finds something to do.
	for _, f := range []string{"tree/f1", "tree/sub/f2", "tree/sub/new/f3", "keep", "config", "hooks/evil/f4"} {
		fsMustWrite(t, filepath.Join(outside, f), "outside "+f)
	}
	fsMustWrite(t, filepath.Join(ws, ".git", "config"), "[core]\n")
	fsMustWrite(t, filepath.Join(ws, ".git", "hooks", "pre-commit"), "#!/bin/sh\n")
	fsMustWrite(t, filepath.Join(ws, ".git", "tree", "f"), "git object\n")
	for _, d := range []string{"a/tree/sub", "b/hooks", "b/tree/sub"} {
		if err := os.MkdirAll(filepath.Join(ws, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(ws, "a.link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(".git", filepath.Join(ws, "b.link")); err != nil {
		t.Fatal(err)
	}
	outsideBefore, gitBefore := fsSnapshot(t, outside), fsSnapshot(t, filepath.Join(ws, ".git"))

	sess := fsTestSession(t)
	// The workspace-write mode, and the same policy as explicit entries
	// (judged faster, so more calls land in the race).
	policies := []map[string]any{
		{"mode": "workspace-write", "cwd": ws},
		{"entries": []map[string]any{{"path": ":root", "access": "read"}, {"path": ":cwd", "access": "write"}}, "cwd": ws},
	}
	stop := make(chan struct{})
	var swaps, calls, succeeded atomic.Int64
	var wg sync.WaitGroup
	for _, pair := range [][2]string{{"a", "a.link"}, {"b", "b.link"}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			swapLoop(filepath.Join(ws, pair[0]), filepath.Join(ws, pair[1]), stop, &swaps)
		}()
	}
	type call func(policy map[string]any) (any, error)
	rm := func(p string, recursive bool) call {
		return func(policy map[string]any) (any, error) {
			r := ptrFalse()
			if recursive {
				r = ptrTrue()
			}
			return sess.Remove(protocol.FsRemoveParams{Path: p, Recursive: r, Sandbox: policy})
		}
	}
	mkdir := func(p string) call {
		return func(policy map[string]any) (any, error) {
			return sess.CreateDirectory(protocol.FsCreateDirectoryParams{Path: p, Recursive: ptrTrue(), Sandbox: policy})
		}
	}
	write := func(p string) call {
		return func(policy map[string]any) (any, error) {
			return sess.WriteFile(protocol.FsWriteFileParams{Path: p, Data: []byte("client"), Sandbox: policy})
		}
	}
	var loops []call
	for _, d := range []string{"a", "b"} {
		dir := filepath.Join(ws, d)
		loops = append(loops,
			rm(filepath.Join(dir, "tree"), true),
			mkdir(filepath.Join(dir, "tree", "sub", "new")),
			mkdir(filepath.Join(dir, "hooks", "evil")),
			rm(filepath.Join(dir, "hooks"), true),
			write(filepath.Join(dir, "config")),
			rm(filepath.Join(dir, "config"), false),
			mkdir(filepath.Join(dir, "nested", ".git", "hooks")),
		)
	}
	deadline := time.Now().Add(2500 * time.Millisecond)
	var cwg sync.WaitGroup
	for w := 0; w < 6; w++ {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			policy := policies[w%len(policies)]
			for i := w; time.Now().Before(deadline); i++ {
				if _, err := loops[i%len(loops)](policy); err == nil {
					succeeded.Add(1)
				}
				calls.Add(1)
			}
		}()
	}
	cwg.Wait()
	close(stop)
	wg.Wait()
	t.Logf("%d swaps, %d calls, %d succeeded", swaps.Load(), calls.Load(), succeeded.Load())

	if diff := fsSnapshotDiff(outsideBefore, fsSnapshot(t, outside)); len(diff) > 0 {
		t.Errorf("the tree outside the workspace changed (%d differences):\n%s", len(diff), strings.Join(diff[:min(len(diff), 20)], "\n"))
	}
	if diff := fsSnapshotDiff(gitBefore, fsSnapshot(t, filepath.Join(ws, ".git"))); len(diff) > 0 {
		t.Errorf(".git changed (%d differences):\n%s", len(diff), strings.Join(diff[:min(len(diff), 20)], "\n"))
	}
	filepath.WalkDir(ws, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Name() == ".git" && p != filepath.Join(ws, ".git") {
			t.Errorf("a .git appeared at %s", p)
		}
		return nil
	})
	if swaps.Load() == 0 || succeeded.Load() == 0 {
		t.Errorf("the race did not run: %d swaps, %d calls succeeded", swaps.Load(), succeeded.Load())
	}
}
