package transport

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
)

func TestWSAuthAllowsOnlyTheTokenAndNoOrigin(t *testing.T) {
	sum := sha256.Sum256([]byte("tok"))
	for name, a := range map[string]WSAuth{"token": {Token: "tok"}, "digest": {TokenSHA256: sum[:]}} {
		for _, c := range []struct {
			auth, origin string
			want         int
		}{
			{"Bearer tok", "", 200},
			{"bearer tok", "", 200},
			{"BEARER tok", "", 200},
			{"Bearer tok", "http://page.example", 403},
			{"", "", 401},
			{"Bearer", "", 401},
			{"Bearer to", "", 401},
			{"Bearer tok ", "", 401},
			{"Basic tok", "", 401},
		} {
			r := httptest.NewRequest("GET", "/", nil)
			if c.auth != "" {
				r.Header.Set("Authorization", c.auth)
			}
			if c.origin != "" {
				r.Header.Set("Origin", c.origin)
			}
			w := httptest.NewRecorder()
			got := 200
			if !a.Allow(w, r) {
				got = w.Code
			}
			if got != c.want {
				t.Errorf("%s: %q origin %q: %d, want %d", name, c.auth, c.origin, got, c.want)
			}
		}
	}
	// No token: Origin is still refused.
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("Origin", "null")
	w := httptest.NewRecorder()
	if (WSAuth{}).Allow(w, r) || w.Code != http.StatusForbidden {
		t.Errorf("no token, Origin null: %d", w.Code)
	}
}

func TestLoadWSAuthReadsCodexFlags(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	os.WriteFile(good, []byte("s3cret\n"), 0o600)
	open := filepath.Join(dir, "open")
	os.WriteFile(open, []byte("s3cret\n"), 0o644)
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte("\n"), 0o600)
	a, err := LoadWSAuth("capability-token", good, "", "")
	if err != nil || a.Token != "s3cret" {
		t.Fatalf("token file: %+v %v", a, err)
	}
	sum := sha256.Sum256([]byte("s3cret"))
	a, err = LoadWSAuth("capability-token", "", hex.EncodeToString(sum[:]), "")
	if err != nil || string(a.TokenSHA256) != string(sum[:]) {
		t.Fatalf("digest: %+v %v", a, err)
	}
	if a, err := LoadWSAuth("", "", "", "envtok"); err != nil || a.Token != "envtok" {
		t.Fatalf("env token: %+v %v", a, err)
	}
	for _, c := range [][3]string{
		{"capability-token", open, ""},
		{"capability-token", empty, ""},
		{"capability-token", dir, ""},
		{"capability-token", "rel/tok", ""},
		{"capability-token", filepath.Join(dir, "missing"), ""},
		{"capability-token", good, hex.EncodeToString(sum[:])},
		{"capability-token", "", "zz"},
		{"capability-token", "", ""},
		{"", good, ""},
		{"signed-bearer-token", "", ""},
	} {
		if _, err := LoadWSAuth(c[0], c[1], c[2], ""); !errors.Is(err, ErrWSAuth) {
			t.Errorf("%q: %v, want ErrWSAuth", c, err)
		}
	}
}
