package release

import (
	"archive/zip"
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// A file:// module proxy (the GOPROXY protocol, `go help goproxy`) that
// serves one version of this checkout, so `go install <module>/cmd/outpost@latest`
// and an SDK user's `go get` can be tested offline and without publishing:
//
//	<proxy>/<escaped module>/@v/list         release versions, one a line
//	<proxy>/<escaped module>/@latest         the version's .info (what go asks
//	                                          for when list has no release)
//	<proxy>/<escaped module>/@v/<v>.info     {"Version": v, "Time": commit time}
//	<proxy>/<escaped module>/@v/<v>.mod      go.mod
//	<proxy>/<escaped module>/@v/<v>.zip      the module zip
//
// The zip follows the rules the go command enforces on module zips
// (golang.org/x/mod/zip, reimplemented here since this module does not
// depend on x/mod): every name is "<module>@<version>/<file>"; only
// regular files; no file of a nested module (a directory below the root
// with its own go.mod) and none of a vendored package; file paths valid
// on every OS and unique ignoring case; the size bounds of ModZipConfig.

// ModZipConfig bounds a module zip as the go command does; a zip over them
// is refused by every go command, so writing one is an error.
type ModZipConfig struct {
	// MaxZipSize bounds the zip file; MaxUnzippedSize the files' total.
	MaxZipSize      int64
	MaxUnzippedSize int64
	// MaxGoModSize bounds go.mod, MaxLicenseSize LICENSE.
	MaxGoModSize   int64
	MaxLicenseSize int64
}

// DefaultModZipConfig is the go command's own bounds: 500 MiB zipped and
// unzipped, 16 MiB for go.mod and for LICENSE.
func DefaultModZipConfig() ModZipConfig {
	return ModZipConfig{
		MaxZipSize:      500 << 20,
		MaxUnzippedSize: 500 << 20,
		MaxGoModSize:    16 << 20,
		MaxLicenseSize:  16 << 20,
	}
}

// Validate refuses a bound that is not positive or looser than the go
// command's.
func (c ModZipConfig) Validate() error {
	d := DefaultModZipConfig()
	for _, b := range []struct {
		name     string
		v, limit int64
	}{
		{"MaxZipSize", c.MaxZipSize, d.MaxZipSize},
		{"MaxUnzippedSize", c.MaxUnzippedSize, d.MaxUnzippedSize},
		{"MaxGoModSize", c.MaxGoModSize, d.MaxGoModSize},
		{"MaxLicenseSize", c.MaxLicenseSize, d.MaxLicenseSize},
	} {
		if b.v <= 0 || b.v > b.limit {
			return fmt.Errorf("%w: %s %d not in (0, %d]", ErrModZip, b.name, b.v, b.limit)
		}
	}
	return nil
}

// ErrModZip: a module zip the go command would refuse (an invalid or
// duplicate path, a file over a size bound, a go.mod of another module).
var ErrModZip = errors.New("invalid module zip")

// Excluded is a listed file left out of a module zip, and why.
type Excluded struct {
	File, Reason string
}

// ModuleFiles picks from files (slash-separated paths relative to dir, as
// `git ls-files` lists them) those a module zip holds, and says why it
// leaves out the others. Listed files missing from dir (deleted in the
// work tree) are left out.
func ModuleFiles(dir string, files []string) (keep []string, excluded []Excluded, err error) {
	nested := map[string]bool{} // directories of nested modules
	for _, f := range files {
		if path.Base(f) == "go.mod" && path.Dir(f) != "." {
			nested[path.Dir(f)] = true
		}
	}
	for _, f := range files {
		if reason := excludedBecause(f, nested); reason != "" {
			excluded = append(excluded, Excluded{f, reason})
			continue
		}
		st, err := os.Lstat(filepath.Join(dir, filepath.FromSlash(f)))
		switch {
		case errors.Is(err, os.ErrNotExist):
			excluded = append(excluded, Excluded{f, "listed but not in the work tree"})
			continue
		case err != nil:
			return nil, nil, err
		case !st.Mode().IsRegular():
			excluded = append(excluded, Excluded{f, "not a regular file (" + st.Mode().Type().String() + ")"})
			continue
		}
		if err := checkFilePath(f); err != nil {
			return nil, nil, err
		}
		keep = append(keep, f)
	}
	slices.Sort(keep)
	seen := map[string]string{}
	for _, f := range keep {
		low := strings.ToLower(f)
		if other, ok := seen[low]; ok {
			return nil, nil, fmt.Errorf("%w: %s and %s differ only in case", ErrModZip, other, f)
		}
		seen[low] = f
	}
	return keep, excluded, nil
}

func excludedBecause(f string, nested map[string]bool) string {
	for d := path.Dir(f); d != "."; d = path.Dir(d) {
		if nested[d] {
			return "in the nested module " + d
		}
	}
	elems := strings.Split(f, "/")
	for i, e := range elems[:len(elems)-1] {
		if e == "vendor" && !(i == 0 && len(elems) == 2) {
			return "in a vendor directory"
		}
		if e == ".git" || e == ".hg" || e == ".svn" || e == ".bzr" {
			return "in a version-control directory"
		}
	}
	return ""
}

// badPathChar is what a module file path may not hold: control characters
// and what Windows or a shell cannot take in a file name.
var badPathChar = regexp.MustCompile("[\x00-\x1f\x7f\"*:<>?`|\\\\']")

// windowsReserved are names Windows will not create, with any extension.
var windowsReserved = map[string]bool{"con": true, "prn": true, "aux": true, "nul": true}

func checkFilePath(f string) error {
	bad := func(why string) error { return fmt.Errorf("%w: file path %q %s", ErrModZip, f, why) }
	if f == "" || path.Clean(f) != f || path.IsAbs(f) || strings.HasPrefix(f, "../") {
		return bad("is not a clean relative path")
	}
	if badPathChar.MatchString(f) {
		return bad("holds a character not allowed in module file paths")
	}
	for _, e := range strings.Split(f, "/") {
		if strings.HasSuffix(e, ".") || strings.HasSuffix(e, " ") {
			return bad("has an element ending in a dot or space")
		}
		stem, _, _ := strings.Cut(strings.ToLower(e), ".")
		if windowsReserved[stem] || len(stem) == 4 && (strings.HasPrefix(stem, "com") || strings.HasPrefix(stem, "lpt")) && stem[3] >= '1' && stem[3] <= '9' {
			return bad("has an element Windows reserves")
		}
	}
	return nil
}

// ModulePath is the module path go.mod's module line declares.
func ModulePath(gomod []byte) (string, error) {
	sc := bufio.NewScanner(bytes.NewReader(gomod))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if rest, ok := strings.CutPrefix(line, "module"); ok && (rest == "" || rest[0] == ' ' || rest[0] == '\t') {
			p := strings.Trim(strings.TrimSpace(rest), `"`)
			if p != "" {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("%w: go.mod has no module line", ErrModZip)
}

// WriteModuleZip writes the module zip of files (relative to dir, already
// chosen by ModuleFiles) for modPath@version to w.
func WriteModuleZip(w io.Writer, dir, modPath, version string, files []string, cfg ModZipConfig) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	cw := &countingWriter{w: w}
	zw := zip.NewWriter(cw)
	var total int64
	for _, f := range files {
		src := filepath.Join(dir, filepath.FromSlash(f))
		st, err := os.Stat(src)
		if err != nil {
			return err
		}
		switch f {
		case "go.mod":
			if st.Size() > cfg.MaxGoModSize {
				return fmt.Errorf("%w: go.mod is %d bytes, over %d", ErrModZip, st.Size(), cfg.MaxGoModSize)
			}
		case "LICENSE":
			if st.Size() > cfg.MaxLicenseSize {
				return fmt.Errorf("%w: LICENSE is %d bytes, over %d", ErrModZip, st.Size(), cfg.MaxLicenseSize)
			}
		}
		if total += st.Size(); total > cfg.MaxUnzippedSize {
			return fmt.Errorf("%w: files total over %d bytes", ErrModZip, cfg.MaxUnzippedSize)
		}
		zf, err := zw.CreateHeader(&zip.FileHeader{Name: modPath + "@" + version + "/" + f, Method: zip.Deflate})
		if err != nil {
			return err
		}
		in, err := os.Open(src)
		if err != nil {
			return err
		}
		_, err = io.Copy(zf, in)
		in.Close()
		if err != nil {
			return err
		}
		if cw.n > cfg.MaxZipSize {
			return fmt.Errorf("%w: zip over %d bytes", ErrModZip, cfg.MaxZipSize)
		}
	}
	if err := zw.Close(); err != nil {
		return err
	}
	if cw.n > cfg.MaxZipSize {
		return fmt.Errorf("%w: zip over %d bytes", ErrModZip, cfg.MaxZipSize)
	}
	return nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// pseudoOrSemver matches the versions a proxy may serve here: vX.Y.Z with
// optional pre-release and build parts (pseudo-versions are such).
var pseudoOrSemver = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)

// pseudoVersion matches a pseudo-version (`go help modules`), which a
// proxy's list must not name.
var pseudoVersion = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+-(.*\.)?(0\.)?[0-9]{14}-[0-9a-f]{12}(\+incompatible)?$`)

// WriteFileProxy writes the module in dir (files as ModuleFiles chose
// them) to the file:// proxy rooted at proxyDir as version, published at t.
// It returns the module path.
func WriteFileProxy(proxyDir, dir string, files []string, version string, t time.Time, cfg ModZipConfig) (string, error) {
	if !pseudoOrSemver.MatchString(version) {
		return "", fmt.Errorf("%w: version %q is not a semantic version", ErrModZip, version)
	}
	if !slices.Contains(files, "go.mod") {
		return "", fmt.Errorf("%w: no go.mod at the root", ErrModZip)
	}
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return "", err
	}
	modPath, err := ModulePath(gomod)
	if err != nil {
		return "", err
	}
	base := filepath.Join(proxyDir, filepath.FromSlash(caseEscape(modPath)))
	vdir := filepath.Join(base, "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return "", err
	}
	ev := caseEscape(version)
	zf, err := os.Create(filepath.Join(vdir, ev+".zip"))
	if err != nil {
		return "", err
	}
	err = WriteModuleZip(zf, dir, modPath, version, files, cfg)
	if cerr := zf.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", err
	}
	info, _ := json.Marshal(struct {
		Version string
		Time    string
	}{version, t.UTC().Format(time.RFC3339)})
	list := ""
	if !pseudoVersion.MatchString(version) {
		list = version + "\n"
	}
	for name, data := range map[string][]byte{
		filepath.Join(vdir, ev+".info"): info,
		filepath.Join(vdir, ev+".mod"):  gomod,
		filepath.Join(vdir, "list"):     []byte(list),
		filepath.Join(base, "@latest"):  info,
	} {
		if err := os.WriteFile(name, data, 0o644); err != nil {
			return "", err
		}
	}
	return modPath, nil
}
