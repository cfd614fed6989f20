//go:build linux || darwin || freebsd

package remotefs

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/outpost-exec/outpost/protocol"
)

// walkTestOptions builds fs/walk options: generous limits, then changes as
// name/value pairs.
func walkTestOptions(kv ...any) *protocol.FsWalkOptions {
	u := func(n uint64) *uint64 { return &n }
	no := false
	o := &protocol.FsWalkOptions{MaxDepth: u(10), MaxDirectories: u(100), MaxEntries: u(100), FollowDirectorySymlinks: &no}
	for i := 0; i+1 < len(kv); i += 2 {
		switch v := kv[i+1]; kv[i] {
		case "depth":
			o.MaxDepth = u(uint64(v.(int)))
		case "dirs":
			o.MaxDirectories = u(uint64(v.(int)))
		case "entries":
			o.MaxEntries = u(uint64(v.(int)))
		case "follow":
			b := v.(bool)
			o.FollowDirectorySymlinks = &b
		case "prune":
			o.PruneHiddenDirectories = v.(bool)
		}
	}
	return o
}

// walkTestTree makes dirs (ending in "/"), files, and symlinks
// ("name->target") under root.
func walkTestTree(t *testing.T, root string, specs ...string) {
	t.Helper()
	for _, s := range specs {
		var err error
		switch {
		case strings.Contains(s, "->"):
			name, target, _ := strings.Cut(s, "->")
			os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o755)
			err = os.Symlink(target, filepath.Join(root, name))
		case strings.HasSuffix(s, "/"):
			err = os.MkdirAll(filepath.Join(root, s), 0o755)
		default:
			os.MkdirAll(filepath.Dir(filepath.Join(root, s)), 0o755)
			err = os.WriteFile(filepath.Join(root, s), []byte("x"), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// walkSummary renders a walk's result relative to root: "name/" for a
// directory, then "!path: message" per error, then "truncated".
func walkSummary(t *testing.T, root string, res any) string {
	t.Helper()
	r, ok := res.(protocol.FsWalkResult)
	if !ok {
		t.Fatalf("result %T", res)
	}
	if r.Entries == nil || r.Errors == nil {
		t.Fatal("nil entries or errors: null on the wire")
	}
	rel := func(u string) string {
		pu, err := url.Parse(u)
		if err != nil || pu.Scheme != "file" {
			t.Fatalf("not a file URI: %q", u)
		}
		r, err := filepath.Rel(root, pu.Path)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	var parts []string
	for _, e := range r.Entries {
		switch e.Kind {
		case protocol.WalkKindDirectory:
			parts = append(parts, rel(e.Path)+"/")
		case protocol.WalkKindFile:
			parts = append(parts, rel(e.Path))
		default:
			t.Fatalf("kind %q", e.Kind)
		}
	}
	for _, e := range r.Errors {
		parts = append(parts, "!"+rel(e.Path)+": "+e.Message)
	}
	if r.Truncated {
		parts = append(parts, "truncated")
	}
	return strings.Join(parts, " ")
}

// walkTest walks path under root and renders the result relative to it
// (walkSummary), or the error as "error CODE MESSAGE".
func walkTest(t *testing.T, sess *Session, root, path string, opts *protocol.FsWalkOptions, sandbox any) string {
	t.Helper()
	res, err := sess.Walk(protocol.FsWalkParams{Path: "file://" + filepath.Join(root, path), Options: opts, Sandbox: sandbox})
	if err != nil {
		var pe *protocol.Error
		if !errors.As(err, &pe) {
			t.Fatalf("not a protocol error: %#v", err)
		}
		return fmt.Sprintf("error %d %s", pe.Code, pe.Message)
	}
	return walkSummary(t, filepath.Join(root, path), res)
}

// The order is breadth-first, each directory's names in byte order; only
// files and directories are listed; the depth limit lists what it does
// not read and truncates nothing.
func TestWalkListsBreadthFirstInByteOrder(t *testing.T) {
	sess := fsTestSession(t)
	root := t.TempDir()
	walkTestTree(t, root, "a/x", "a-b/y", "B/", "_u/", "f", "d/e/deep", "lf->f", "ld->d", "dangle->nowhere")
	if err := syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		opts *protocol.FsWalkOptions
		want string
	}{
		{walkTestOptions(), "B/ _u/ a/ a-b/ d/ f a/x a-b/y d/e/ d/e/deep"},
		{walkTestOptions("depth", 0), "B/ _u/ a/ a-b/ d/ f"},
		{walkTestOptions("depth", 1), "B/ _u/ a/ a-b/ d/ f a/x a-b/y d/e/"},
	} {
		if got := walkTest(t, sess, root, "", c.opts, nil); got != c.want {
			t.Errorf("depth %d:\n got %s\nwant %s", *c.opts.MaxDepth, got, c.want)
		}
	}
}

// Truncation is reported exactly when something is left out: an entry
// past the limit, or a directory to read past the limit — not a limit
// met exactly, nor the depth.
func TestWalkReportsTruncationAsCodex(t *testing.T) {
	sess := fsTestSession(t)
	root := t.TempDir()
	walkTestTree(t, root, "ex3/a/1", "ex3/a/2", "ex2/sub/", "nosub/f", "full/a/", "full/b", "full2/a/x", "full2/b")
	for _, c := range []struct {
		path string
		opts *protocol.FsWalkOptions
		want string
	}{
		{"ex3", walkTestOptions("entries", 3), "a/ a/1 a/2"},
		{"ex3", walkTestOptions("entries", 2), "a/ a/1 truncated"},
		{"ex3", walkTestOptions("entries", 1), "a/ truncated"},
		{"ex2", walkTestOptions("dirs", 2), "sub/"},
		{"ex2", walkTestOptions("dirs", 1), "sub/ truncated"},
		{"ex2", walkTestOptions("depth", 0), "sub/"},
		{"nosub", walkTestOptions("dirs", 1), "f"},
		{"full", walkTestOptions("entries", 2), "a/ b"},
		{"full2", walkTestOptions("entries", 2), "a/ b truncated"},
		{"full", walkTestOptions("entries", 2, "dirs", 1), "a/ b truncated"},
	} {
		if got := walkTest(t, sess, root, c.path, c.opts, nil); got != c.want {
			t.Errorf("%s depth %d dirs %d entries %d:\n got %s\nwant %s", c.path, *c.opts.MaxDepth, *c.opts.MaxDirectories, *c.opts.MaxEntries, got, c.want)
		}
	}
}

// Hidden directories are listed but not read with pruneHiddenDirectories;
// hidden files are listed; the walk's own root is read even if hidden.
func TestWalkPrunesHiddenDirectories(t *testing.T) {
	sess := fsTestSession(t)
	root := t.TempDir()
	walkTestTree(t, root, ".h/i/", ".hf", "v/w", ".h/j")
	if got, want := walkTest(t, sess, root, "", walkTestOptions("prune", true), nil), ".h/ .hf v/ v/w"; got != want {
		t.Errorf("pruned:\n got %s\nwant %s", got, want)
	}
	if got, want := walkTest(t, sess, root, "", walkTestOptions(), nil), ".h/ .hf v/ .h/i/ .h/j v/w"; got != want {
		t.Errorf("not pruned:\n got %s\nwant %s", got, want)
	}
	if got, want := walkTest(t, sess, root, ".h", walkTestOptions("prune", true), nil), "i/ j"; got != want {
		t.Errorf("hidden root:\n got %s\nwant %s", got, want)
	}
}

// Symlinks: left out without followDirectorySymlinks; with it, a link to
// a directory is listed and walked under its own name, a link to a file
// or nowhere is still left out, and a directory already walked is listed
// but not walked again — first come, in listing order.
func TestWalkFollowsDirectorySymlinksOnce(t *testing.T) {
	sess := fsTestSession(t)
	base := t.TempDir()
	root := filepath.Join(base, "t")
	walkTestTree(t, base, "outside/o/x", "t/z_real/in/k", "t/a_link->z_real", "t/d/loop->..", "t/f", "t/lf->f",
		"t/out->../outside", "t/dangle->nowhere", "t/self->self")
	if got, want := walkTest(t, sess, root, "", walkTestOptions(), nil), "d/ f z_real/ z_real/in/ z_real/in/k"; got != want {
		t.Errorf("not following:\n got %s\nwant %s", got, want)
	}
	want := "a_link/ d/ f out/ z_real/ a_link/in/ d/loop/ out/o/ a_link/in/k out/o/x"
	if got := walkTest(t, sess, root, "", walkTestOptions("follow", true), nil); got != want {
		t.Errorf("following:\n got %s\nwant %s", got, want)
	}
	// A root that is a symlink is walked only when following.
	if got, want := walkTest(t, sess, root, "a_link", walkTestOptions(), nil), ""; got != want {
		t.Errorf("symlink root:\n got %q\nwant %q", got, want)
	}
	if got, want := walkTest(t, sess, root, "a_link", walkTestOptions("follow", true), nil), "in/ in/k"; got != want {
		t.Errorf("symlink root, following:\n got %s\nwant %s", got, want)
	}
	// A duplicate does not take a directory from the budget.
	if got, want := walkTest(t, sess, root, "", walkTestOptions("follow", true, "depth", 1, "dirs", 4), nil), "a_link/ d/ f out/ z_real/ a_link/in/ d/loop/ out/o/"; got != want {
		t.Errorf("budget:\n got %s\nwant %s", got, want)
	}
}

// The path itself: codex's codes and texts for what cannot be walked; a
// file or a symlink (not following) has nothing to list.
func TestWalkRootErrorsAsCodex(t *testing.T) {
	sess := fsTestSession(t)
	root := t.TempDir()
	walkTestTree(t, root, "f", "self->self", "d/")
	for path, want := range map[string]string{
		"missing": "error -32004 No such file or directory (os error 2)",
		"f/x":     "error -32603 Not a directory (os error 20)",
		"self":    "error -32603 Symbolic link loop (os error 40)",
		"f":       "",
		"d":       "",
	} {
		if got := walkTest(t, sess, root, path, walkTestOptions(), nil); got != want {
			t.Errorf("%s: got %q, want %q", path, got, want)
		}
	}
}

// Options: every field but pruneHiddenDirectories is required; limits of
// 0 (but the depth) and above codex's maximums are refused, zero first.
func TestWalkChecksOptionsAsCodex(t *testing.T) {
	sess := fsTestSession(t)
	root := t.TempDir()
	for _, c := range []struct {
		opts *protocol.FsWalkOptions
		want string
	}{
		{nil, "error -32602 missing field `options`"},
		{&protocol.FsWalkOptions{}, "error -32602 missing field `maxDepth`"},
		{func() *protocol.FsWalkOptions { o := walkTestOptions(); o.MaxEntries = nil; return o }(), "error -32602 missing field `maxEntries`"},
		{func() *protocol.FsWalkOptions { o := walkTestOptions(); o.FollowDirectorySymlinks = nil; return o }(), "error -32602 missing field `followDirectorySymlinks`"},
		{walkTestOptions("entries", 0), "error -32600 filesystem walk limits must be greater than zero"},
		{walkTestOptions("dirs", 0, "depth", 65), "error -32600 filesystem walk limits must be greater than zero"},
		{walkTestOptions("depth", 65), "error -32600 filesystem walk limits exceed maximums: depth=64, directories=10000, entries=50000"},
		{walkTestOptions("dirs", 10_001), "error -32600 filesystem walk limits exceed maximums: depth=64, directories=10000, entries=50000"},
		{walkTestOptions("entries", 50_001), "error -32600 filesystem walk limits exceed maximums: depth=64, directories=10000, entries=50000"},
		{walkTestOptions("depth", 0, "dirs", 10_000, "entries", 50_000), ""},
	} {
		if got := walkTest(t, sess, root, "", c.opts, nil); got != c.want {
			t.Errorf("%+v: got %q, want %q", c.opts, got, c.want)
		}
	}
	// The limits are checked before the path is looked at.
	if got, want := walkTest(t, sess, root, "missing", walkTestOptions("entries", 0), nil), "error -32600 filesystem walk limits must be greater than zero"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// walkCodexSandbox is codex's fs sandbox context: read everywhere unless
// noRoot, plus (path, access) entries.
func walkCodexSandbox(noRoot bool, entries ...string) map[string]any {
	es := []any{}
	if !noRoot {
		es = append(es, map[string]any{"path": map[string]any{"type": "special", "value": map[string]any{"kind": "root"}}, "access": "read"})
	}
	for i := 0; i+1 < len(entries); i += 2 {
		es = append(es, map[string]any{"path": map[string]any{"type": "path", "path": "file://" + entries[i]}, "access": entries[i+1]})
	}
	return map[string]any{"permissions": map[string]any{"type": "managed", "file_system": map[string]any{"type": "restricted", "entries": es}, "network": "restricted"},
		"windowsSandboxLevel": "disabled", "windowsSandboxPrivateDesktop": false, "useLegacyLandlock": false}
}

// The sandbox policy, as codex's sandboxed walk answers: a denied ("none")
// entry inside a readable directory is listed, its name being readable
// there, but not read — an error for it, and it counts as a directory;
// what nothing grants is not there at all, even through a symlink.
func TestWalkJudgedByTheSandboxPolicy(t *testing.T) {
	sess := fsTestSession(t)
	base := fsPrivateDir(t)
	ws := filepath.Join(base, "ws")
	walkTestTree(t, base, "outside/o/x", "ws/a.txt", "ws/nf", "ws/d1/in/x", "ws/d2/in/", "ws/d3/", "ws/sub/secret/s.txt",
		"ws/lsec->sub/secret", "ws/lout->../outside", "ws/ld1->d1")
	shut := walkCodexSandbox(false, filepath.Join(ws, "nf"), "none", filepath.Join(ws, "d1"), "none", filepath.Join(ws, "d2"), "none", filepath.Join(ws, "sub", "secret"), "none")
	wsOnly := walkCodexSandbox(true, ws, "read")
	const denied = "Permission denied (os error 13)"
	for _, c := range []struct {
		name, path string
		opts       *protocol.FsWalkOptions
		sandbox    any
		want       string
	}{
		{"denied entries", "ws", walkTestOptions(), shut,
			"a.txt d1/ d2/ d3/ nf sub/ sub/secret/ !d1: " + denied + " !d2: " + denied + " !sub/secret: " + denied},
		{"denied entries, following", "ws", walkTestOptions("follow", true), shut,
			"a.txt d1/ d2/ d3/ ld1/ lout/ lsec/ nf sub/ lout/o/ sub/secret/ lout/o/x !d1: " + denied + " !d2: " + denied + " !lsec: " + denied},
		{"a denied directory counts", "ws", walkTestOptions("dirs", 2), shut, "a.txt d1/ d2/ d3/ nf sub/ !d1: " + denied + " truncated"},
		{"the denied directory itself", "ws/d1", walkTestOptions(), shut, "!.: " + denied},
		{"inside a denied directory", "ws/d1/in", walkTestOptions(), shut, "error -32600 " + denied},
		{"a file inside a denied directory", "ws/d1/in/x", walkTestOptions(), shut, "error -32600 " + denied},
		{"a denied file", "ws/nf", walkTestOptions(), shut, ""},
		{"the workspace only, following", "ws", walkTestOptions("follow", true), wsOnly,
			"a.txt d1/ d2/ d3/ ld1/ lsec/ nf sub/ d1/in/ d2/in/ lsec/s.txt sub/secret/ d1/in/x"},
		{"outside the workspace", "outside", walkTestOptions(), wsOnly, "error -32004 No such file or directory (os error 2)"},
		{"missing outside the workspace", "outside/missing", walkTestOptions(), wsOnly, "error -32004 No such file or directory (os error 2)"},
		{"a link out of the workspace", "ws/lout", walkTestOptions("follow", true), wsOnly, "error -32004 No such file or directory (os error 2)"},
	} {
		if got := walkTest(t, sess, base, c.path, c.opts, c.sandbox); got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
	}
	if _, err := sess.Walk(protocol.FsWalkParams{Path: "file://" + ws, Options: walkTestOptions(), Sandbox: map[string]any{"bogus": 1}}); fsCode(t, err) != protocol.CodeInvalidParams {
		t.Errorf("a malformed sandbox: %v", err)
	}
}

// The executor's own secrets never appear: not listed, not reached
// through a symlink, not walkable — with a policy or without one.
func TestWalkNeverShowsTheExecutorsSecrets(t *testing.T) {
	base := fsPrivateDir(t)
	ws := filepath.Join(base, "ws")
	walkTestTree(t, base, "ws/a", "ws/state/key", "ws/state/sub/k2", "ws/lstate->state", "ws/lkey->state/key")
	cfg := fsTestConfig(t)
	cfg.Hidden = []string{filepath.Join(ws, "state")}
	sess := NewSession(cfg, "test")
	t.Cleanup(sess.End)
	for _, sb := range []any{nil, walkCodexSandbox(false, ws, "write")} {
		for _, follow := range []bool{false, true} {
			if got, want := walkTest(t, sess, base, "ws", walkTestOptions("follow", follow), sb), "a"; got != want {
				t.Errorf("sandbox %v follow %v:\n got %s\nwant %s", sb != nil, follow, got, want)
			}
		}
		for _, p := range []string{"ws/state", "ws/state/sub", "ws/lstate"} {
			if got, want := walkTest(t, sess, base, p, walkTestOptions("follow", true), sb), "error -32004 No such file or directory (os error 2)"; got != want {
				t.Errorf("sandbox %v, %s: got %q, want %q", sb != nil, p, got, want)
			}
		}
	}
}

// A tree larger than codex's caps, and than our own: at most the limits
// are listed, the first names in byte order whatever order the directory
// holds them in, and the walk says it was truncated.
func TestWalkBoundsATreeLargerThanTheCaps(t *testing.T) {
	sess := fsTestSession(t)
	root := t.TempDir()
	for i := 10_050; i > 0; i-- {
		if err := os.Mkdir(filepath.Join(root, fmt.Sprintf("d%05d", i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := filepath.Join(root, "d00001")
	for i := 50_010; i > 0; i-- {
		if err := os.WriteFile(filepath.Join(files, fmt.Sprintf("f%05d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	max := walkTestOptions("depth", protocol.MaxWalkDepth, "dirs", protocol.MaxWalkDirectories, "entries", protocol.MaxWalkEntries)
	res, err := sess.Walk(protocol.FsWalkParams{Path: root, Options: max})
	if err != nil {
		t.Fatal(err)
	}
	// codex's output budget ends the walk first: whole entries up to it,
	// in order — the root's 10050 directories, then d00001's files.
	r := res.(protocol.FsWalkResult)
	cost := 0
	for i, e := range r.Entries {
		want := "file://" + filepath.Join(root, fmt.Sprintf("d%05d", i+1))
		if i >= 10_050 {
			want = "file://" + filepath.Join(files, fmt.Sprintf("f%05d", i-10_050+1))
		}
		if e.Path != want {
			t.Fatalf("entry %d is %s, want %s", i, e.Path, want)
		}
		cost += len(e.Path) + walkEntryOverhead
	}
	next := len("file://"+filepath.Join(files, "f00000")) + walkEntryOverhead
	if !r.Truncated || len(r.Entries) <= 10_050 || cost > walkOutputBudget || cost+next <= walkOutputBudget {
		t.Fatalf("%d entries costing %d, truncated %v", len(r.Entries), cost, r.Truncated)
	}
	// The entry limit, within the budget: the first names in byte order.
	res, err = sess.Walk(protocol.FsWalkParams{Path: files, Options: walkTestOptions("entries", 20_000)})
	if err != nil {
		t.Fatal(err)
	}
	r = res.(protocol.FsWalkResult)
	if len(r.Entries) != 20_000 || !r.Truncated || r.Entries[19_999].Path != "file://"+filepath.Join(files, "f20000") {
		t.Fatalf("%d entries, truncated %v", len(r.Entries), r.Truncated)
	}
	// The directory limit: the root and 9999 of its directories are
	// read, then the walk stops.
	res, err = sess.Walk(protocol.FsWalkParams{Path: root, Options: walkTestOptions("depth", 1, "dirs", protocol.MaxWalkDirectories, "entries", 10_050)})
	if err != nil {
		t.Fatal(err)
	}
	if r := res.(protocol.FsWalkResult); len(r.Entries) != 10_050 || !r.Truncated {
		t.Errorf("%d entries, truncated %v", len(r.Entries), r.Truncated)
	}

	// Our own caps: the names read and the path bytes held.
	defer func(s, b int) { maxWalkScanned, maxWalkPathBytes = s, b }(maxWalkScanned, maxWalkPathBytes)
	maxWalkScanned = 20_000
	res, err = sess.Walk(protocol.FsWalkParams{Path: root, Options: max})
	if err != nil {
		t.Fatal(err)
	}
	if r := res.(protocol.FsWalkResult); len(r.Entries) != 10_050 || !r.Truncated {
		t.Errorf("scan cap: %d entries, truncated %v", len(r.Entries), r.Truncated)
	}
	maxWalkScanned, maxWalkPathBytes = 1<<21, 100_000
	res, err = sess.Walk(protocol.FsWalkParams{Path: root, Options: max})
	if err != nil {
		t.Fatal(err)
	}
	r = res.(protocol.FsWalkResult)
	held := 0
	for _, e := range r.Entries {
		held += len(e.Path)
	}
	if !r.Truncated || held > maxWalkPathBytes || len(r.Entries) == 0 {
		t.Errorf("byte cap: %d entries of %d bytes, truncated %v", len(r.Entries), held, r.Truncated)
	}
}

// A directory listed and then swapped for a symlink (or another
// directory) before it is read is reported, never read: the walk does not
// follow the swap out of the tree.
func TestWalkDoesNotFollowADirectorySwappedAfterItWasListed(t *testing.T) {
	sess := fsTestSession(t)
	base := t.TempDir()
	walkTestTree(t, base, "outside/secret", "t/d/inner", "t/e/inner")
	root := filepath.Join(base, "t")
	r, n, err := sess.fsBegin(protocol.MethodFsWalk, nil, root)
	if err != nil {
		t.Fatal(err)
	}
	o, err := walkBounds(walkTestOptions())
	if err != nil {
		t.Fatal(err)
	}
	w := &walker{r: r, o: o, visited: map[devIno]struct{}{}, buf: make([]byte, direntBufBytes),
		res: protocol.FsWalkResult{Entries: []protocol.FsWalkEntry{}, Errors: []protocol.FsWalkError{}}}
	var sd, se syscall.Stat_t
	syscall.Stat(filepath.Join(root, "d"), &sd)
	syscall.Stat(filepath.Join(root, "e"), &se)
	d := walkDir{shown: filepath.Join(n, "d"), real: filepath.Join(root, "d"), id: devIno{uint64(sd.Dev), sd.Ino}, depth: 1}
	e := walkDir{shown: filepath.Join(n, "e"), real: filepath.Join(root, "e"), id: devIno{uint64(se.Dev), se.Ino}, depth: 1}
	// d becomes a symlink out of the tree; e another directory.
	if err := os.RemoveAll(d.real); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(base, "outside"), d.real); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(e.real, e.real+".old"); err != nil {
		t.Fatal(err)
	}
	walkTestTree(t, base, "t/e/other")
	w.readQueued(d)
	w.readQueued(e)
	if len(w.res.Entries) != 0 || len(w.res.Errors) != 2 {
		t.Fatalf("entries %v errors %v", w.res.Entries, w.res.Errors)
	}
	if got := w.res.Errors[0].Message; got != "Symbolic link loop (os error 40)" && got != "Not a directory (os error 20)" {
		t.Errorf("swapped for a symlink: %s", got)
	}
	if got := w.res.Errors[1].Message; got != "No such file or directory (os error 2)" {
		t.Errorf("swapped for another directory: %s", got)
	}
}

// Every name whose target can be looked at counts toward maxEntries, as
// in codex, listed or not: a fifo, a symlink to a file, an unfollowed
// link to a directory count; a dangling link does not.
func TestWalkCountsWhatItDoesNotList(t *testing.T) {
	sess := fsTestSession(t)
	root := t.TempDir()
	for _, d := range []string{"dang", "fifo", "lf", "ld"} {
		walkTestTree(t, root, d+"/a", d+"/c", d+"/e")
	}
	walkTestTree(t, root, "dang/b_x->nowhere", "dang/d_x->nowhere", "lf/b_x->a", "lf/d_x->c", "ld/zz/", "ld/b_x->zz", "ld/d_x->zz")
	for _, f := range []string{"fifo/b_x", "fifo/d_x"} {
		if err := syscall.Mkfifo(filepath.Join(root, f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		dir    string
		follow bool
		want   string // for maxEntries 1 to 6
	}{
		{"dang", false, "a truncated | a c truncated | a c e | a c e | a c e | a c e"},
		{"fifo", false, "a truncated | a truncated | a c truncated | a c truncated | a c e | a c e"},
		{"lf", true, "a truncated | a truncated | a c truncated | a c truncated | a c e | a c e"},
		{"ld", false, "a truncated | a truncated | a c truncated | a c truncated | a c e truncated | a c e zz/"},
		{"ld", true, "a truncated | a b_x/ truncated | a b_x/ c truncated | a b_x/ c d_x/ truncated | a b_x/ c d_x/ e truncated | a b_x/ c d_x/ e zz/"},
	} {
		var got []string
		for n := 1; n <= 6; n++ {
			got = append(got, walkTest(t, sess, root, c.dir, walkTestOptions("depth", 0, "entries", n, "follow", c.follow), nil))
		}
		if g := strings.Join(got, " | "); g != c.want {
			t.Errorf("%s follow %v:\n got %s\nwant %s", c.dir, c.follow, g, c.want)
		}
	}
}
