package conformance

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// What codex 0.171 learns of an environment: initialize's environmentInfo
// (and environment/info, which codex asks when initialize lacks it). Both
// servers run with the same SHELL, HOME and TMPDIR; their answers must
// have the same fields, the same values where the machine decides them,
// file: URIs for every path, and the same sixteen capability flags (whose
// values differ: each is true on outpost exactly for what it implements).
func TestDifferentialEnvironmentInfo(t *testing.T) {
	home, tmp := t.TempDir(), t.TempDir()
	home, _ = filepath.EvalSymlinks(home)
	tmp, _ = filepath.EvalSymlinks(tmp)
	env := []string{"SHELL=/bin/sh", "HOME=" + home, "TMPDIR=" + tmp}
	ours, theirs := bothServers(t, env...)

	look := func(url string) (init, info map[string]any) {
		w := dial(t, url)
		res := w.call("initialize", map[string]any{"clientName": "differential"})
		r, _ := res["result"].(map[string]any)
		if r == nil {
			t.Fatalf("%s: initialize %v", url, res)
		}
		if !uuidRE.MatchString(fmt.Sprint(r["sessionId"])) {
			t.Errorf("%s: sessionId %v is not a UUID", url, r["sessionId"])
		}
		init, _ = r["environmentInfo"].(map[string]any)
		w.notify("initialized")
		info, _ = w.call("environment/info", nil)["result"].(map[string]any)
		return init, info
	}
	oInit, oInfo := look(ours.URL)
	cInit, cInfo := look(theirs.URL)
	if oInit == nil || cInit == nil {
		t.Fatalf("environmentInfo in initialize: outpost %v, codex %v", oInit != nil, cInit != nil)
	}
	for name, pair := range map[string][2]map[string]any{"outpost": {oInit, oInfo}, "codex": {cInit, cInfo}} {
		a, _ := json.Marshal(pair[0])
		b, _ := json.Marshal(pair[1])
		if string(a) != string(b) {
			t.Errorf("%s: environment/info %s differs from initialize's %s", name, b, a)
		}
	}
	if got, want := keys(oInit), keys(cInit); got != want {
		t.Errorf("fields: outpost %s, codex %s", got, want)
	}
	// Decided by the machine and the environment both servers share.
	for _, k := range []string{"shell", "cwd", "userHomeDir", "platformOs", "tempDir", "temporaryDirectories"} {
		a, _ := json.Marshal(oInit[k])
		b, _ := json.Marshal(cInit[k])
		if string(a) != string(b) {
			t.Errorf("%s: outpost %s, codex %s", k, a, b)
		} else {
			t.Logf("%s: %s", k, a)
		}
	}
	for _, k := range []string{"cwd", "userHomeDir", "tempDir"} {
		if s, _ := oInit[k].(string); !strings.HasPrefix(s, "file:///") {
			t.Errorf("outpost %s = %v, not a file: URI", k, oInit[k])
		}
	}
	oc, _ := oInit["capabilities"].(map[string]any)
	cc, _ := cInit["capabilities"].(map[string]any)
	if got, want := keys(oc), keys(cc); got != want {
		t.Errorf("capability flags: outpost %s, codex %s", got, want)
	}
	t.Logf("outpost capabilities: %v", oc)
	if _, err := os.Stat(home); err != nil {
		t.Fatal(err)
	}
}

func keys(m map[string]any) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return strings.Join(ks, ",")
}

// fs/canonicalize answers a URI with a URI, as codex 0.171's server does:
// a plain path back is what made codex 0.171 refuse outpost's answers.
func TestDifferentialCanonicalizeAnswersURIs(t *testing.T) {
	ours, theirs := bothServers(t)
	dir, _ := filepath.EvalSymlinks(t.TempDir())
	if err := os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "a", "b"), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"file://" + dir + "/a/../a/b", "file://" + dir + "/link", "file://" + dir + "/missing"} {
		var got [2]string
		for i, url := range []string{ours.URL, theirs.URL} {
			w := dial(t, url)
			w.call("initialize", map[string]any{"clientName": "differential"})
			w.notify("initialized")
			r := w.call("fs/canonicalize", map[string]any{"path": p})
			got[i] = code(r) // error wording differs: the code is compared
			if r["result"] != nil {
				got[i] = shape(r)
			}
		}
		if got[0] != got[1] {
			t.Errorf("fs/canonicalize %s:\n  outpost: %s\n  codex:   %s", p, got[0], got[1])
		} else {
			t.Logf("fs/canonicalize %s: %s", p, got[0])
		}
	}
}
