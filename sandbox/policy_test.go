package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func resolve(t *testing.T, p Policy, cwd string) Resolved {
	t.Helper()
	r, err := p.Resolve(Env{Cwd: cwd, TempDir: filepath.Join(cwd, "tmp")})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestReadOnlyPolicyGrantsReadEverywhereAndWriteNowhere(t *testing.T) {
	cwd := t.TempDir()
	r := resolve(t, Policy{Mode: ModeReadOnly}, cwd)
	for _, p := range []string{"/", "/etc/passwd", cwd, filepath.Join(cwd, "x")} {
		if got := r.Access(p); got != AccessRead {
			t.Errorf("%s: %s", p, got)
		}
	}
	if r.Network {
		t.Error("read-only enabled the network")
	}
}

func TestWorkspaceWriteProtectsGitAndOutpostInsideWritableRoots(t *testing.T) {
	cwd := t.TempDir()
	os.Mkdir(filepath.Join(cwd, ".git"), 0o755)
	os.Mkdir(filepath.Join(cwd, ".outpost"), 0o755)
	r := resolve(t, Policy{Mode: ModeWorkspaceWrite}, cwd)
	cases := map[string]Access{
		filepath.Join(cwd, "src/main.go"):    AccessWrite,
		filepath.Join(cwd, ".git/config"):    AccessRead,
		filepath.Join(cwd, ".outpost/x"):     AccessRead,
		filepath.Join(cwd, ".gitignore"):     AccessWrite, // a sibling, not the protected dir
		"/etc/hosts":                         AccessRead,
		filepath.Join(cwd, "tmp", "scratch"): AccessWrite,
	}
	for p, want := range cases {
		if got := r.Access(p); got != want {
			t.Errorf("%s: %s, want %s", p, got, want)
		}
	}
}

func TestGitdirFileProtectsTheRealGitDirectory(t *testing.T) {
	cwd := t.TempDir()
	real := filepath.Join(t.TempDir(), "worktrees", "w1")
	os.MkdirAll(real, 0o755)
	os.WriteFile(filepath.Join(cwd, ".git"), []byte("gitdir: "+real+"\n"), 0o644)
	p := Policy{Mode: ModeWorkspaceWrite, WritableRoots: []string{filepath.Dir(filepath.Dir(real))}}
	r := resolve(t, p, cwd)
	if got := r.Access(filepath.Join(real, "HEAD")); got != AccessRead {
		t.Fatalf("the gitdir behind a .git file is %s, want read", got)
	}
	if got := r.Access(filepath.Join(cwd, ".git")); got != AccessRead {
		t.Fatalf(".git file is %s", got)
	}
}

func TestMostSpecificEntryWinsAndNoneBeatsWriteBeatsRead(t *testing.T) {
	cwd := t.TempDir()
	p := Policy{Entries: []Entry{
		{SymRoot, AccessRead},
		{"/srv", AccessWrite},
		{"/srv/secret", AccessNone},
		{"/data", AccessRead},
		{"/data", AccessWrite},
		{"/both", AccessWrite},
		{"/both", AccessNone},
	}}
	r := resolve(t, p, cwd)
	cases := map[string]Access{
		"/srv/app":        AccessWrite,
		"/srv/secret/key": AccessNone,
		"/srv/secretary":  AccessWrite, // component boundary
		"/data/x":         AccessWrite,
		"/both/x":         AccessNone,
		"/usr/bin":        AccessRead,
	}
	for path, want := range cases {
		if got := r.Access(path); got != want {
			t.Errorf("%s: %s, want %s", path, got, want)
		}
	}
	if (Resolved{Entries: []Entry{{"/a", AccessWrite}}}).Access("/b") != AccessNone {
		t.Error("no matching entry must mean none")
	}
}

func TestSymlinkedRootsResolveToWhatTheKernelSees(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	os.Mkdir(real, 0o755)
	link := filepath.Join(dir, "link")
	os.Symlink(real, link)
	r := resolve(t, Policy{Entries: []Entry{{":root", AccessRead}, {link, AccessNone}}}, dir)
	if got := r.Access(filepath.Join(real, "f")); got != AccessNone {
		t.Fatalf("path under the symlink's target: %s", got)
	}
}

func TestWorkspacesNamedThroughASymlinkAreRefused(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "etc-like")
	os.Mkdir(target, 0o755)
	ws := filepath.Join(dir, "ws")
	os.Mkdir(ws, 0o755)
	os.Symlink(target, filepath.Join(ws, "docs")) // planted by an earlier command
	planted := filepath.Join(ws, "docs")
	for name, tc := range map[string]struct {
		p   Policy
		env Env
	}{
		"cwd":           {Policy{Mode: ModeWorkspaceWrite}, Env{Cwd: planted}},
		"read-only cwd": {Policy{Mode: ModeReadOnly}, Env{Cwd: planted}},
		"project root":  {Policy{Mode: ModeWorkspaceWrite}, Env{Cwd: ws, ProjectRoots: []string{planted}}},
		"writable root": {Policy{Mode: ModeWorkspaceWrite, WritableRoots: []string{planted + "/sub"}}, Env{Cwd: ws}},
		"write entry":   {Policy{Entries: []Entry{{":root", AccessRead}, {planted, AccessWrite}}}, Env{Cwd: ws}},
	} {
		if _, err := tc.p.Resolve(tc.env); !errors.Is(err, ErrSymlinkedWorkspace) {
			t.Errorf("%s: %v, want ErrSymlinkedWorkspace", name, err)
		}
	}
	if _, err := (Policy{Mode: ModeWorkspaceWrite}).Resolve(Env{Cwd: target}); err != nil {
		t.Fatalf("the real path is fine: %v", err)
	}
}

func TestFullAccessIsFullWriteWithNetwork(t *testing.T) {
	r := resolve(t, Policy{Mode: ModeFullAccess}, t.TempDir())
	if !r.FullWrite() || !r.Network {
		t.Fatalf("%+v", r)
	}
	if resolve(t, Policy{Mode: ModeWorkspaceWrite}, t.TempDir()).FullWrite() {
		t.Fatal("workspace-write reported full write")
	}
}

func TestParsePolicyRejectsNonsense(t *testing.T) {
	for _, bad := range []string{
		`{"mode":"yolo"}`,
		`{"entries":[{"path":"relative","access":"read"}]}`,
		`{"entries":[{"path":"/x","access":"maybe"}]}`,
		`{"mode":"read-only","protectedNames":["a/b"]}`,
		`{"mode":"workspace-write","writableRoots":["rel"]}`,
		`{"mode":"read-only"} {}`,
		`not json`,
	} {
		if _, err := ParsePolicy([]byte(bad)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	p, err := ParsePolicy([]byte(`{"mode":"danger-full-access","network":true}`))
	if err != nil || p.Mode != ModeFullAccess || !p.Network {
		t.Fatalf("%+v %v", p, err)
	}
	p, err = ParsePolicy([]byte(`{"entries":[{"path":":root","access":"read"},{"path":"/w","access":"deny"}]}`))
	if err != nil || len(p.Entries) != 2 || p.Entries[1].Access != AccessNone {
		t.Fatalf("%+v %v", p, err)
	}
}

func FuzzParsePolicy(f *testing.F) {
	for _, s := range []string{`{"mode":"workspace-write","writableRoots":["/srv"]}`, `{"entries":[{"path":":root","access":"read"}]}`, `{"mode":"read-only","network":true}`, `{}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParsePolicy(data)
		if err != nil {
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("accepted an invalid policy: %v", err)
		}
		r, err := p.Resolve(Env{Cwd: "/nonexistent-cwd"})
		if err != nil {
			return
		}
		for _, e := range r.Entries {
			if e.Path == "" || e.Path[0] != '/' {
				t.Fatalf("resolved a non-absolute path %q", e.Path)
			}
		}
		r.Access("/x/y")
	})
}

func TestClassifyFlagsOnlyLikelySandboxDenials(t *testing.T) {
	cwd := t.TempDir()
	r := resolve(t, Policy{Mode: ModeWorkspaceWrite}, cwd)
	lines := func(text string) func(func(string) bool) {
		return func(yield func(string) bool) {
			for _, l := range strings.Split(text, "\n") {
				if !yield(l) {
					return
				}
			}
		}
	}
	cases := []struct {
		name   string
		code   int32
		signal int32
		out    string
		want   bool
	}{
		{"success", 0, 0, "permission denied", false},
		{"could not execute", 126, 0, "Permission denied", false},
		{"not found", 127, 0, "sh: foo: not found", false},
		{"SIGSYS", 159, 31, "", true},
		{"outside the writable roots", 2, 0, "sh: 1: cannot create /etc/outpost-x: Permission denied", true},
		{"read-only file system", 1, 0, "touch: cannot touch '/usr/x': Read-only file system", true},
		{"no path", 1, 0, "socket: Operation not permitted", true},
		{"inside the workspace (file permissions)", 1, 0, "cat: " + cwd + "/secret: Permission denied", false},
		{"the word sandbox alone", 1, 0, "error: sandbox tests failed", false},
		{"ordinary failure", 3, 0, "FAIL: 2 tests", false},
	}
	for _, c := range cases {
		if got := r.Classify(c.code, c.signal, lines(c.out)); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// The helper is the running executable itself, pinned by /proc/self/exe:
// a binary replaced on disk during an upgrade is not re-executed with a
// policy an older build wrote.
func TestHelperIsTheRunningExecutableNotItsPath(t *testing.T) {
	p, err := self()
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS == "linux" && p != "/proc/self/exe" {
		t.Fatalf("helper path %q, want /proc/self/exe", p)
	}
}

func TestHelperIdentityComparesSourcesAlwaysAndModulesWhenBothKnowThem(t *testing.T) {
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{"src:1 deps:a", "src:1 deps:a", true},
		{"src:1 deps:a", "src:1 deps:none", true},
		{"src:1 deps:a", "src:1 deps:b", false},
		{"src:1 deps:a", "src:2 deps:a", false},
		{"", "", false},
		{"garbage", "src:1 deps:a", false},
	} {
		if got := sameIdentity(c.a, c.b); got != c.same {
			t.Errorf("%q vs %q: %v", c.a, c.b, got)
		}
	}
	if id := Identity(); !strings.HasPrefix(id, "src:") || !strings.Contains(id, " deps:") {
		t.Fatalf("identity %q", id)
	}
}
