// Package pathmap translates paths sent by a client into paths native to
// the executor, resolves a client's directory to an existing native one
// (NativeDir), and checks that a path stays inside a root.
//
// # Model
//
// Clients name files either as absolute POSIX paths ("/workspace/a.go") or as
// file: URIs ("file:///workspace/a.go"). A client may run on another operating
// system, so a path it sends can be spelled for a different convention: a
// Windows drive path (C:\x, c:/x, file:///C:/x) or a UNC share (\\srv\share,
// file://srv/share). The executor is a Linux/Unix host; it never guesses what
// such a path could mean here and rejects it with an error wrapping
// ErrForeignPath. The convention is inferred from the spelling, as codex's
// PathUri does: a URI authority other than "localhost" means a UNC share, a
// first path component of the form "X:" (or "X|") means a Windows drive. The
// same rule applies to native paths and URIs ("/C:/x" is rejected too, "/a:b"
// is not), so a path accepted in one form
// is accepted in the other.
//
// Native performs the purely lexical part: it decodes file: URIs (rejecting
// percent-encoded "/" and NUL, which fail closed), requires an absolute path,
// and cleans it (".." never climbs above "/"). URI is its inverse.
//
// A Mapper then applies the executor's configured prefix mappings, e.g. a
// client's /workspace that lives at /srv/ws/42 on this host. Matching is by
// whole path components and the longest client prefix wins; ToClient maps
// executor paths reported back (cwd, fs/* results) to the client's view.
//
// Within is the filesystem-aware part: it resolves symlinks of every existing
// component, like the kernel would, and reports an error wrapping ErrEscape
// when the result lies outside the (equally resolved) root. Within is a check
// made at one moment: the filesystem can change afterwards, so it complements
// kernel enforcement (Landlock in package sandbox) rather than replacing it.
//
// Roots turns the symbolic entries of a sandbox policy (":cwd", ":tmpdir",
// ":project_roots") into concrete executor paths.
//
// The package imports only the standard library.
package pathmap

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// ErrForeignPath reports a path that is not native to this (Linux/Unix)
// executor: a Windows drive path (C:\x, c:/x, file:///C:/x), a UNC share
// (\\server\share, file://otherhost/x), a relative path, or a path that cannot
// name a file here (empty, NUL bytes, malformed URI).
var ErrForeignPath = errors.New("pathmap: path is not native to this executor")

// ErrEscape reports a path that leaves its root through ".." or a symlink.
var ErrEscape = errors.New("pathmap: path escapes its root")

// maxQuote bounds how much of an offending input is echoed in an error.
const maxQuote = 256

// quote renders s for an error message, truncated to a sensible length.
func quote(s string) string {
	if len(s) > maxQuote {
		return fmt.Sprintf("%q...", s[:maxQuote])
	}
	return fmt.Sprintf("%q", s)
}

func foreign(s, why string) error {
	return fmt.Errorf("%w: %s %s", ErrForeignPath, quote(s), why)
}

// Native turns a file: URI (file:///abs, file://localhost/abs, file:/abs,
// percent-encoded) or an absolute path into a clean absolute native path.
// NUL bytes (also after percent-decoding), relative paths and foreign forms
// return an error wrapping ErrForeignPath that names the input.
func Native(s string) (string, error) {
	if s == "" {
		return "", foreign(s, "is empty")
	}
	if strings.IndexByte(s, 0) >= 0 {
		return "", foreign(s, "contains a NUL byte")
	}
	p := s
	if hasFileScheme(s) {
		var err error
		if p, err = uriPath(s); err != nil {
			return "", err
		}
	} else {
		switch {
		case strings.HasPrefix(s, `\\`) || strings.HasPrefix(s, `\?`):
			return "", foreign(s, "is a Windows UNC path")
		case isDriveSpelling(s):
			return "", foreign(s, "is a Windows drive path")
		case strings.HasPrefix(s, `\`):
			return "", foreign(s, "is a Windows rooted path")
		case !strings.HasPrefix(s, "/"):
			if i := strings.Index(s, ":"); i > 0 && isScheme(s[:i]) {
				return "", foreign(s, "is a URI with a scheme other than file:")
			}
			return "", foreign(s, "is a relative path; an absolute path or file: URI is required")
		}
	}
	p = filepath.Clean(p)
	if isDriveComponent(firstComponent(p)) {
		return "", foreign(s, "names a Windows drive")
	}
	return p, nil
}

// hasFileScheme reports whether s starts with "file:" (scheme is
// case-insensitive).
func hasFileScheme(s string) bool {
	return len(s) >= 5 && strings.EqualFold(s[:5], "file:")
}

// isScheme reports whether s is a syntactically valid URI scheme of at least
// two characters (one letter would be a drive).
func isScheme(s string) bool {
	if len(s) < 2 || !isLetter(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !isLetter(c) && !('0' <= c && c <= '9') && c != '+' && c != '-' && c != '.' {
			return false
		}
	}
	return true
}

func isLetter(c byte) bool { return 'a' <= c|0x20 && c|0x20 <= 'z' }

// isDriveSpelling reports whether s starts like a Windows drive: a letter
// followed by ':' or '|' (the old URI spelling).
func isDriveSpelling(s string) bool {
	return len(s) >= 2 && isLetter(s[0]) && (s[1] == ':' || s[1] == '|')
}

// isDriveComponent reports whether a first path component names a Windows
// drive: exactly "X:" or "X|", or such a drive followed by a backslash (as in
// the sloppy URI file:///C:\x). "/a:b" is an ordinary Linux name.
func isDriveComponent(s string) bool {
	return isDriveSpelling(s) && (len(s) == 2 || s[2] == '\\')
}

// firstComponent returns the first component of an absolute clean path.
func firstComponent(p string) string {
	p = strings.TrimPrefix(p, "/")
	if i := strings.IndexByte(p, '/'); i >= 0 {
		return p[:i]
	}
	return p
}

// uriPath extracts and decodes the path of a file: URI. It does not clean.
func uriPath(s string) (string, error) {
	rest := s[len("file:"):]
	if i := strings.IndexAny(rest, "?#"); i >= 0 {
		return "", foreign(s, "is a file: URI with a query or fragment; encode '?' as %3F and '#' as %23")
	}
	if strings.HasPrefix(rest, "//") {
		rest = rest[2:]
		end := strings.IndexByte(rest, '/')
		if end < 0 {
			end = len(rest)
		}
		host := rest[:end]
		if host != "" && !strings.EqualFold(host, "localhost") {
			return "", foreign(s, fmt.Sprintf("names host %s; only file:///path and file://localhost/path are native here", quote(host)))
		}
		rest = rest[end:]
		if strings.HasPrefix(rest, "//") {
			return "", foreign(s, "is a UNC share spelled as a file: URI")
		}
	}
	if !strings.HasPrefix(rest, "/") {
		if rest == "" {
			return "", foreign(s, "is a file: URI without a path")
		}
		return "", foreign(s, "is a file: URI with a relative path")
	}
	p, err := percentDecode(rest)
	if err != nil {
		return "", foreign(s, err.Error())
	}
	return p, nil
}

// percentDecode decodes %XX escapes. Encoded '/' and NUL fail closed.
func percentDecode(s string) (string, error) {
	if strings.IndexByte(s, '%') < 0 {
		return s, nil
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '%' {
			b = append(b, c)
			continue
		}
		if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
			return "", errors.New("has a malformed percent escape")
		}
		d := unhex(s[i+1])<<4 | unhex(s[i+2])
		switch d {
		case 0:
			return "", errors.New("contains an encoded NUL byte (%00)")
		case '/':
			return "", errors.New("contains an encoded path separator (%2F)")
		}
		b = append(b, d)
		i += 2
	}
	return string(b), nil
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c|0x20 && c|0x20 <= 'f'
}

func unhex(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c | 0x20 - 'a' + 10
}

// URI renders an absolute native path as a file: URI, percent-encoding every
// byte other than unreserved characters, sub-delimiters, ':', '@' and '/'.
// For any path p accepted by Native, Native(URI(p)) == p. A relative path
// renders as "file:" followed by the encoded path, which Native rejects.
func URI(path string) string {
	const hexdigits = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len("file://") + len(path) + 8)
	if strings.HasPrefix(path, "/") {
		b.WriteString("file://")
	} else {
		b.WriteString("file:")
	}
	for i := 0; i < len(path); i++ {
		c := path[i]
		if keepInURI(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexdigits[c>>4])
		b.WriteByte(hexdigits[c&15])
	}
	return b.String()
}

func keepInURI(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("-._~!$&'()*+,;=:@/", c) >= 0
}

// under reports whether p equals prefix or lies beneath it at a path
// component boundary. Both must be clean absolute paths.
func under(p, prefix string) bool {
	if prefix == "/" {
		return strings.HasPrefix(p, "/")
	}
	return p == prefix || strings.HasPrefix(p, prefix) && p[len(prefix)] == '/'
}

// rebase replaces prefix (which p is under) with repl.
func rebase(p, prefix, repl string) string {
	if p == prefix {
		return repl
	}
	rest := p[len(prefix):]
	if prefix == "/" {
		rest = p[1:]
	}
	return filepath.Join(repl, rest)
}
