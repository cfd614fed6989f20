package identity

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
)

// checkTrustFileInfo refuses an allow-list or known-executors file that
// group or others can write: whoever can write it decides whom we trust.
// Where permission bits say nothing (Windows: modeBitsGuard), only the
// file's type is checked.
func checkTrustFileInfo(kind, path string, fi fs.FileInfo) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("identity: %s %s is not a regular file (mode %v)", kind, path, fi.Mode())
	}
	if perm := fi.Mode().Perm(); modeBitsGuard && perm&0o022 != 0 {
		return fmt.Errorf("identity: %s %s has permissions %04o, which let group or others change it; run: chmod go-w %s",
			kind, path, uint32(perm), path)
	}
	return nil
}

// readTrustFile reads a trust file after checking it. Symlinks are
// followed (the target is checked).
func readTrustFile(kind, path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("identity: %s: %w", kind, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("identity: %s: %w", kind, err)
	}
	if err := checkTrustFileInfo(kind, path, fi); err != nil {
		return nil, err
	}
	if err := checkTrustFileACL(f, kind, path); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(f); err != nil {
		return nil, fmt.Errorf("identity: %s: %w", kind, err)
	}
	return buf.Bytes(), nil
}

// forEachLine calls fn with each line of data (1-based number, content
// without the line ending and surrounding white space), skipping blank
// lines and lines starting with '#'. It stops at fn's first error.
func forEachLine(data []byte, fn func(n int, line string) error) error {
	n := 0
	for len(data) > 0 {
		n++
		var line []byte
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			line, data = data, nil
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		if err := fn(n, string(line)); err != nil {
			return err
		}
	}
	return nil
}

// splitField returns the first white-space separated field of line and
// the rest (with leading white space removed).
func splitField(line string) (field, rest string) {
	i := 0
	for i < len(line) && !isSpace(line[i]) {
		i++
	}
	field = line[:i]
	for i < len(line) && isSpace(line[i]) {
		i++
	}
	return field, line[i:]
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'
}
