package transport

import (
	"crypto/sha256"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
)

// Attacks on the upgrade check and the token loader. The expected
// answers for header shapes are what codex 0.171's exec-server answers
// (probed with raw upgrade requests).

func allowStatus(a WSAuth, headers map[string][]string) int {
	r := httptest.NewRequest("GET", "/", nil)
	for k, vs := range headers {
		for _, v := range vs {
			r.Header.Add(k, v)
		}
	}
	w := httptest.NewRecorder()
	if a.Allow(w, r) {
		return 200
	}
	return w.Code
}

func TestWSAuthAttackHeaderShapes(t *testing.T) {
	sum := sha256.Sum256([]byte("tok"))
	for name, a := range map[string]WSAuth{"token": {Token: "tok"}, "digest": {TokenSHA256: sum[:]}} {
		for _, c := range []struct {
			name string
			auth []string
			want int
		}{
			// codex trims the token: two spaces still carry it.
			{"double space", []string{"Bearer  tok"}, 200},
			{"tab instead of space", []string{"Bearer\ttok"}, 401},
			{"token then more", []string{"Bearer tok x"}, 401},
			{"empty token", []string{"Bearer "}, 401},
			{"only spaces", []string{"Bearer    "}, 401},
			{"scheme mixed case", []string{"bEaReR tok"}, 200},
			// The first header counts, as in codex: a second cannot
			// override a wrong first, nor a bad second spoil a good first.
			{"good then bad", []string{"Bearer tok", "Bearer bad"}, 200},
			{"bad then good", []string{"Bearer bad", "Bearer tok"}, 401},
			{"prefix of token", []string{"Bearer to"}, 401},
			{"token with NUL", []string{"Bearer tok\x00"}, 401},
		} {
			if got := allowStatus(a, map[string][]string{"Authorization": c.auth}); got != c.want {
				t.Errorf("%s: %s %q: %d, want %d", name, c.name, c.auth, got, c.want)
			}
		}
		// Origin is judged before the token: a page cannot learn whether
		// its guess was right.
		if got := allowStatus(a, map[string][]string{"Authorization": {"Bearer tok"}, "Origin": {"http://127.0.0.1:1"}}); got != 403 {
			t.Errorf("%s: good token with Origin: %d, want 403", name, got)
		}
		if got := allowStatus(a, map[string][]string{"Authorization": {"Bearer bad"}, "Origin": {"null"}}); got != 403 {
			t.Errorf("%s: bad token with Origin: %d, want 403", name, got)
		}
	}
	// An empty Origin header is still an Origin header to a browser, but
	// net/http cannot tell it from none; only a non-empty one is refused.
	if got := allowStatus(WSAuth{}, map[string][]string{"Origin": {"file://"}}); got != http.StatusForbidden {
		t.Errorf("no token, Origin file://: %d", got)
	}
}

func TestWSAuthAttackTokenFileTrimmedAsCodex(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "tok")
	if err := os.WriteFile(p, []byte("  tok \r\n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := LoadWSAuth("capability-token", p, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if a.Token != "tok" {
		t.Fatalf("token %q, want %q (codex trims the file's white space)", a.Token, "tok")
	}
	if got := allowStatus(a, map[string][]string{"Authorization": {"Bearer tok"}}); got != 200 {
		t.Fatalf("Bearer tok: %d", got)
	}
	// Only white space is empty.
	os.WriteFile(p, []byte(" \t\n"), 0o600)
	if _, err := LoadWSAuth("capability-token", p, "", ""); !errors.Is(err, ErrWSAuth) {
		t.Fatalf("blank token file: %v", err)
	}
}

func TestWSAuthAttackTokenFilePermissionsAndLinks(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	os.WriteFile(secret, []byte("tok\n"), 0o600)
	// A symlink is followed, and the mode judged is the target's (the
	// checks are on the opened file, so swapping the link after them
	// cannot make the loader read an unchecked file).
	link := filepath.Join(dir, "link")
	if err := os.Symlink(secret, link); err != nil {
		t.Fatal(err)
	}
	if a, err := LoadWSAuth("capability-token", link, "", ""); err != nil || a.Token != "tok" {
		t.Fatalf("link to a 0600 file: %+v %v", a, err)
	}
	open := filepath.Join(dir, "open")
	os.WriteFile(open, []byte("tok\n"), 0o640)
	os.Chmod(open, 0o640) // past the umask
	openLink := filepath.Join(dir, "openlink")
	os.Symlink(open, openLink)
	for _, p := range []string{open, openLink} {
		if _, err := LoadWSAuth("capability-token", p, "", ""); !errors.Is(err, ErrWSAuth) {
			t.Errorf("%s (group-readable): %v, want ErrWSAuth", p, err)
		}
	}
	// A device is not a regular file either (and must not block).
	if _, err := LoadWSAuth("capability-token", "/dev/zero", "", ""); !errors.Is(err, ErrWSAuth) {
		t.Errorf("/dev/zero: %v, want ErrWSAuth", err)
	}
	// A dangling link and a missing file are errors, not empty tokens.
	dangling := filepath.Join(dir, "dangling")
	os.Symlink(filepath.Join(dir, "nothing"), dangling)
	for _, p := range []string{dangling, filepath.Join(dir, "missing")} {
		if _, err := LoadWSAuth("capability-token", p, "", ""); !errors.Is(err, ErrWSAuth) {
			t.Errorf("%s: %v, want ErrWSAuth", p, err)
		}
	}
	// A huge file is refused without reading it all.
	big := filepath.Join(dir, "big")
	os.WriteFile(big, make([]byte, 1<<20), 0o600)
	if _, err := LoadWSAuth("capability-token", big, "", ""); !errors.Is(err, ErrWSAuth) {
		t.Errorf("1 MiB token file: %v, want ErrWSAuth", err)
	}
}

// An empty token never means "any token": with no token configured the
// check is Origin only, and a configured digest cannot be matched by an
// empty bearer.
func TestWSAuthAttackEmptyToken(t *testing.T) {
	if (WSAuth{Token: ""}).Enabled() {
		t.Fatal("empty token enables auth")
	}
	empty := sha256.Sum256(nil)
	a := WSAuth{TokenSHA256: empty[:]}
	if got := allowStatus(a, map[string][]string{"Authorization": {"Bearer "}}); got != 401 {
		t.Fatalf("digest of the empty token, empty bearer: %d", got)
	}
	if got := allowStatus(a, map[string][]string{"Authorization": {"Bearer"}}); got != 401 {
		t.Fatalf("digest of the empty token, bare scheme: %d", got)
	}
	if err := (WSAuth{TokenSHA256: []byte{1, 2}}).Validate(); err == nil {
		t.Fatal("a 2-byte digest validates")
	}
}
