package release

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestReleaseScript runs scripts/release.sh for this machine's target,
// twice into two directories, and checks what a user and an auditor rely
// on: the same bytes both times; sha256sum -c passes; the archive's outpost
// runs and prints the stamped version and commit; the SBOM names the
// module versions and go.sum hashes the binary was really built with. A
// warm build cache makes it about 10 s; a cold one (the release's -trimpath
// builds share nothing with go test's) a minute or two.
func TestReleaseScript(t *testing.T) {
	for _, tool := range []string{"bash", "git", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed", tool)
		}
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Run(); err != nil {
		t.Skip("not a git checkout")
	}
	target := runtime.GOOS + "/" + runtime.GOARCH
	dists := []string{t.TempDir(), t.TempDir()}
	for _, d := range dists {
		cmd := exec.Command("bash", filepath.Join(root, "scripts", "release.sh"), target)
		cmd.Env = append(os.Environ(), "DIST="+d, "VERSION=")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("release.sh %s: %v\n%s", target, err, out)
		}
	}
	sums := [2][]byte{}
	for i, d := range dists {
		sums[i], _ = os.ReadFile(filepath.Join(d, "checksums.txt"))
	}
	if len(sums[0]) == 0 || string(sums[0]) != string(sums[1]) {
		t.Fatalf("two releases of one commit differ:\n%s\n%s", sums[0], sums[1])
	}
	dist := dists[0]
	if sha256sum, err := exec.LookPath("sha256sum"); err == nil {
		cmd := exec.Command(sha256sum, "-c", "checksums.txt")
		cmd.Dir = dist
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("sha256sum -c checksums.txt: %v\n%s", err, out)
		}
	}

	commitOut, _ := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	commit := strings.TrimSpace(string(commitOut))
	archives, _ := filepath.Glob(filepath.Join(dist, "outpost_*_"+runtime.GOOS+"_"+runtime.GOARCH+".*"))
	var archive string
	for _, a := range archives {
		if !strings.HasSuffix(a, ".sbom.json") {
			archive = a
		}
	}
	if archive == "" || !strings.Contains(string(sums[0]), filepath.Base(archive)+"\n") || !strings.Contains(string(sums[0]), filepath.Base(archive)+".sbom.json\n") {
		t.Fatalf("archives %v, checksums:\n%s", archives, sums[0])
	}
	version := strings.TrimPrefix(filepath.Base(archive), "outpost_")
	version = version[:strings.Index(version, "_"+runtime.GOOS+"_")]

	if runtime.GOOS == "windows" {
		t.Skip("the rest unpacks a tar.gz")
	}
	bin := t.TempDir()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		out, _ := os.OpenFile(filepath.Join(bin, h.Name), os.O_CREATE|os.O_WRONLY, os.FileMode(h.Mode))
		io.Copy(out, tr)
		out.Close()
	}
	want := "README.md outpost"
	if runtime.GOOS == "linux" {
		want += " outpost-sandbox"
	}
	if strings.Join(names, " ") != want {
		t.Errorf("archive holds %v, want %s", names, want)
	}
	out, err := exec.Command(filepath.Join(bin, "outpost"), "--version").Output()
	if err != nil || !strings.HasPrefix(string(out), "outpost "+version+" ") || !strings.Contains(string(out), commit[:12]) {
		t.Errorf("outpost --version: %q, %v; want version %s and commit %s", out, err, version, commit[:12])
	}

	checkSBOM(t, archive+".sbom.json", filepath.Join(root, "go.sum"), version)
}

// checkSBOM: an SPDX 2.3 document describing the archive, whose modules
// include github.com/flynn/noise with go.sum's version and hash.
func checkSBOM(t *testing.T, path, gosum, version string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc spdxDocument
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.SPDXVersion != "SPDX-2.3" || doc.DataLicense != "CC0-1.0" || doc.SPDXID != "SPDXRef-DOCUMENT" || doc.DocumentNamespace == "" {
		t.Errorf("document header: %+v", doc)
	}
	byID := map[string]spdxPackage{}
	for _, p := range doc.Packages {
		if _, dup := byID[p.SPDXID]; dup {
			t.Errorf("SPDXID %s twice", p.SPDXID)
		}
		byID[p.SPDXID] = p
	}
	for _, r := range doc.Relationships {
		if _, ok := byID[r.RelatedSPDXElement]; !ok {
			t.Errorf("relationship %+v names no package", r)
		}
	}
	if r := doc.Relationships[0]; r.RelationshipType != "DESCRIBES" || byID[r.RelatedSPDXElement].Name != filepath.Base(strings.TrimSuffix(path, ".sbom.json")) {
		t.Errorf("the document describes %+v", r)
	}
	// go.sum's line for github.com/flynn/noise (not its /go.mod line).
	f, _ := os.Open(gosum)
	defer f.Close()
	var noiseVersion, noiseSum string
	for sc := bufio.NewScanner(f); sc.Scan(); {
		fs := strings.Fields(sc.Text())
		if len(fs) == 3 && fs[0] == "github.com/flynn/noise" && !strings.HasSuffix(fs[1], "/go.mod") {
			noiseVersion, noiseSum = fs[1], fs[2]
		}
	}
	hexSum, ok := h1Hex(noiseSum)
	if !ok {
		t.Fatalf("go.sum has no hash for github.com/flynn/noise")
	}
	found, main := false, false
	for _, p := range doc.Packages {
		switch p.Name {
		case "github.com/flynn/noise":
			found = true
			if p.VersionInfo != noiseVersion || len(p.Checksums) != 1 || p.Checksums[0].ChecksumValue != hexSum ||
				len(p.ExternalRefs) != 1 || p.ExternalRefs[0].ReferenceLocator != "pkg:golang/github.com/flynn/noise@"+noiseVersion {
				t.Errorf("github.com/flynn/noise in the SBOM: %+v; go.sum has %s %s", p, noiseVersion, noiseSum)
			}
		case "github.com/outpost-exec/outpost":
			main = p.VersionInfo == "v"+version
		}
	}
	if !found || !main {
		t.Errorf("SBOM lacks github.com/flynn/noise (%v) or the main module at v%s (%v)", found, version, main)
	}
}
