package pathmap

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestNativeAcceptsNativeFormsAndURIs(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/tmp", "/tmp"},
		{"/", "/"},
		{"/a/b/../c/./d/", "/a/c/d"},
		{"/../..", "/"},
		{"//tmp//x", "/tmp/x"},
		{"/a%20b", "/a%20b"}, // plain paths are not decoded
		{`/a\b`, `/a\b`},     // a backslash is an ordinary byte in a Linux name
		{"/x/c:/y", "/x/c:/y"},
		{"/c:x", "/c:x"}, // an ordinary name; only "X:" alone is a drive
		{"file:///tmp", "/tmp"},
		{"file:///", "/"},
		{"FILE:///tmp", "/tmp"},
		{"file://localhost/tmp", "/tmp"},
		{"file://LocalHost/tmp", "/tmp"},
		{"file:/tmp/x", "/tmp/x"},
		{"file:///a%20b", "/a b"},
		{"file:///a b", "/a b"},
		{"file:///%E2%82%AC/%25", "/€/%"},
		{"file:///a/%2e%2E/b", "/b"},
		{"file:///a%5Cb", `/a\b`},
		{"file:///a/../../..", "/"},
	} {
		got, err := Native(tc.in)
		if err != nil {
			t.Errorf("Native(%q): unexpected error %v", tc.in, err)
			continue
		}
		if got != tc.want {
			t.Errorf("Native(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestNativeRejectsForeignRelativeAndMalformed(t *testing.T) {
	for _, tc := range []struct{ in, why string }{
		{"", "empty"},
		{"tmp/x", "relative"},
		{"./x", "relative"},
		{"~/x", "relative"},
		{"..", "relative"},
		{`C:\x`, "drive"},
		{"c:/x", "drive"},
		{"C:", "drive"},
		{"c:x", "drive"},
		{"/C:/x", "drive"},
		{"/c:", "drive"},
		{"/./C:/x", "drive"},
		{"file:///C:/x", "drive"},
		{"file:///c%3A/x", "drive"},
		{"file:///C|/x", "drive"},
		{`file:///C:\x`, "drive"},
		{`/C:\x`, "drive"},
		{"file://localhost/D:/x", "drive"},
		{`\\srv\share`, "UNC"},
		{`\\?\C:\x`, "UNC"},
		{`\x`, "rooted"},
		{"file://otherhost/x", "host"},
		{"file://srv/share/x", "host"},
		{"file://localhost:80/x", "host"},
		{"file://user@localhost/x", "host"},
		{"file:////srv/share", "UNC"},
		{"file:relative/x", "relative"},
		{"file:", "no path"},
		{"file://", "no path"},
		{"file://localhost", "no path"},
		{"file:///a?b", "query"},
		{"file:///a#b", "fragment"},
		{"file:///a%2Fb", "encoded slash"},
		{"file:///a%2fb", "encoded slash"},
		{"file:///a%00b", "encoded NUL"},
		{"file:///a%0", "malformed escape"},
		{"file:///a%zz", "malformed escape"},
		{"/a\x00b", "NUL"},
		{"file:///a\x00b", "NUL"},
		{"http://host/x", "other scheme"},
		{"vscode-remote://x/y", "other scheme"},
	} {
		got, err := Native(tc.in)
		if err == nil {
			t.Errorf("Native(%q) [%s] = %q, want an error", tc.in, tc.why, got)
			continue
		}
		if !errors.Is(err, ErrForeignPath) {
			t.Errorf("Native(%q) [%s]: error %v does not wrap ErrForeignPath", tc.in, tc.why, err)
		}
		if !strings.Contains(err.Error(), quote(tc.in)) {
			t.Errorf("Native(%q) [%s]: error %q does not name the input", tc.in, tc.why, err)
		}
	}
}

func TestURIRoundTripsOddNames(t *testing.T) {
	for _, tc := range []struct{ path, uri string }{
		{"/", "file:///"},
		{"/tmp/a b", "file:///tmp/a%20b"},
		{"/100%", "file:///100%25"},
		{"/a#b", "file:///a%23b"},
		{"/a?b", "file:///a%3Fb"},
		{"/€/日本", "file:///%E2%82%AC/%E6%97%A5%E6%9C%AC"},
		{`/a\b`, "file:///a%5Cb"},
		{"/a:b@c+d,e;f=g", "file:///a:b@c+d,e;f=g"},
		{"/%2F", "file:///%252F"},
		{"/%00", "file:///%2500"},
		{"/x/\xff\x01", "file:///x/%FF%01"},
		{"/c:", "file:///c:"}, // rendered, but Native rejects it (drive spelling)
	} {
		if got := URI(tc.path); got != tc.uri {
			t.Errorf("URI(%q) = %q, want %q", tc.path, got, tc.uri)
		}
		if tc.path == "/c:" {
			continue
		}
		back, err := Native(URI(tc.path))
		if err != nil || back != tc.path {
			t.Errorf("Native(URI(%q)) = %q, %v; want the path back", tc.path, back, err)
		}
	}
	if got := URI("rel/x"); strings.HasPrefix(got, "file://") {
		t.Errorf("URI of a relative path %q looks like a URI with an authority", got)
	}
}

func TestMapperLongestPrefixAtComponentBoundary(t *testing.T) {
	m, err := NewMapper(
		Mapping{"/workspace", "/srv/ws/42"},
		Mapping{"/workspace/vendor", "/srv/cache/vendor"},
		Mapping{"/home/me", "/srv/home"},
	)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ in, want string }{
		{"/workspace", "/srv/ws/42"},
		{"/workspace/", "/srv/ws/42"},
		{"/workspace/a/b", "/srv/ws/42/a/b"},
		{"file:///workspace/a%20b", "/srv/ws/42/a b"},
		{"/workspace2", "/workspace2"},
		{"/workspace2/a", "/workspace2/a"},
		{"/workspace/vendor", "/srv/cache/vendor"},
		{"/workspace/vendor/x", "/srv/cache/vendor/x"},
		{"/workspace/vendorx", "/srv/ws/42/vendorx"},
		{"/workspace/../etc/passwd", "/etc/passwd"}, // cleaned before mapping
		{"/workspace/vendor/../x", "/srv/ws/42/x"},
		{"/home/me/.bashrc", "/srv/home/.bashrc"},
		{"/home/meme", "/home/meme"},
		{"/other", "/other"},
	} {
		got, err := m.ToExecutor(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ToExecutor(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	if _, err := m.ToExecutor(`C:\workspace`); !errors.Is(err, ErrForeignPath) {
		t.Errorf("ToExecutor of a foreign path: err = %v, want ErrForeignPath", err)
	}
}

func TestMapperToClientReversesLongestExecutorPrefix(t *testing.T) {
	m, err := NewMapper(
		Mapping{"/workspace", "/srv/ws/42"},
		Mapping{"/cache", "/srv/ws/42/.cache"},
	)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ in, want string }{
		{"/srv/ws/42", "/workspace"},
		{"/srv/ws/42/a", "/workspace/a"},
		{"/srv/ws/42/.cache/x", "/cache/x"},
		{"/srv/ws/42/.cachex", "/workspace/.cachex"},
		{"/srv/ws/420", "/srv/ws/420"},
		{"/srv/ws/42/a/../b", "/workspace/b"},
		{"/elsewhere", "/elsewhere"},
		{"relative", "relative"},
	} {
		if got := m.ToClient(tc.in); got != tc.want {
			t.Errorf("ToClient(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	// Round trip for mapped paths.
	for _, p := range []string{"/workspace", "/workspace/x/y", "/cache/z"} {
		e, err := m.ToExecutor(p)
		if err != nil {
			t.Fatal(err)
		}
		if back := m.ToClient(e); back != p {
			t.Errorf("ToClient(ToExecutor(%q)) = %q", p, back)
		}
	}
}

func TestMapperRootPrefixMapsEverything(t *testing.T) {
	m, err := NewMapper(Mapping{"/", "/srv/chroot"})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := m.ToExecutor("/etc/x"); got != "/srv/chroot/etc/x" {
		t.Errorf("ToExecutor(/etc/x) = %q", got)
	}
	if got, _ := m.ToExecutor("/"); got != "/srv/chroot" {
		t.Errorf("ToExecutor(/) = %q", got)
	}
	if got := m.ToClient("/srv/chroot/etc/x"); got != "/etc/x" {
		t.Errorf("ToClient = %q", got)
	}
}

func TestNilMapperIsIdentity(t *testing.T) {
	var m *Mapper
	if got, err := m.ToExecutor("file:///a/b/../c"); err != nil || got != "/a/c" {
		t.Errorf("nil ToExecutor = %q, %v", got, err)
	}
	if _, err := m.ToExecutor("rel"); !errors.Is(err, ErrForeignPath) {
		t.Errorf("nil ToExecutor(rel) err = %v", err)
	}
	if got := m.ToClient("/x/y"); got != "/x/y" {
		t.Errorf("nil ToClient = %q", got)
	}
}

func TestNewMapperRejectsInvalidMappings(t *testing.T) {
	for _, tc := range []struct {
		name string
		ms   []Mapping
	}{
		{"relative client", []Mapping{{"workspace", "/srv"}}},
		{"relative executor", []Mapping{{"/workspace", "srv"}}},
		{"empty client", []Mapping{{"", "/srv"}}},
		{"empty executor", []Mapping{{"/w", ""}}},
		{"unclean client trailing slash", []Mapping{{"/workspace/", "/srv"}}},
		{"unclean executor dotdot", []Mapping{{"/workspace", "/srv/../etc"}}},
		{"unclean double slash", []Mapping{{"//workspace", "/srv"}}},
		{"NUL", []Mapping{{"/w\x00", "/srv"}}},
		{"windows client", []Mapping{{`C:\w`, "/srv"}}},
		{"duplicate client", []Mapping{{"/w", "/a"}, {"/w", "/b"}}},
		{"duplicate executor", []Mapping{{"/w", "/a"}, {"/v", "/a"}}},
	} {
		if m, err := NewMapper(tc.ms...); err == nil {
			t.Errorf("%s: NewMapper(%v) = %v, want an error", tc.name, tc.ms, m)
		}
	}
	if _, err := NewMapper(); err != nil {
		t.Errorf("NewMapper() with no mappings: %v", err)
	}
}

// tree builds, under a fresh temp dir (itself symlink-resolved):
//
//	root/             real dir
//	root/sub/file
//	root/in -> sub            (relative, inside)
//	root/inabs -> <root>/sub  (absolute, inside)
//	root/out -> <outside>     (escapes)
//	root/chain1 -> chain2 -> chain3 -> <outside>
//	root/chainin1 -> chainin2 -> sub
//	root/dangling -> <outside>/new
//	root/up -> ..             (escapes)
//	root/loop -> loop
//	outside/secret
//	rootlink -> root
func tree(t testing.TB) (base, root, outside string) {
	t.Helper()
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	root = filepath.Join(base, "root")
	outside = filepath.Join(base, "outside")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "sub"), 0o755))
	must(os.MkdirAll(outside, 0o755))
	must(os.WriteFile(filepath.Join(root, "sub", "file"), nil, 0o644))
	must(os.WriteFile(filepath.Join(outside, "secret"), nil, 0o644))
	for link, target := range map[string]string{
		"root/in":       "sub",
		"root/inabs":    filepath.Join(root, "sub"),
		"root/out":      outside,
		"root/chain1":   "chain2",
		"root/chain2":   "sub/../chain3",
		"root/chain3":   "../outside",
		"root/chainin1": "./chainin2",
		"root/chainin2": "in",
		"root/dangling": filepath.Join(outside, "new"),
		"root/up":       "..",
		"root/loop":     "loop",
		"rootlink":      "root",
	} {
		must(os.Symlink(target, filepath.Join(base, link)))
	}
	return base, root, outside
}

func TestWithin(t *testing.T) {
	base, root, outside := tree(t)
	rootlink := filepath.Join(base, "rootlink")
	j := filepath.Join
	for _, tc := range []struct {
		name       string
		root, path string
		want       string // "" means ErrEscape expected
	}{
		{"plain child", root, j(root, "sub", "file"), j(root, "sub", "file")},
		{"path equal to root", root, root, root},
		{"path equal to root with trailing slash", root, root + "/", root},
		{"non-existent tail under existing dir", root, j(root, "sub", "new", "deeper"), j(root, "sub", "new", "deeper")},
		{"symlink inside pointing inside (relative)", root, j(root, "in", "file"), j(root, "sub", "file")},
		{"symlink inside pointing inside (absolute)", root, j(root, "inabs", "file"), j(root, "sub", "file")},
		{"chain of symlinks staying inside", root, j(root, "chainin1", "file"), j(root, "sub", "file")},
		{"new file through inside symlink", root, j(root, "in", "new"), j(root, "sub", "new")},
		{"dotdot that stays inside", root, root + "/sub/../sub/file", j(root, "sub", "file")},
		{"root itself a symlink", rootlink, j(rootlink, "sub", "file"), j(root, "sub", "file")},
		{"root symlink, path via real root", rootlink, j(root, "sub"), j(root, "sub")},
		{"root symlink, path equal to root", rootlink, rootlink, root},
		{"dotdot escape", root, root + "/../outside/secret", ""},
		{"dotdot escape from sub", root, root + "/sub/../../outside", ""},
		{"dotdot in missing tail", root, root + "/new/../sub", ""},
		{"dotdot in missing tail escaping", root, root + "/new/../../outside", ""},
		{"symlink pointing outside", root, j(root, "out", "secret"), ""},
		{"symlink pointing outside, new file", root, j(root, "out", "new"), ""},
		{"symlink itself pointing outside", root, j(root, "out"), ""},
		{"symlink chain leading outside", root, j(root, "chain1", "secret"), ""},
		{"dangling symlink pointing outside", root, j(root, "dangling"), ""},
		{"symlink to parent", root, j(root, "up", "outside"), ""},
		{"symlink then dotdot", root, j(root, "in") + "/../../outside", ""},
		{"prefix sibling is not inside", root, root + "2/x", ""},
		{"root symlink, path outside", rootlink, outside, ""},
	} {
		got, err := Within(tc.root, tc.path)
		if tc.want == "" {
			if !errors.Is(err, ErrEscape) {
				t.Errorf("%s: Within(%q, %q) = %q, %v; want ErrEscape", tc.name, tc.root, tc.path, got, err)
			} else if !strings.Contains(err.Error(), quote(tc.path)) || !strings.Contains(err.Error(), quote(tc.root)) {
				t.Errorf("%s: escape error %q does not name path and root", tc.name, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: Within(%q, %q) = %q, %v; want %q", tc.name, tc.root, tc.path, got, err, tc.want)
		}
	}
}

func TestWithinFailsWithoutClaimingContainment(t *testing.T) {
	_, root, _ := tree(t)
	for _, tc := range []struct{ name, root, path string }{
		{"symlink loop", root, filepath.Join(root, "loop", "x")},
		{"file used as directory", root, filepath.Join(root, "sub", "file", "x")},
		{"relative path", root, "sub/file"},
		{"relative root", "root", filepath.Join(root, "sub")},
		{"NUL", root, root + "/a\x00"},
	} {
		got, err := Within(tc.root, tc.path)
		if err == nil {
			t.Errorf("%s: Within(%q, %q) = %q, want an error", tc.name, tc.root, tc.path, got)
		}
	}
}

func TestWithinAgreesWithEvalSymlinksOnExistingPaths(t *testing.T) {
	base, root, _ := tree(t)
	for _, p := range []string{
		root, filepath.Join(root, "in"), filepath.Join(root, "chainin1", "file"),
		filepath.Join(base, "rootlink", "inabs"), root + "/sub/../in/./file",
	} {
		got, err := Within(base, p)
		if err != nil {
			t.Fatalf("Within(%q): %v", p, err)
		}
		want, err := filepath.EvalSymlinks(p)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("Within resolved %q to %q, EvalSymlinks to %q", p, got, want)
		}
	}
}

func TestRootsMaterialisesSymbols(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp+"/")
	m, err := NewMapper(Mapping{"/workspace", "/srv/ws/42"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := m.Roots(
		[]string{":cwd", "/workspace/a", ":tmpdir", ":project_roots", "file:///srv/ws/42/a", "/extra/", ":cwd"},
		"/srv/ws/42/sub",
		[]string{"/srv/ws/42", "file:///srv/other"},
	)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/srv/ws/42/sub", "/srv/ws/42/a", tmp, "/srv/ws/42", "/srv/other", "/extra"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Roots = %q\nwant    %q", got, want)
	}
}

func TestRootsTmpdirFallsBackWhenTMPDIRUnsetOrRelative(t *testing.T) {
	for _, v := range []string{"", "relative/tmp"} {
		t.Setenv("TMPDIR", v)
		got, err := (*Mapper)(nil).Roots([]string{":tmpdir"}, "", nil)
		if err != nil || !reflect.DeepEqual(got, []string{"/tmp"}) {
			t.Errorf("TMPDIR=%q: Roots(:tmpdir) = %q, %v; want [/tmp]", v, got, err)
		}
	}
}

func TestRootsEmptyProjectRootsExpandToNothing(t *testing.T) {
	got, err := (*Mapper)(nil).Roots([]string{":project_roots"}, "/cwd", nil)
	if err != nil || len(got) != 0 {
		t.Errorf("Roots = %q, %v; want none", got, err)
	}
}

func TestRootsRejectsBadEntries(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []string
		cwd     string
		proj    []string
		foreign bool
	}{
		{"unknown symbol", []string{":root"}, "/c", nil, false},
		{"cwd missing", []string{":cwd"}, "", nil, false},
		{"cwd relative", []string{":cwd"}, "c", nil, true},
		{"foreign entry", []string{`C:\x`}, "/c", nil, true},
		{"relative entry", []string{"x"}, "/c", nil, true},
		{"foreign project root", []string{":project_roots"}, "/c", []string{"file://host/x"}, true},
	} {
		got, err := (*Mapper)(nil).Roots(tc.entries, tc.cwd, tc.proj)
		if err == nil {
			t.Errorf("%s: Roots = %q, want an error", tc.name, got)
			continue
		}
		if tc.foreign && !errors.Is(err, ErrForeignPath) {
			t.Errorf("%s: err %v does not wrap ErrForeignPath", tc.name, err)
		}
	}
}

func FuzzNative(f *testing.F) {
	for _, s := range []string{
		"/tmp", "file:///tmp", "file://localhost/tmp", "file:///a%20b", `C:\x`, "c:/x",
		"file:///C:/x", `\\srv\share`, "file://otherhost/x", "/a\x00", "file:///%00", "",
		"rel", "/a/../../b", "file:///%2F", "file:////x", "/%", "file:/x#y", "/€/%E2",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out, err := Native(s)
		if err != nil {
			if !errors.Is(err, ErrForeignPath) {
				t.Fatalf("Native(%q): error %v does not wrap ErrForeignPath", s, err)
			}
			return
		}
		if !filepath.IsAbs(out) || filepath.Clean(out) != out || strings.IndexByte(out, 0) >= 0 {
			t.Fatalf("Native(%q) = %q: not absolute, clean and NUL-free", s, out)
		}
		u := URI(out)
		back, err := Native(u)
		if err != nil || back != out {
			t.Fatalf("Native(%q) = %q; Native(URI=%q) = %q, %v", s, out, u, back, err)
		}
		if again, err := Native(out); err != nil || again != out {
			t.Fatalf("Native not idempotent on %q: %q, %v", out, again, err)
		}
	})
}

func FuzzWithin(f *testing.F) {
	base, root, _ := tree(f)
	for _, s := range []string{
		"root", "root/sub/file", "root/../outside", "root/out/secret", "root/chain1",
		"root/in/new", "rootlink/sub", "root/dangling", "root/up/root", "root/new/../x",
		"root/loop", "root/sub/file/x", "root2", "root/./in/../inabs",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, rel string) {
		p := base + "/" + rel
		got, err := Within(root, p)
		if err != nil {
			return
		}
		if !under(got, root) {
			t.Fatalf("Within(%q, %q) accepted %q, not under the root", root, p, got)
		}
		if again, err := Within(root, got); err != nil || again != got {
			t.Fatalf("Within not idempotent: Within(root, %q) = %q, %v", got, again, err)
		}
		if ev, err := filepath.EvalSymlinks(p); err == nil && ev != got {
			t.Fatalf("Within(%q) = %q but EvalSymlinks = %q", p, got, ev)
		}
	})
}
