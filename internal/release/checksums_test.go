package release

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestChecksumsVerifyWithSha256sum: coreutils' sha256sum -c accepts the
// file, and rejects it once a file changes.
func TestChecksumsVerifyWithSha256sum(t *testing.T) {
	sha256sum, err := exec.LookPath("sha256sum")
	if err != nil {
		t.Skip("sha256sum is not installed")
	}
	dir := t.TempDir()
	var files []string
	for _, n := range []string{"b.zip", "a.tar.gz", "a.tar.gz.sbom.json"} {
		p := filepath.Join(dir, n)
		os.WriteFile(p, []byte("content of "+n), 0o644)
		files = append(files, p)
	}
	text, err := Checksums(files)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if len(lines) != 3 || !strings.HasSuffix(lines[0], "  a.tar.gz") || !strings.HasSuffix(lines[2], "  b.zip") {
		t.Fatalf("checksums not one sorted line per file:\n%s", text)
	}
	os.WriteFile(filepath.Join(dir, "checksums.txt"), []byte(text), 0o644)
	check := func() error {
		cmd := exec.Command(sha256sum, "-c", "checksums.txt")
		cmd.Dir = dir
		return cmd.Run()
	}
	if err := check(); err != nil {
		t.Fatalf("sha256sum -c: %v", err)
	}
	os.WriteFile(files[1], []byte("tampered"), 0o644)
	if err := check(); err == nil {
		t.Fatal("sha256sum -c passed a changed file")
	}
}

func TestChecksumsRefusesTwoFilesOfOneName(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(a, "x"), nil, 0o644)
	os.WriteFile(filepath.Join(b, "x"), nil, 0o644)
	if _, err := Checksums([]string{filepath.Join(a, "x"), filepath.Join(b, "x")}); err == nil {
		t.Fatal("two files named x accepted")
	}
}
