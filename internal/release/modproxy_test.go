package release

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// tree writes files (path -> content) under a temp dir.
func tree(t *testing.T, files map[string]string) (string, []string) {
	t.Helper()
	dir := t.TempDir()
	var names []string
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	slices.Sort(names)
	return dir, names
}

func TestModuleFilesFollowsTheZipRules(t *testing.T) {
	dir, names := tree(t, map[string]string{
		"go.mod":               "module example.com/m\n\ngo 1.22\n",
		"m.go":                 "package m\n",
		"sub/s.go":             "package sub\n",
		"nested/go.mod":        "module example.com/m/nested\n",
		"nested/n.go":          "package nested\n",
		"nested/deep/d.go":     "package deep\n",
		"vendor/modules.txt":   "# none\n",
		"vendor/x.org/y/y.go":  "package y\n",
		"sub/vendor/z/z.go":    "package z\n",
		"testdata/golden.json": "{}\n",
	})
	os.Symlink("m.go", filepath.Join(dir, "link.go"))
	names = append(names, "link.go", "deleted.go")
	keep, excluded, err := ModuleFiles(dir, names)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"go.mod", "m.go", "sub/s.go", "testdata/golden.json", "vendor/modules.txt"}
	if !slices.Equal(keep, want) {
		t.Errorf("kept %v, want %v", keep, want)
	}
	var out []string
	for _, e := range excluded {
		out = append(out, e.File)
	}
	slices.Sort(out)
	wantOut := []string{"deleted.go", "link.go", "nested/deep/d.go", "nested/go.mod", "nested/n.go", "sub/vendor/z/z.go", "vendor/x.org/y/y.go"}
	if !slices.Equal(out, wantOut) {
		t.Errorf("left out %v, want %v", out, wantOut)
	}
}

func TestModuleFilesRefusesPathsGoRefuses(t *testing.T) {
	for _, names := range [][]string{
		{"go.mod", "README.md", "readme.MD"}, // the same ignoring case
		{"go.mod", "a:b.go"},
		{"go.mod", "aux.go"}, // reserved on Windows
		{"go.mod", "dir./x.go"},
	} {
		files := map[string]string{}
		for _, n := range names {
			files[n] = "x"
		}
		if strings.Contains(strings.Join(names, " "), "readme.MD") {
			// Two files differing in case need a case-sensitive file system;
			// the check is on the names, so list one file twice.
			delete(files, "readme.MD")
		}
		dir, _ := tree(t, files)
		if strings.Contains(strings.Join(names, " "), "readme.MD") {
			os.WriteFile(filepath.Join(dir, "readme.MD"), []byte("y"), 0o644)
		}
		if _, _, err := ModuleFiles(dir, names); !errors.Is(err, ErrModZip) {
			t.Errorf("%v: err %v, want ErrModZip", names, err)
		}
	}
}

func TestModZipConfigBounds(t *testing.T) {
	if err := DefaultModZipConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	c := DefaultModZipConfig()
	c.MaxZipSize = 501 << 20
	if err := c.Validate(); !errors.Is(err, ErrModZip) {
		t.Errorf("a bound looser than go's: %v", err)
	}
	dir, names := tree(t, map[string]string{"go.mod": "module example.com/m\n", "big.txt": strings.Repeat("x", 4096)})
	c = DefaultModZipConfig()
	c.MaxUnzippedSize = 4000
	if err := WriteModuleZip(&bytes.Buffer{}, dir, "example.com/m", "v1.0.0", names, c); !errors.Is(err, ErrModZip) {
		t.Errorf("files over MaxUnzippedSize: %v", err)
	}
	c = DefaultModZipConfig()
	c.MaxGoModSize = 5
	if err := WriteModuleZip(&bytes.Buffer{}, dir, "example.com/m", "v1.0.0", names, c); !errors.Is(err, ErrModZip) {
		t.Errorf("go.mod over MaxGoModSize: %v", err)
	}
}

// TestFileProxyServesTheGoCommand: the real go command resolves @latest
// through the proxy, downloads and verifies the zip (go checks the module
// zip rules as it extracts), and builds and runs a program from it.
func TestFileProxyServesTheGoCommand(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	src, names := tree(t, map[string]string{
		"go.mod":         "module example.com/Hello\n\ngo 1.22\n",
		"cmd/hello/h.go": "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hello from the proxy\") }\n",
		"nested/go.mod":  "module example.com/Hello/nested\n",
	})
	keep, _, err := ModuleFiles(src, names)
	if err != nil {
		t.Fatal(err)
	}
	proxy := t.TempDir()
	for _, version := range []string{"v0.0.0-20261203140111-a4768bce8cbf", "v1.2.0"} {
		at := time.Date(2026, 12, 3, 14, 1, 11, 0, time.UTC)
		mod, err := WriteFileProxy(proxy, src, keep, version, at, DefaultModZipConfig())
		if err != nil || mod != "example.com/Hello" {
			t.Fatalf("WriteFileProxy: %q, %v", mod, err)
		}
		list, _ := os.ReadFile(filepath.Join(proxy, "example.com", "!hello", "@v", "list"))
		if strings.HasPrefix(version, "v0.0.0-") == (len(list) != 0) {
			t.Errorf("%s: list %q (a pseudo-version must not be listed, a release must)", version, list)
		}
	}
	zr, err := zip.OpenReader(filepath.Join(proxy, "example.com", "!hello", "@v", "v1.2.0.zip"))
	if err != nil {
		t.Fatal(err)
	}
	var inZip []string
	for _, f := range zr.File {
		inZip = append(inZip, f.Name)
	}
	zr.Close()
	if !slices.Equal(inZip, []string{"example.com/Hello@v1.2.0/cmd/hello/h.go", "example.com/Hello@v1.2.0/go.mod"}) {
		t.Errorf("zip holds %v", inZip)
	}

	home := t.TempDir()
	env := append(os.Environ(),
		"GOPATH="+filepath.Join(home, "gopath"), "GOMODCACHE="+filepath.Join(home, "modcache"),
		"GOPROXY=file://"+filepath.ToSlash(proxy), "GOSUMDB=off", "GOFLAGS=-modcacherw",
		"GOENV=off", "GOWORK=off", "GOBIN=")
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(goTool, args...)
		cmd.Dir = home
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	var info struct{ Version, Time, Error string }
	if err := json.Unmarshal([]byte(run("mod", "download", "-json", "example.com/Hello@latest")), &info); err != nil || info.Version != "v1.2.0" || info.Error != "" {
		t.Fatalf("go mod download @latest: %+v, %v", info, err)
	}
	run("install", "example.com/Hello/cmd/hello@latest")
	out, err := exec.Command(filepath.Join(home, "gopath", "bin", "hello")).Output()
	if err != nil || string(out) != "hello from the proxy\n" {
		t.Fatalf("the installed program: %q, %v", out, err)
	}
}
