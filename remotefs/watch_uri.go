package remotefs

import (
	"strings"

	"github.com/outpost-exec/outpost/protocol"
)

// fs/watchMissing takes its paths as codex 0.171 parses them: a malformed
// one fails the whole request with codex's own words (-32602), before
// anything is watched, while a well-formed file: URI that names nothing on
// this host is not an error but a path that cannot be watched (the call
// answers watching false). checkWatchPath tells the malformed ones; what
// it lets through goes to the path mapper, whose refusals are the second
// kind. An absolute native path is accepted, as by every other fs call of
// outpost (codex would refuse it as a relative URL).
func checkWatchPath(s string) error {
	invalid := func(format string, args ...any) error {
		return protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, format, args...)
	}
	if hasFileScheme(s) {
		rest := s[len("file:"):]
		if i := strings.IndexAny(rest, "?#"); i >= 0 {
			if rest[i] == '?' {
				return invalid("query parameters are not allowed in path URIs")
			}
			return invalid("fragments are not allowed in path URIs")
		}
		if strings.IndexByte(s, 0) >= 0 || strings.Contains(rest, "%00") {
			return invalid("'%s' is invalid on 'linux'", s)
		}
		return nil
	}
	if strings.HasPrefix(s, "/") && !strings.HasPrefix(s, "//") { // "//host/x" is a URL without a scheme
		if strings.IndexByte(s, 0) >= 0 {
			return invalid("'%s' is invalid on 'linux'", s)
		}
		return nil
	}
	if scheme, ok := uriScheme(s); ok {
		return invalid("unsupported path URI scheme `%s`", strings.ToLower(scheme))
	}
	return invalid("invalid URI: relative URL without a base")
}

func hasFileScheme(s string) bool {
	return len(s) >= 5 && strings.EqualFold(s[:5], "file:")
}

// uriScheme is s's scheme as a URL parser sees it: a letter, then letters,
// digits, '+', '-' or '.', then ':' (one letter too: "C:\x" has scheme c).
func uriScheme(s string) (string, bool) {
	i := strings.IndexByte(s, ':')
	if i < 1 {
		return "", false
	}
	for j := 0; j < i; j++ {
		c := s[j]
		letter := 'a' <= c|0x20 && c|0x20 <= 'z'
		if !letter && (j == 0 || !('0' <= c && c <= '9') && c != '+' && c != '-' && c != '.') {
			return "", false
		}
	}
	return s[:i], true
}
