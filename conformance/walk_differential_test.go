package conformance

import (
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// walkCase is one fs/walk request of the comparison: a path under the
// run's base directory, options and a sandbox (built for that base).
type walkCase struct {
	name    string
	path    string // relative to the base; "" is the base itself
	options any
	sandbox func(base string) any
	// codeOnly compares the error code alone: the wording of a JSON
	// decoding error is serde's on one side and encoding/json's on the
	// other.
	codeOnly bool
}

// walkOptions are fs/walk options with generous limits and changes.
func walkOptions(kv ...any) map[string]any {
	o := map[string]any{"maxDepth": 10, "maxDirectories": 100, "maxEntries": 100, "followDirectorySymlinks": false}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(o, kv[i].(string))
			continue
		}
		o[kv[i].(string)] = kv[i+1]
	}
	return o
}

// walkSandbox is codex's fs sandbox context: read everywhere unless
// noRoot, plus entries (path relative to base, access).
func walkSandbox(noRoot bool, entries ...string) func(base string) any {
	return func(base string) any {
		es := []any{}
		if !noRoot {
			es = append(es, map[string]any{"path": map[string]any{"type": "special", "value": map[string]any{"kind": "root"}}, "access": "read"})
		}
		for i := 0; i+1 < len(entries); i += 2 {
			es = append(es, map[string]any{"path": map[string]any{"type": "path", "path": "file://" + filepath.Join(base, entries[i])}, "access": entries[i+1]})
		}
		return map[string]any{
			"permissions": map[string]any{"type": "managed", "file_system": map[string]any{"type": "restricted", "entries": es}, "network": "restricted"},
			"cwd":         "file://" + filepath.Join(base, "ws"), "windowsSandboxLevel": "disabled", "windowsSandboxPrivateDesktop": false, "useLegacyLandlock": false,
		}
	}
}

// walkTree builds the trees every case walks, under base.
func walkTree(t *testing.T, base string) {
	t.Helper()
	dirs := []string{"t/.h/i", "t/a", "t/a-b", "t/d/e", "t/B", "t/_u", "t/sp ace", "t/uni-é", "t/z_real/in", "t/br[a]c#?%",
		"outside/o", "ex3/a", "ex2/sub", "nosub", "full/a", "full2/a/x", "dup/z",
		"ws/d1/in", "ws/d2/in", "ws/d3", "ws/sub/secret/inner", "ws/.git"}
	files := []string{"t/.hf", "t/a/x", "t/a-b/y", "t/d/e/deep", "t/f", "t/z_real/in/k", "outside/o/x", "ex3/a/1", "ex3/a/2",
		"nosub/f", "full/b", "full2/b", "ws/a.txt", "ws/nf", "ws/d1/in/x", "ws/sub/secret/s.txt"}
	links := [][2]string{{"t/lf", "f"}, {"t/ld", "d"}, {"t/dangle", "nowhere"}, {"t/d/loop", "."}, {"t/a_link", "z_real"},
		{"t/.hl", "z_real"}, {"t/vis", ".h"}, {"t/out", "../outside"}, {"t/self", "self"}, {"dup/a_link", "z"},
		{"ws/lsec", "sub/secret"}, {"ws/lout", "../outside"}, {"ws/ld1", "d1"}}
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(base, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range links {
		if err := os.Symlink(l[1], filepath.Join(base, l[0])); err != nil {
			t.Fatal(err)
		}
	}
	mkfifo(t, filepath.Join(base, "t", "fifo"))
	// Larger than codex's caps: more directories than maxDirectories
	// allows, more files than maxEntries and than codex's 4 MiB output
	// budget holds.
	for i := 0; i < 10_050; i++ {
		if err := os.MkdirAll(filepath.Join(base, "many-dirs", fmt.Sprintf("d%05d", i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(base, "many-files"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := 50_010; i > 0; i-- { // created in reverse: the listing is sorted, not the directory's order
		if err := os.WriteFile(filepath.Join(base, "many-files", fmt.Sprintf("f%05d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func walkCases() []walkCase {
	follow := walkOptions("followDirectorySymlinks", true)
	max := walkOptions("maxDepth", 64, "maxDirectories", 10_000, "maxEntries", 50_000)
	cases := []walkCase{
		{name: "tree", path: "t", options: walkOptions()},
		{name: "tree, following links", path: "t", options: follow},
		{name: "tree, hidden pruned", path: "t", options: walkOptions("pruneHiddenDirectories", true)},
		{name: "tree, following, hidden pruned", path: "t", options: walkOptions("followDirectorySymlinks", true, "pruneHiddenDirectories", true)},
		{name: "hidden root is read", path: "t/.h", options: walkOptions("pruneHiddenDirectories", true)},
		{name: "exactly the entry limit", path: "ex3", options: walkOptions("maxEntries", 3)},
		{name: "one entry over", path: "ex3", options: walkOptions("maxEntries", 2)},
		{name: "exactly the directory limit", path: "ex2", options: walkOptions("maxDirectories", 2)},
		{name: "one directory over", path: "ex2", options: walkOptions("maxDirectories", 1)},
		{name: "no directory to read", path: "nosub", options: walkOptions("maxDirectories", 1)},
		{name: "full, last directory empty", path: "full", options: walkOptions("maxEntries", 2)},
		{name: "full, last directory not empty", path: "full2", options: walkOptions("maxEntries", 2)},
		{name: "full, directory unread", path: "full", options: walkOptions("maxEntries", 2, "maxDirectories", 1)},
		{name: "a duplicate is not a directory to read", path: "dup", options: walkOptions("followDirectorySymlinks", true, "maxDirectories", 2)},
		{name: "at the maximums", path: "t", options: max},
		{name: "more directories than the cap", path: "many-dirs", options: max},
		{name: "more files than the output budget", path: "many-files", options: max},
		{name: "more files than maxEntries", path: "many-files", options: walkOptions("maxEntries", 20_000)},
		{name: "unknown option", path: "t", options: walkOptions("bogus", 1)},
		{name: "depth over", path: "t", options: walkOptions("maxDepth", 65)},
		{name: "directories over", path: "t", options: walkOptions("maxDirectories", 10_001)},
		{name: "entries over", path: "t", options: walkOptions("maxEntries", 50_001)},
		{name: "zero entries", path: "t", options: walkOptions("maxEntries", 0)},
		{name: "zero directories", path: "t", options: walkOptions("maxDirectories", 0)},
		{name: "zero and over", path: "t", options: walkOptions("maxEntries", 0, "maxDepth", 65)},
		{name: "zero limits, missing path", path: "missing", options: walkOptions("maxEntries", 0)},
		{name: "no options", path: "t"},
		{name: "no maxDepth", path: "t", options: walkOptions("maxDepth", nil)},
		{name: "no maxDirectories", path: "t", options: walkOptions("maxDirectories", nil)},
		{name: "no maxEntries", path: "t", options: walkOptions("maxEntries", nil)},
		{name: "no followDirectorySymlinks", path: "t", options: walkOptions("followDirectorySymlinks", nil)},
		{name: "negative depth", path: "t", options: walkOptions("maxDepth", -1), codeOnly: true},
		{name: "fractional depth", path: "t", options: walkOptions("maxDepth", 1.5), codeOnly: true},
		{name: "depth as a string", path: "t", options: walkOptions("maxDepth", "5"), codeOnly: true},
		{name: "follow as a number", path: "t", options: walkOptions("followDirectorySymlinks", 1), codeOnly: true},
		{name: "root missing", path: "t/missing", options: walkOptions()},
		{name: "root a file", path: "t/f", options: walkOptions()},
		{name: "root a fifo", path: "t/fifo", options: walkOptions()},
		{name: "root a symlink", path: "t/ld", options: walkOptions()},
		{name: "root a symlink, following", path: "t/ld", options: follow},
		{name: "root a symlink to a file, following", path: "t/lf", options: follow},
		{name: "root dangling", path: "t/dangle", options: walkOptions()},
		{name: "root a loop", path: "t/self", options: walkOptions()},
		{name: "root under a file", path: "t/f/x", options: walkOptions()},
		{name: "root with a trailing slash", path: "t/d/", options: walkOptions()},
		{name: "root with dot-dot", path: "t/a/../d", options: walkOptions()},
	}
	for _, d := range []int{0, 1, 2} {
		cases = append(cases, walkCase{name: fmt.Sprintf("depth %d", d), path: "t", options: walkOptions("maxDepth", d)},
			walkCase{name: fmt.Sprintf("depth %d, following", d), path: "t", options: walkOptions("maxDepth", d, "followDirectorySymlinks", true)})
	}
	for _, n := range []int{1, 3, 6, 11} {
		cases = append(cases, walkCase{name: fmt.Sprintf("%d entries", n), path: "t", options: walkOptions("maxEntries", n)})
	}
	for _, n := range []int{1, 2, 3, 4} {
		cases = append(cases, walkCase{name: fmt.Sprintf("%d directories, following", n), path: "t", options: walkOptions("maxDirectories", n, "followDirectorySymlinks", true)})
	}
	shut := walkSandbox(false, "ws/nf", "none", "ws/d1", "none", "ws/d2", "none", "ws/sub/secret", "none")
	wsOnly := walkSandbox(true, "ws", "read")
	cases = append(cases,
		walkCase{name: "sandbox: denied directories", path: "ws", options: walkOptions(), sandbox: shut},
		walkCase{name: "sandbox: denied directories, following", path: "ws", options: follow, sandbox: shut},
		walkCase{name: "sandbox: denied directories count", path: "ws", options: walkOptions("maxDirectories", 2), sandbox: shut},
		walkCase{name: "sandbox: the denied directory itself", path: "ws/d1", options: walkOptions(), sandbox: shut},
		walkCase{name: "sandbox: inside a denied directory", path: "ws/d1/in", options: walkOptions(), sandbox: shut},
		walkCase{name: "sandbox: a file inside a denied directory", path: "ws/d1/in/x", options: walkOptions(), sandbox: shut},
		walkCase{name: "sandbox: a denied file", path: "ws/nf", options: walkOptions(), sandbox: shut},
		walkCase{name: "sandbox: a link to a denied directory", path: "ws/lsec", options: follow, sandbox: shut},
		walkCase{name: "sandbox: the workspace only", path: "ws", options: walkOptions(), sandbox: wsOnly},
		walkCase{name: "sandbox: the workspace only, following", path: "ws", options: follow, sandbox: wsOnly},
		walkCase{name: "sandbox: outside the workspace", path: "outside", options: walkOptions(), sandbox: wsOnly},
		walkCase{name: "sandbox: missing outside the workspace", path: "outside/missing", options: walkOptions(), sandbox: wsOnly},
		walkCase{name: "sandbox: a link out of the workspace", path: "ws/lout", options: follow, sandbox: wsOnly},
		walkCase{name: "sandbox: malformed", path: "ws", options: walkOptions(), sandbox: func(string) any { return map[string]any{"bogus": 1} }, codeOnly: true},
	)
	return cases
}

// walkObserve renders a reply with the run's base removed from every
// path (decoded from its URI: the two servers percent-encode different
// sets of characters, e.g. '[').
func walkObserve(t *testing.T, base string, m map[string]any, codeOnly bool) string {
	t.Helper()
	if e, ok := m["error"].(map[string]any); ok {
		if codeOnly {
			return fmt.Sprintf("error:%v", e["code"])
		}
		return fmt.Sprintf("error:%v:%v", e["code"], strings.ReplaceAll(fmt.Sprint(e["message"]), base, "$BASE"))
	}
	res, _ := m["result"].(map[string]any)
	if res == nil {
		return fmt.Sprintf("no result: %v", m)
	}
	rel := func(u any) string {
		s, _ := u.(string)
		pu, err := url.Parse(s)
		if err != nil || pu.Scheme != "file" {
			return "bad URI " + s
		}
		p := pu.Path
		if r, err := filepath.Rel(base, p); err == nil {
			return r
		}
		return p
	}
	var b strings.Builder
	entries, _ := res["entries"].([]any)
	errs, _ := res["errors"].([]any)
	keys := make([]string, 0, len(res))
	for k := range res {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Fprintf(&b, "fields=%v truncated=%v n=%d", keys, res["truncated"], len(entries))
	if len(entries) > 40 {
		// Large listings: the first and last few, and the count.
		head, tail := entries[:20], entries[len(entries)-20:]
		entries = append(append([]any{}, head...), append([]any{"…"}, tail...)...)
	}
	for _, e := range entries {
		em, ok := e.(map[string]any)
		if !ok {
			b.WriteString(" …")
			continue
		}
		fmt.Fprintf(&b, " %s:%v", rel(em["path"]), em["kind"])
	}
	for _, e := range errs {
		em, _ := e.(map[string]any)
		fmt.Fprintf(&b, " error[%s: %v]", rel(em["path"]), em["message"])
	}
	return b.String()
}

// TestDifferentialWalkAgainstCodexExecServer sends the same fs/walk
// requests over the same trees to outpost's executor and to codex
// 0.171's exec-server: entries, their order, truncation, errors, codes and
// messages must agree.
func TestDifferentialWalkAgainstCodexExecServer(t *testing.T) {
	ours, theirs := bothServers(t)

	run := func(url string) []observation {
		// Outside /tmp: codex's sandbox treats the temporary directories
		// specially.
		// Of one length on both sides: codex's output budget counts the
		// bytes of every path.
		base := fmt.Sprintf("/var/tmp/outpost-walkdiff-%010d", rand.Uint32())
		if err := os.Mkdir(base, 0o755); err != nil {
			t.Fatalf("no directory outside /tmp: %v", err)
		}
		t.Cleanup(func() { os.RemoveAll(base) })
		if real, err := filepath.EvalSymlinks(base); err != nil || real != base {
			t.Skipf("/var/tmp is a symlink (%s): the base paths would differ", real)
		}
		walkTree(t, base)
		w := dial(t, url)
		w.call("initialize", map[string]any{"clientName": "walk-diff"})
		w.notify("initialized")
		var obs []observation
		for _, c := range walkCases() {
			p := map[string]any{"path": "file://" + filepath.Join(base, c.path)}
			if strings.HasSuffix(c.path, "/") || strings.Contains(c.path, "..") {
				p["path"] = "file://" + base + "/" + c.path // as written, not cleaned here
			}
			if c.options != nil {
				p["options"] = c.options
			}
			if c.sandbox != nil {
				p["sandbox"] = c.sandbox(base)
			}
			obs = append(obs, observation{c.name, walkObserve(t, base, w.call("fs/walk", p), c.codeOnly)})
		}
		return obs
	}
	a, b := run(ours.URL), run(theirs.URL)
	if len(a) != len(b) {
		t.Fatalf("outpost made %d observations, codex %d", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Errorf("%s:\n  outpost: %s\n  codex:   %s", a[i].step, a[i].value, b[i].value)
		} else {
			t.Logf("%s: %s", a[i].step, a[i].value)
		}
	}
}
