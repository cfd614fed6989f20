package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// codexWorkspaceWrite is what codex 0.145 sends for -s workspace-write
// (captured from the real client).
const codexWorkspaceWrite = `{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[
  {"path":{"type":"special","value":{"kind":"root"}},"access":"read"},
  {"path":{"type":"special","value":{"kind":"project_roots"}},"access":"write"},
  {"path":{"type":"special","value":{"kind":"slash_tmp"}},"access":"write"},
  {"path":{"type":"special","value":{"kind":"tmpdir"}},"access":"write"},
  {"path":{"type":"special","value":{"kind":"project_roots","subpath":".git"}},"access":"read"},
  {"path":{"type":"special","value":{"kind":"project_roots","subpath":".agents"}},"access":"read"},
  {"path":{"type":"special","value":{"kind":"project_roots","subpath":".codex"}},"access":"read"}]},
  "network":"restricted"},
 "cwd":"file://WS","workspaceRoots":["file://WS"],"windowsSandboxLevel":"disabled",
 "windowsSandboxPrivateDesktop":true,"useLegacyLandlock":false}`

func TestCodexWorkspaceWriteMapsOntoOutpostsPolicy(t *testing.T) {
	ws := t.TempDir()
	tmp := t.TempDir()
	c, err := ParseContext([]byte(strings.ReplaceAll(codexWorkspaceWrite, "WS", ws)))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Codex || c.Cwd != "file://"+ws || len(c.WorkspaceRoots) != 1 || c.Policy.Network {
		t.Fatalf("%+v", c)
	}
	r, err := c.Policy.Resolve(Env{Cwd: ws, ProjectRoots: []string{ws}, TempDir: tmp, NoProjectRootFallback: true})
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]Access{
		filepath.Join(ws, "src/x.go"):      AccessWrite,
		filepath.Join(ws, ".git/config"):   AccessRead,
		filepath.Join(ws, ".codex/x.toml"): AccessRead,
		filepath.Join(tmp, "scratch"):      AccessWrite,
		"/etc/passwd":                      AccessRead,
	} {
		if got := r.Access(p); got != want {
			t.Errorf("%s: %s, want %s", p, got, want)
		}
	}
	if r.Allows(filepath.Join(ws, "sub", ".git", "hooks", "x"), true) {
		t.Error("a nested .git is writable")
	}
}

func TestCodexProjectRootsWithoutWorkspaceRootsGrantNothing(t *testing.T) {
	ws, err := os.MkdirTemp("/var/tmp", "codex-ws") // outside the writable /tmp
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(ws)
	raw := strings.ReplaceAll(codexWorkspaceWrite, `"workspaceRoots":["file://WS"],`, "")
	c, err := ParseContext([]byte(strings.ReplaceAll(raw, "WS", ws)))
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Policy.Resolve(Env{Cwd: ws, TempDir: "/tmp", NoProjectRootFallback: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Access(filepath.Join(ws, "f")); got != AccessRead {
		t.Fatalf("without workspaceRoots the cwd is %s (codex 0.145 does not fall back to it)", got)
	}
}

func TestCodexPermissionVariants(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.env"), nil, 0o644)
	os.MkdirAll(filepath.Join(dir, "deep", "er"), 0o755)
	os.WriteFile(filepath.Join(dir, "deep", "er", "b.env"), nil, 0o644)
	os.WriteFile(filepath.Join(dir, "keep.txt"), nil, 0o644)
	cases := map[string]struct {
		json    string
		full    bool // unsandboxed full access
		network bool
		check   func(t *testing.T, r Resolved)
	}{
		"disabled": {json: `{"permissions":{"type":"disabled"}}`, full: true, network: true},
		"external, network restricted": {json: `{"permissions":{"type":"external","network":"restricted"}}`, check: func(t *testing.T, r Resolved) {
			if !r.FullWrite() || r.Network {
				t.Errorf("want full write, no network: %+v", r)
			}
		}},
		"unrestricted, network enabled": {json: `{"permissions":{"type":"managed","file_system":{"type":"unrestricted"},"network":"enabled"}}`, full: true, network: true},
		"minimal, a path, a deny glob under the project roots": {json: `{"permissions":{"type":"managed","file_system":{"type":"restricted","glob_scan_max_depth":4,"entries":[
			{"path":{"type":"special","value":{"kind":"minimal"}},"access":"read"},
			{"path":{"type":"path","path":"file://` + dir + `"},"access":"write"},
			{"path":{"type":"glob_pattern","pattern":"codex-project-roots://**/*.env"},"access":"none"},
			{"path":{"type":"special","value":{"kind":"unknown","path":":future"}},"access":"read"}]},"network":"enabled"},
			"workspaceRoots":["file://` + dir + `"],"windowsSandboxLevel":"elevated"}`, network: true, check: func(t *testing.T, r Resolved) {
			for p, want := range map[string]Access{
				"/usr/bin":                                AccessRead,
				filepath.Join(dir, "keep.txt"):            AccessWrite,
				filepath.Join(dir, "a.env"):               AccessNone,
				filepath.Join(dir, "deep", "er", "b.env"): AccessNone,
				"/root": AccessNone, // minimal reads the system only
				filepath.Join(dir, "deep", "er", "c.text"): AccessWrite,
			} {
				if got := r.Access(p); got != want {
					t.Errorf("%s: %s, want %s", p, got, want)
				}
			}
		}},
		"current_working_directory is project_roots": {json: `{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[
			{"path":{"type":"special","value":{"kind":"current_working_directory"}},"access":"write"}]},"network":"restricted"},
			"workspaceRoots":["file://` + dir + `"]}`, check: func(t *testing.T, r Resolved) {
			if got := r.Access(filepath.Join(dir, "keep.txt")); got != AccessWrite {
				t.Errorf("%s", got)
			}
		}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c, err := ParseContext([]byte(tc.json))
			if err != nil {
				t.Fatal(err)
			}
			roots := []string{}
			for _, w := range c.WorkspaceRoots {
				roots = append(roots, strings.TrimPrefix(w, "file://"))
			}
			r, err := c.Policy.Resolve(Env{Cwd: dir, ProjectRoots: roots, NoProjectRootFallback: true})
			if err != nil {
				t.Fatal(err)
			}
			if tc.full && !(r.FullWrite() && r.Network) {
				t.Errorf("want no sandbox: %+v", r)
			}
			if r.Network != tc.network && tc.check == nil {
				t.Errorf("network %v", r.Network)
			}
			if tc.check != nil {
				tc.check(t, r)
			}
		})
	}
}

func TestCodexShapesThatAreWrongNameTheField(t *testing.T) {
	for raw, field := range map[string]string{
		`{"permissions":{"type":"sideways"}}`:                                                                  "permissions.type",
		`{"permissions":{"type":"managed","network":"restricted"}}`:                                            "permissions.file_system",
		`{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[]},"network":"open"}}`: "permissions.network",
		`{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[{"path":{"type":"special","value":{"kind":"bogus"}},"access":"read"}]},"network":"restricted"}}`: "entries[0].path.value.kind",
		`{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[{"path":{"type":"path","path":"relative/x"},"access":"read"}]},"network":"restricted"}}`:         "entries[0].path.path",
		`{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[{"path":{"type":"glob_pattern","pattern":"/x/*"},"access":"write"}]},"network":"restricted"}}`:   "entries[0]",
		`{"permissions":{"type":"managed","file_system":{"type":"restricted","entries":[{"path":{"type":"path","path":"file:///x"},"access":"maybe"}]},"network":"restricted"}}`:         "entries[0].access",
		`{"permissions":{"type":"disabled"},"cwd":"not a uri"}`: "cwd",
	} {
		_, err := ParseContext([]byte(raw))
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: %v, want an error naming %s", raw, err, field)
		}
	}
	// outpost's own shape keeps working, cwd included.
	c, err := ParseContext([]byte(`{"mode":"workspace-write","cwd":"/srv/ws"}`))
	if err != nil || c.Codex || c.Policy.Mode != ModeWorkspaceWrite || c.Cwd != "/srv/ws" {
		t.Fatalf("%+v %v", c, err)
	}
}
