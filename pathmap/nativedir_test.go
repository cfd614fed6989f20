package pathmap_test

import (
	"errors"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outpost-exec/outpost/pathmap"
)

// --- Native / NativeDir: what a client may name as a cwd -------------------

func TestNativeAcceptsOnlyLocalAbsolutePaths(t *testing.T) {
	cases := []struct {
		in   string
		want string // "" means ErrForeignPath
	}{
		{"/tmp", "/tmp"},
		{"/", "/"},
		{"/tmp/../tmp/./x/", "/tmp/x"},
		{"//tmp//x", "/tmp/x"},
		{"/tmp/a%20b", "/tmp/a%20b"}, // a plain path is not decoded
		{`/tmp/a\b`, `/tmp/a\b`},     // a backslash is an ordinary character
		{"/tmp/C:/x", "/tmp/C:/x"},   // a drive-like element further in
		{"file:///tmp", "/tmp"},
		{"file:///", "/"},
		{"file://localhost/tmp", "/tmp"},
		{"FILE:///tmp", "/tmp"},
		{"file:/tmp", "/tmp"},
		{"file:///tmp/a%20b/%E2%82%AC", "/tmp/a b/€"},
		{"file:///tmp/a%2Fb", ""}, // an encoded separator is refused, not decoded into one
		{"file:///tmp/x/../y", "/tmp/y"},

		{"", ""},
		{"tmp", ""},
		{"tmp/x", ""},
		{"./x", ""},
		{"../x", ""},
		{"~/x", ""},
		{"file:tmp", ""},
		{"file:tmp/x", ""},
		{"file://otherhost/x", ""},
		{"file://example.com/tmp", ""},
		{"file://server/share/x", ""},
		{"file:///tmp/%zz", ""},
		{`C:\x`, ""},
		{`c:\Users\u`, ""},
		{"C:/x", ""},
		{"C:", ""},
		{`D:`, ""},
		{`\x`, ""},
		{`\\server\share`, ""},
		{`\\server\share\dir`, ""},
		{`\\?\C:\x`, ""},
		{"file:///C:/x", ""},
		{"file:///c:/Users", ""},
		{"file:///C:", ""},
		{"file:///C:%5Cx", ""},
		{"file://localhost/C:/x", ""},
		{"/C:/x", ""},
		{"/tmp/\x00x", ""},
		{"\x00", ""},
		{"file:///tmp%00x", ""},
		{"file:///tmp/%00", ""},
	}
	for _, c := range cases {
		got, err := pathmap.Native(c.in)
		if c.want == "" {
			if !errors.Is(err, pathmap.ErrForeignPath) {
				t.Errorf("Native(%q) = %q, %v; want ErrForeignPath", c.in, got, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("Native(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

func TestNativeDirResolvesExistingDirectories(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	spaced := filepath.Join(dir, "a b")
	if err := os.Mkdir(spaced, 0o755); err != nil {
		t.Fatal(err)
	}
	fileURI := func(p string) string { return (&url.URL{Scheme: "file", Path: p}).String() }

	ok := []struct {
		in, want string
	}{
		{dir, dir},
		{dir + "/", dir},
		{dir + "/./a b/..", dir},
		{fileURI(dir), dir},
		{"file://localhost" + dir, dir},
		{fileURI(spaced), spaced},
		{"/", "/"},
	}
	for _, c := range ok {
		got, err := pathmap.NativeDir(c.in, "/fallback", nil)
		if err != nil || got != c.want {
			t.Errorf("NativeDir(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	if !strings.Contains(fileURI(spaced), "%20") {
		t.Fatalf("test URI %q is not percent-encoded", fileURI(spaced))
	}
}

func TestNativeDirEmptyUsesFallback(t *testing.T) {
	for _, fallback := range []string{"/some/where", "", "relative"} {
		got, err := pathmap.NativeDir("", fallback, nil)
		if err != nil || got != fallback {
			t.Errorf("NativeDir(\"\", %q) = %q, %v; want the fallback", fallback, got, err)
		}
	}
}

func TestNativeDirRejectsMissingDirectory(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	for _, in := range []string{missing, "file://" + missing} {
		_, err := pathmap.NativeDir(in, "/fallback", nil)
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("NativeDir(%q): err = %v, want fs.ErrNotExist", in, err)
		}
		if err != nil && !strings.Contains(err.Error(), in) {
			t.Errorf("NativeDir(%q): error %q does not name the cwd", in, err)
		}
	}
}

func TestNativeDirRejectsFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, in := range []string{file, "file://" + file} {
		_, err := pathmap.NativeDir(in, "/fallback", nil)
		if err == nil || !strings.Contains(err.Error(), "not a directory") {
			t.Errorf("NativeDir(%q): err = %v, want not a directory", in, err)
		}
	}
}

func TestNativeDirRejectsForeignPaths(t *testing.T) {
	for _, in := range []string{`C:\x`, "file:///C:/x", `\\server\share`, "relative", "file://otherhost/tmp", "/tmp\x00", "file:///tmp%00"} {
		_, err := pathmap.NativeDir(in, "/fallback", nil)
		if !errors.Is(err, pathmap.ErrForeignPath) {
			t.Errorf("NativeDir(%q): err = %v, want ErrForeignPath", in, err)
		}
	}
}
