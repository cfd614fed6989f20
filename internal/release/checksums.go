package release

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// FileSHA256 is the hex SHA-256 of the file at path.
func FileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Checksums is the text of a checksums.txt for files: a line per file,
// sorted by base name, "<hex sha256>  <base name>" — the format of
// sha256sum and shasum -a 256 (text mode), so `sha256sum -c` and
// `shasum -a 256 -c` verify it in the directory that holds the files.
func Checksums(files []string) (string, error) {
	fs := slices.Clone(files)
	slices.SortFunc(fs, func(a, b string) int { return strings.Compare(filepath.Base(a), filepath.Base(b)) })
	var b strings.Builder
	for i, f := range fs {
		name := filepath.Base(f)
		if i > 0 && filepath.Base(fs[i-1]) == name {
			return "", fmt.Errorf("checksums: two files named %s", name)
		}
		if strings.ContainsAny(name, "\\\n") {
			return "", fmt.Errorf("checksums: %q needs escaping in sha256sum's format", name)
		}
		sum, err := FileSHA256(f)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "%s  %s\n", sum, name)
	}
	return b.String(), nil
}
