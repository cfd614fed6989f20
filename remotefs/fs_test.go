//go:build linux || darwin || freebsd

package remotefs

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outpost-exec/outpost/internal/digest"
	"github.com/outpost-exec/outpost/protocol"
)

func writeHandle(t *testing.T) *fsHandle {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(t.TempDir(), "f"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return &fsHandle{f: f, write: true, sum: sha256.New()}
}

// Blocks that land out of order still give the file's digest, read back
// from the file rather than held in memory.
func TestRunningDigestSurvivesOutOfOrderBlocks(t *testing.T) {
	h := writeHandle(t)
	data := make([]byte, 10<<20+5)
	for i := range data {
		data[i] = byte(rand.IntN(256))
	}
	const block = 1 << 20
	var offs []int
	for off := 0; off < len(data); off += block {
		offs = append(offs, off)
	}
	// Swap neighbours: every pair arrives reversed.
	for i := 0; i+1 < len(offs); i += 2 {
		offs[i], offs[i+1] = offs[i+1], offs[i]
	}
	for _, off := range offs {
		b := data[off:min(off+block, len(data))]
		h.f.WriteAt(b, int64(off))
		h.account(uint64(off), b)
	}
	sum := sha256.Sum256(data)
	d := h.digest(uint64(len(data)))
	if d == nil || d.Sha256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("digest %+v", d)
	}
}

// A client cannot make the executor hold or re-read much for the digest:
// a block far ahead, too many gaps, or a rewrite end the running digest.
func TestRunningDigestGivesUpOnHostileOrders(t *testing.T) {
	for name, blocks := range map[string][]uint64{
		"far ahead":     {0, 1 << 30},
		"rewrite":       {0, 0},
		"too many gaps": {2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34, 36, 38, 40, 42, 44, 46, 48, 50, 52, 54, 56, 58, 60, 62, 64, 66, 68},
	} {
		h := writeHandle(t)
		for _, off := range blocks {
			h.account(off, []byte{1})
		}
		if !h.broken || len(h.early) != 0 {
			t.Errorf("%s: broken=%v early=%d", name, h.broken, len(h.early))
		}
		if d := h.digest(1); d != nil {
			t.Errorf("%s: a digest %+v", name, d)
		}
	}
}

// fsCode is the protocol error code of err (0: no error).
func fsCode(t *testing.T, err error) int {
	t.Helper()
	if err == nil {
		return 0
	}
	var pe *protocol.Error
	if !errors.As(err, &pe) {
		t.Fatalf("not a protocol error: %#v", err)
	}
	return pe.Code
}

// fsWorkspace is a workspace policy on ws: read everywhere, write in ws
// (its cwd), .git and the other protected names read-only.
func fsWorkspace(ws string) map[string]any {
	return map[string]any{"entries": []map[string]any{{"path": ":root", "access": "read"}, {"path": ":cwd", "access": "write"}}, "cwd": ws}
}

func fsExists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func TestFsRemoveOfASymlinkRemovesTheLinkNotItsTarget(t *testing.T) {
	sess := fsTestSession(t)
	root := t.TempDir()
	ws, outside := filepath.Join(root, "ws"), filepath.Join(root, "outside")
	fsMustWrite(t, filepath.Join(outside, "dir", "f"), "outside")
	fsMustWrite(t, filepath.Join(ws, "real", "f"), "inside")
	for link, target := range map[string]string{"dirlink": filepath.Join(outside, "dir"), "filelink": filepath.Join(outside, "dir", "f"), "inner": "real", "policylink": filepath.Join(outside, "dir")} {
		if err := os.Symlink(target, filepath.Join(ws, link)); err != nil {
			t.Fatal(err)
		}
	}
	before := fsSnapshot(t, outside)
	for _, c := range []struct {
		link   string
		policy any
	}{{"dirlink", nil}, {"filelink", nil}, {"inner", fsWorkspace(ws)}, {"policylink", fsWorkspace(ws)}} {
		if _, err := sess.Remove(protocol.FsRemoveParams{Path: filepath.Join(ws, c.link), Recursive: ptrTrue(), Sandbox: c.policy}); err != nil {
			t.Fatalf("remove %s: %v", c.link, err)
		}
		if fsExists(filepath.Join(ws, c.link)) {
			t.Errorf("%s is still there", c.link)
		}
	}
	if diff := fsSnapshotDiff(before, fsSnapshot(t, outside)); len(diff) > 0 {
		t.Errorf("removing links changed what they led to: %v", diff)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "real", "f")); err != nil || string(b) != "inside" {
		t.Errorf("the inner link's target: %q %v", b, err)
	}
}

func TestFsRecursiveRemoveNeverFollowsAnInnerSymlink(t *testing.T) {
	sess := fsTestSession(t)
	root := t.TempDir()
	ws, outside := filepath.Join(root, "ws"), filepath.Join(root, "outside")
	fsMustWrite(t, filepath.Join(outside, "dir", "f"), "outside")
	fsMustWrite(t, filepath.Join(outside, "g"), "outside")
	for _, name := range []string{"tree", "tree2"} {
		fsMustWrite(t, filepath.Join(ws, name, "deep", "er", "f"), "inside")
		os.Symlink(filepath.Join(outside, "dir"), filepath.Join(ws, name, "out"))
		os.Symlink(filepath.Join(outside, "g"), filepath.Join(ws, name, "deep", "g"))
		os.Symlink("../../..", filepath.Join(ws, name, "deep", "er", "up"))
	}
	before := fsSnapshot(t, outside)
	for name, policy := range map[string]any{"tree": nil, "tree2": fsWorkspace(ws)} {
		if _, err := sess.Remove(protocol.FsRemoveParams{Path: filepath.Join(ws, name), Sandbox: policy}); err != nil {
			t.Fatalf("remove %s: %v", name, err)
		}
		if fsExists(filepath.Join(ws, name)) {
			t.Errorf("%s is still there", name)
		}
	}
	if diff := fsSnapshotDiff(before, fsSnapshot(t, outside)); len(diff) > 0 {
		t.Errorf("a recursive remove followed a link: %v", diff)
	}
}

func TestFsCreateDirectoryThroughASymlinkedAncestorOutsideIsRefused(t *testing.T) {
	sess := fsTestSession(t)
	root := t.TempDir()
	ws, outside := filepath.Join(root, "ws"), filepath.Join(root, "outside")
	os.MkdirAll(filepath.Join(outside, "existing"), 0o755)
	os.MkdirAll(filepath.Join(ws, "in"), 0o755)
	os.Symlink(outside, filepath.Join(ws, "link"))
	os.Symlink("in", filepath.Join(ws, "innerlink"))
	before := fsSnapshot(t, outside)
	for _, c := range []struct {
		path      string
		recursive bool
	}{{"link/a/b", true}, {"link/a", false}, {"link/existing", true}, {"link/existing/x/y", true}} {
		_, err := sess.CreateDirectory(protocol.FsCreateDirectoryParams{Path: filepath.Join(ws, c.path), Recursive: &c.recursive, Sandbox: fsWorkspace(ws)})
		if fsCode(t, err) != protocol.CodeInvalidRequest || !strings.Contains(err.Error(), "access denied") {
			t.Errorf("%s: %v", c.path, err)
		}
	}
	if diff := fsSnapshotDiff(before, fsSnapshot(t, outside)); len(diff) > 0 {
		t.Errorf("created outside: %v", diff)
	}
	// A symlinked ancestor that stays inside is followed as the path says.
	if _, err := sess.CreateDirectory(protocol.FsCreateDirectoryParams{Path: filepath.Join(ws, "innerlink", "a", "b"), Sandbox: fsWorkspace(ws)}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(ws, "in", "a", "b")); err != nil || !fi.IsDir() {
		t.Fatalf("%v %v", fi, err)
	}
}

func TestFsCreateDirectoryRefusesProtectedNamesAtAnyDepth(t *testing.T) {
	sess := fsTestSession(t)
	ws := t.TempDir()
	os.MkdirAll(filepath.Join(ws, "sub"), 0o755)
	for _, p := range []string{"sub/.git/hooks", "new/deeper/.git", "x/.codex/y", ".outpost", "sub/.agents"} {
		_, err := sess.CreateDirectory(protocol.FsCreateDirectoryParams{Path: filepath.Join(ws, p), Sandbox: fsWorkspace(ws)})
		if fsCode(t, err) != protocol.CodeInvalidRequest {
			t.Errorf("%s: %v", p, err)
		}
		if _, err := sess.WriteFile(protocol.FsWriteFileParams{Path: filepath.Join(ws, p, "config"), Data: []byte("x"), Sandbox: fsWorkspace(ws)}); fsCode(t, err) != protocol.CodeInvalidRequest {
			t.Errorf("write in %s: %v", p, err)
		}
	}
	// Nothing was created on the way to a refused name.
	ents, _ := os.ReadDir(ws)
	if len(ents) != 1 || ents[0].Name() != "sub" {
		t.Errorf("the workspace holds %v", ents)
	}
	if ents, _ := os.ReadDir(filepath.Join(ws, "sub")); len(ents) != 0 {
		t.Errorf("sub holds %v", ents)
	}
	// An existing nested .git is read-only too.
	os.MkdirAll(filepath.Join(ws, "a", "b", ".git"), 0o755)
	if _, err := sess.WriteFile(protocol.FsWriteFileParams{Path: filepath.Join(ws, "a", "b", ".git", "config"), Data: []byte("x"), Sandbox: fsWorkspace(ws)}); fsCode(t, err) != protocol.CodeInvalidRequest {
		t.Errorf("write in a/b/.git: %v", err)
	}
	if fsExists(filepath.Join(ws, "a", "b", ".git", "config")) {
		t.Error("wrote a/b/.git/config")
	}
	// Unsandboxed, the same names are ordinary.
	if _, err := sess.CreateDirectory(protocol.FsCreateDirectoryParams{Path: filepath.Join(ws, "sub", ".git", "hooks")}); err != nil {
		t.Fatal(err)
	}
}

// A policy without a cwd never grants a working directory — the
// executor's own, or the one its start requests default to (cwd here) —
// nor a protected name under the roots it does grant.
func TestFsPolicyWithoutCwdIsJudgedAgainstItsOwnRoots(t *testing.T) {
	cwd := fsPrivateDir(t)
	sess := fsTestSession(t)
	own, _ := os.Getwd()
	tmp := t.TempDir() // writable: ":tmpdir"
	os.MkdirAll(filepath.Join(tmp, "repo", ".git"), 0o755)
	policy := map[string]any{"mode": "workspace-write"}
	paths := []string{filepath.Join(cwd, "x"), filepath.Join(tmp, "repo", ".git", "x"), filepath.Join(tmp, "any", ".git", "x")}
	if !within("/tmp", own) && !within(os.TempDir(), own) {
		paths = append(paths, filepath.Join(own, ".outpost-fs-test-must-not-exist"))
	}
	for _, p := range paths {
		_, err := sess.WriteFile(protocol.FsWriteFileParams{Path: p, Data: []byte("x"), Sandbox: policy})
		if fsCode(t, err) != protocol.CodeInvalidRequest {
			t.Errorf("%s: %v", p, err)
		}
		if fsExists(p) {
			os.Remove(p)
			t.Errorf("wrote %s", p)
		}
	}
	if _, err := sess.WriteFile(protocol.FsWriteFileParams{Path: filepath.Join(tmp, "ok"), Data: []byte("x"), Sandbox: policy}); err != nil {
		t.Errorf("a write in the temporary directory: %v", err)
	}
}

func TestFsCopyTreeCopiesAnInnerSymlinkToOutsideAsALink(t *testing.T) {
	sess := fsTestSession(t)
	root := t.TempDir()
	ws, outside := filepath.Join(root, "ws"), filepath.Join(root, "outside")
	fsMustWrite(t, filepath.Join(outside, "secret"), "outside data")
	fsMustWrite(t, filepath.Join(outside, "dir", "f"), "outside data")
	fsMustWrite(t, filepath.Join(ws, "src", "sub", "f"), "inside")
	os.Chmod(filepath.Join(ws, "src", "sub", "f"), 0o751)
	os.Symlink(filepath.Join(outside, "secret"), filepath.Join(ws, "src", "out"))
	os.Symlink(filepath.Join(outside, "dir"), filepath.Join(ws, "src", "sub", "outdir"))
	before := fsSnapshot(t, outside)
	for dst, policy := range map[string]any{"dst": fsWorkspace(ws), "dst2": nil} {
		if _, err := sess.Copy(protocol.FsCopyParams{SourcePath: filepath.Join(ws, "src"), DestinationPath: filepath.Join(ws, dst), Recursive: true, Sandbox: policy}); err != nil {
			t.Fatalf("%s: %v", dst, err)
		}
		for link, target := range map[string]string{"out": filepath.Join(outside, "secret"), "sub/outdir": filepath.Join(outside, "dir")} {
			if got, err := os.Readlink(filepath.Join(ws, dst, link)); err != nil || got != target {
				t.Errorf("%s/%s: %q %v", dst, link, got, err)
			}
		}
		if fi, err := os.Stat(filepath.Join(ws, dst, "sub", "f")); err != nil || fi.Mode().Perm() != 0o751 {
			t.Errorf("%s/sub/f: %v %v", dst, fi, err)
		}
	}
	if diff := fsSnapshotDiff(before, fsSnapshot(t, outside)); len(diff) > 0 {
		t.Errorf("outside changed: %v", diff)
	}
	// Into itself, or into .git, is refused; so is a destination reached
	// through a link that leads out.
	os.MkdirAll(filepath.Join(ws, ".git"), 0o755)
	os.Symlink(outside, filepath.Join(ws, "outlink"))
	for _, dst := range []string{"src/sub/copy", ".git/copy", "outlink/copy"} {
		_, err := sess.Copy(protocol.FsCopyParams{SourcePath: filepath.Join(ws, "src"), DestinationPath: filepath.Join(ws, dst), Recursive: true, Sandbox: fsWorkspace(ws)})
		if fsCode(t, err) != protocol.CodeInvalidRequest || fsExists(filepath.Join(ws, dst)) {
			t.Errorf("%s: %v", dst, err)
		}
	}
	// A tree holding a protected name cannot be copied in under a policy.
	os.MkdirAll(filepath.Join(ws, "withgit", ".git"), 0o755)
	if _, err := sess.Copy(protocol.FsCopyParams{SourcePath: filepath.Join(ws, "withgit"), DestinationPath: filepath.Join(ws, "copied"), Recursive: true, Sandbox: fsWorkspace(ws)}); fsCode(t, err) != protocol.CodeInvalidRequest {
		t.Errorf("copying a .git in: %v", err)
	}
	if fsExists(filepath.Join(ws, "copied", ".git")) {
		t.Error("copied a .git in")
	}
	if diff := fsSnapshotDiff(before, fsSnapshot(t, outside)); len(diff) > 0 {
		t.Errorf("outside changed: %v", diff)
	}
}

// Errors keep codex's codes: missing -32004, invalid or denied -32600.
func TestFsErrorsKeepCodexCodes(t *testing.T) {
	sess := fsTestSession(t)
	dir := t.TempDir()
	fsMustWrite(t, filepath.Join(dir, "file"), "x")
	os.MkdirAll(filepath.Join(dir, "full", "d"), 0o755)
	missing := filepath.Join(dir, "missing")
	for name, c := range map[string]struct {
		err  error
		code int
	}{
		"read missing":             {second(sess.ReadFile(protocol.FsReadFileParams{Path: missing})), protocol.CodeNotFound},
		"metadata missing":         {second(sess.GetMetadata(protocol.FsPathParams{Path: missing})), protocol.CodeNotFound},
		"list missing":             {second(sess.ReadDirectory(protocol.FsPathParams{Path: missing})), protocol.CodeNotFound},
		"canonicalize missing":     {second(sess.Canonicalize(protocol.FsPathParams{Path: missing})), protocol.CodeNotFound},
		"remove missing, no force": {second(sess.Remove(protocol.FsRemoveParams{Path: missing, Force: ptrFalse()})), protocol.CodeNotFound},
		"remove missing, force":    {second(sess.Remove(protocol.FsRemoveParams{Path: filepath.Join(missing, "x")})), 0},
		"write in missing":         {second(sess.WriteFile(protocol.FsWriteFileParams{Path: filepath.Join(missing, "x")})), protocol.CodeNotFound},
		"mkdir in missing":         {second(sess.CreateDirectory(protocol.FsCreateDirectoryParams{Path: filepath.Join(missing, "x"), Recursive: ptrFalse()})), protocol.CodeNotFound},
		"mkdir over a file":        {second(sess.CreateDirectory(protocol.FsCreateDirectoryParams{Path: filepath.Join(dir, "file", "x")})), protocol.CodeInvalidRequest},
		"mkdir existing":           {second(sess.CreateDirectory(protocol.FsCreateDirectoryParams{Path: filepath.Join(dir, "full"), Recursive: ptrFalse()})), protocol.CodeInvalidRequest},
		"mkdir -p existing":        {second(sess.CreateDirectory(protocol.FsCreateDirectoryParams{Path: filepath.Join(dir, "full")})), 0},
		"remove full, no recurse":  {second(sess.Remove(protocol.FsRemoveParams{Path: filepath.Join(dir, "full"), Recursive: ptrFalse()})), protocol.CodeInvalidRequest},
		"read a directory":         {second(sess.ReadFile(protocol.FsReadFileParams{Path: dir})), protocol.CodeInvalidRequest},
		"write a directory":        {second(sess.WriteFile(protocol.FsWriteFileParams{Path: dir})), protocol.CodeInvalidRequest},
		"list a file":              {second(sess.ReadDirectory(protocol.FsPathParams{Path: filepath.Join(dir, "file")})), protocol.CodeInvalidRequest},
		"remove /":                 {second(sess.Remove(protocol.FsRemoveParams{Path: "/"})), protocol.CodeInvalidRequest},
	} {
		if got := fsCode(t, c.err); got != c.code {
			t.Errorf("%s: code %d, want %d (%v)", name, got, c.code, c.err)
		}
		if c.err != nil && !strings.Contains(c.err.Error(), dir) && name != "remove /" {
			t.Errorf("%s: the message does not name the path: %v", name, c.err)
		}
	}
}

func second(_ any, err error) error { return err }

// Whole-file writes, metadata and listings through the descriptors: a
// write through a symlink lands where it leads (judged there); metadata
// describes a link itself.
func TestFsWriteThroughALinkAndMetadataOfALink(t *testing.T) {
	sess := fsTestSession(t)
	root := t.TempDir()
	ws, outside := filepath.Join(root, "ws"), filepath.Join(root, "outside")
	fsMustWrite(t, filepath.Join(ws, "target"), "old")
	fsMustWrite(t, filepath.Join(outside, "target"), "outside")
	os.Chmod(filepath.Join(ws, "target"), 0o600)
	os.Symlink("target", filepath.Join(ws, "link"))
	os.Symlink("link", filepath.Join(ws, "link2"))
	os.Symlink(filepath.Join(outside, "target"), filepath.Join(ws, "outlink"))
	if _, err := sess.WriteFile(protocol.FsWriteFileParams{Path: filepath.Join(ws, "link2"), Data: []byte("new"), Sandbox: fsWorkspace(ws)}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "target")); string(b) != "new" {
		t.Errorf("target holds %q", b)
	}
	if fi, err := os.Lstat(filepath.Join(ws, "target")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the mode was not kept: %v %v", fi, err)
	}
	if l, err := os.Readlink(filepath.Join(ws, "link")); err != nil || l != "target" {
		t.Errorf("the link was replaced: %q %v", l, err)
	}
	if _, err := sess.WriteFile(protocol.FsWriteFileParams{Path: filepath.Join(ws, "outlink"), Data: []byte("x"), Sandbox: fsWorkspace(ws)}); fsCode(t, err) != protocol.CodeInvalidRequest {
		t.Errorf("a write through a link out: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "target")); string(b) != "outside" {
		t.Errorf("outside/target holds %q", b)
	}
	res, err := sess.GetMetadata(protocol.FsPathParams{Path: filepath.Join(ws, "link")})
	if md, ok := res.(protocol.FsMetadata); err != nil || !ok || !md.IsSymlink || md.IsFile {
		t.Errorf("metadata of a link: %+v %v", res, err)
	}
	res, err = sess.GetMetadata(protocol.FsPathParams{Path: filepath.Join(ws, "target")})
	if md, ok := res.(protocol.FsMetadata); err != nil || !ok || !md.IsFile || md.Size != 3 || md.Mode != 0o600 || md.ModifiedAtMs == 0 {
		t.Errorf("metadata of a file: %+v %v", res, err)
	}
	res, err = sess.Canonicalize(protocol.FsPathParams{Path: filepath.Join(ws, "link2")})
	if c, ok := res.(protocol.FsCanonicalizeResult); err != nil || !ok || c.Path != filepath.Join(ws, "target") {
		t.Errorf("canonicalize: %+v %v", res, err)
	}
	res, err = sess.ReadDirectory(protocol.FsPathParams{Path: ws, Sandbox: fsWorkspace(ws)})
	if l, ok := res.(protocol.FsReadDirectoryResult); err != nil || !ok || len(l.Entries) != 4 || l.Entries[0].FileName != "link" || !l.Entries[0].IsSymlink {
		t.Errorf("listing: %+v %v", res, err)
	}
}

// A recursive remove is refused when something inside is less writable,
// and removes nothing then.
func TestFsRecursiveRemoveRefusesATreeHoldingProtectedOrNonePaths(t *testing.T) {
	sess := fsTestSession(t)
	root := t.TempDir()
	ws := filepath.Join(root, "ws")
	fsMustWrite(t, filepath.Join(ws, "a", "f"), "x")
	fsMustWrite(t, filepath.Join(ws, "a", "b", ".git", "config"), "x")
	fsMustWrite(t, filepath.Join(ws, "c", "secret", "k"), "x")
	policy := map[string]any{"entries": []map[string]any{{"path": ":root", "access": "read"}, {"path": ws, "access": "write"}, {"path": filepath.Join(ws, "c", "secret"), "access": "none"}}}
	for _, p := range []string{"a", "c", ".", "a/b/.git"} {
		_, err := sess.Remove(protocol.FsRemoveParams{Path: filepath.Join(ws, p), Sandbox: policy})
		if fsCode(t, err) != protocol.CodeInvalidRequest {
			t.Errorf("%s: %v", p, err)
		}
	}
	for _, f := range []string{"a/f", "a/b/.git/config", "c/secret/k"} {
		if !fsExists(filepath.Join(ws, f)) {
			t.Errorf("%s was removed", f)
		}
	}
	// In a shared temporary directory (writable under workspace-write, not
	// scanned for protected names) a nested .git is found by the walk.
	tmp := t.TempDir()
	files := []string{"repo/z/vendor/.git/HEAD"}
	for i := range 32 {
		files = append(files, fmt.Sprintf("repo/d%d/f", i), fmt.Sprintf("repo/f%d", i))
	}
	for _, f := range files {
		fsMustWrite(t, filepath.Join(tmp, f), "x")
	}
	_, err := sess.Remove(protocol.FsRemoveParams{Path: filepath.Join(tmp, "repo"), Sandbox: map[string]any{"mode": "workspace-write"}})
	if fsCode(t, err) != protocol.CodeInvalidRequest {
		t.Errorf("remove a tree holding .git in the temporary directory: %v", err)
	}
	for _, f := range files {
		if !fsExists(filepath.Join(tmp, f)) {
			t.Errorf("%s was removed", f)
		}
	}
	if _, err := sess.Remove(protocol.FsRemoveParams{Path: filepath.Join(tmp, "repo", "d0"), Sandbox: map[string]any{"mode": "workspace-write"}}); err != nil || fsExists(filepath.Join(tmp, "repo", "d0")) {
		t.Errorf("remove a tree without one: %v", err)
	}
}

// A handle's digest is in the algorithm the client named on fs/create or
// fs/open, for blocks in order or not, and fs/hash gives the same; a name
// the executor does not know is refused before anything is created.
func TestHandlesDigestInTheAlgorithmAskedFor(t *testing.T) {
	sess := NewSession(fsTestConfig(t), "test")
	dir := t.TempDir()
	data := make([]byte, 3<<20+11)
	for i := range data {
		data[i] = byte(rand.IntN(256))
	}
	want := func(alg string) string {
		h, _ := digest.New(alg)
		h.Write(data)
		return digest.Result(alg, h, 0).Sum(alg)
	}
	for _, alg := range []string{"", protocol.DigestSHA256, protocol.DigestXXH3} {
		p := filepath.Join(dir, "f"+alg)
		if _, err := sess.Create(protocol.FsCreateParams{HandleID: "w", Path: p, Digest: alg}); err != nil {
			t.Fatal(err)
		}
		for _, off := range []int{1 << 20, 0, 2 << 20, 3 << 20} { // the second block first
			if _, err := sess.WriteBlock(protocol.FsWriteBlockParams{HandleID: "w", Offset: uint64(off), Chunk: data[off:min(off+1<<20, len(data))]}); err != nil {
				t.Fatal(err)
			}
		}
		res, err := sess.Close(protocol.FsCloseParams{HandleID: "w"})
		if err != nil {
			t.Fatal(err)
		}
		if d := res.(protocol.FsCloseResult).Digest; d == nil || d.Sum(alg) != want(alg) || d.Size != uint64(len(data)) {
			t.Fatalf("%q: written digest %+v, want %s", alg, d, want(alg))
		}
		if _, err := sess.Open(protocol.FsOpenParams{HandleID: "r", Path: p, Digest: alg}); err != nil {
			t.Fatal(err)
		}
		for off := 0; off < len(data); off += 1 << 20 {
			if _, err := sess.ReadBlock(protocol.FsReadBlockParams{HandleID: "r", Offset: uint64(off), Len: 1 << 20}); err != nil {
				t.Fatal(err)
			}
		}
		if res, err = sess.Close(protocol.FsCloseParams{HandleID: "r"}); err != nil {
			t.Fatal(err)
		}
		if d := res.(protocol.FsCloseResult).Digest; d == nil || d.Sum(alg) != want(alg) {
			t.Fatalf("%q: read digest %+v", alg, d)
		}
		hr, err := sess.Hash(protocol.FsHashParams{Path: p, Digest: alg})
		if err != nil || hr.(protocol.FsHashResult).Sum(alg) != want(alg) {
			t.Fatalf("%q: fs/hash %+v, %v", alg, hr, err)
		}
	}
	bad := filepath.Join(dir, "bad")
	if _, err := sess.Create(protocol.FsCreateParams{HandleID: "x", Path: bad, Digest: "md5"}); protocol.KindOf(err) != protocol.KindInvalid {
		t.Fatalf("fs/create with md5: %v", err)
	}
	if _, err := sess.Open(protocol.FsOpenParams{HandleID: "x", Path: filepath.Join(dir, "f"), Digest: "crc"}); protocol.KindOf(err) != protocol.KindInvalid {
		t.Fatalf("fs/open with crc: %v", err)
	}
	if _, err := sess.Hash(protocol.FsHashParams{Path: filepath.Join(dir, "f"), Digest: "SHA256"}); protocol.KindOf(err) != protocol.KindInvalid {
		t.Fatalf("fs/hash with SHA256: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 3 {
		t.Fatalf("refused calls left files: %v", entries)
	}
}

// Pooled read buffers come back with the right bytes whatever block they
// held before, and only buffers of the pooled size go back to the pool.
func TestReadBlockBuffersAreReusedCleanly(t *testing.T) {
	sess := NewSession(fsTestConfig(t), "test")
	p := filepath.Join(t.TempDir(), "f")
	data := make([]byte, 3*pooledBlockBytes-5)
	for i := range data {
		data[i] = byte(rand.IntN(256))
	}
	os.WriteFile(p, data, 0o644)
	if _, err := sess.Open(protocol.FsOpenParams{HandleID: "r", Path: p}); err != nil {
		t.Fatal(err)
	}
	for _, off := range []int{2 * pooledBlockBytes, 0, pooledBlockBytes, 0} {
		res, err := sess.ReadBlock(protocol.FsReadBlockParams{HandleID: "r", Offset: uint64(off), Len: pooledBlockBytes})
		if err != nil {
			t.Fatal(err)
		}
		got := res.(protocol.FsReadBlockResult).Chunk
		if !bytes.Equal(got, data[off:min(off+pooledBlockBytes, len(data))]) {
			t.Fatalf("block at %d differs", off)
		}
		ReleaseBlock(res)
	}
	small := make([]byte, 10, 100)
	ReleaseBlock(protocol.FsReadBlockResult{Chunk: small}) // not the pool's size: left alone
	ReleaseBlock(protocol.Empty{})
}
