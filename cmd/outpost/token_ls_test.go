package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/relay"
)

// tokenCreate runs `outpost token create` in-process and returns the secret
// and the token's id.
func tokenCreate(t *testing.T, dir string, args ...string) (secret, id string) {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run(append([]string{"token", "create", "--state-dir", dir}, args...), &out, &errb); code != 0 {
		t.Fatalf("token create %v: %d %s", args, code, errb.String())
	}
	m := regexp.MustCompile(`token ([0-9a-f]+) `).FindStringSubmatch(errb.String())
	if m == nil {
		t.Fatalf("no token id in %q", errb.String())
	}
	return strings.TrimSpace(out.String()), m[1]
}

// `token ls` says what each token is good for: its STATE is computed from
// the record (used up, expired, revoked, active), uses read USED/MAX, and
// scope and labels read k=v,k=v, or - when empty.
func TestTokenLsShowsStateUsesAndReadableScope(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "relay")
	usedSecret, used := tokenCreate(t, dir, "--join", "--uses", "1", "--label", "zone=b", "--label", "arch=arm64")
	_, expired := tokenCreate(t, dir, "--client", "--ttl", "1ns", "--executors", "build-*")
	_, revoked := tokenCreate(t, dir, "--client")
	_, active := tokenCreate(t, dir, "--join", "--uses", "3")
	store, err := relay.OpenStore(filepath.Join(dir, "relay.db"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Redeem(relay.TokenJoin, usedSecret); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"token", "revoke", "--state-dir", dir, revoked}, &out, &errb); code != 0 {
		t.Fatalf("revoke: %d %s", code, errb.String())
	}
	time.Sleep(time.Millisecond)
	out.Reset()
	if code := run([]string{"token", "ls", "--state-dir", dir}, &out, &errb); code != 0 {
		t.Fatalf("ls: %d %s", code, errb.String())
	}
	rows := map[string][]string{}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if h := strings.Fields(lines[0]); strings.Join(h, " ") != "ID KIND STATE USED/MAX EXPIRES SCOPE" {
		t.Fatalf("header %q", lines[0])
	}
	for _, l := range lines[1:] {
		// STATE may be two words ("used up"): split on runs of 2+ spaces.
		cols := regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(l), -1)
		rows[cols[0]] = cols
	}
	want := map[string][]string{
		used:    {used, "join", "used up", "1/1", "never", "arch=arm64,zone=b"},
		expired: {expired, "client", "expired", "0/∞", "", "build-*"},
		revoked: {revoked, "client", "revoked", "0/∞", "never", "*"},
		active:  {active, "join", "active", "0/3", "never", "-"},
	}
	for id, w := range want {
		got := rows[id]
		if len(got) != len(w) {
			t.Errorf("row %s: %q, want %q", id, got, w)
			continue
		}
		for i := range w {
			if i == 4 && w[i] == "" {
				continue // an RFC 3339 time
			}
			if got[i] != w[i] {
				t.Errorf("row %s column %d: %q, want %q (row %q)", id, i, got[i], w[i], got)
			}
		}
	}
	if strings.Contains(out.String(), "map[") {
		t.Errorf("ls prints Go maps:\n%s", out.String())
	}
}

// Commands that read the relay's store refuse a state directory or
// database that does not exist, and create nothing; token create makes them.
func TestReadOnlyTokenCommandsRefuseAMissingStore(t *testing.T) {
	base := t.TempDir()
	typo := filepath.Join(base, "relay-typo")
	empty := filepath.Join(base, "empty")
	if err := os.Mkdir(empty, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{typo, empty} {
		for _, args := range [][]string{
			{"token", "ls", "--state-dir", dir},
			{"token", "revoke", "--state-dir", dir, "0123456789abcdef"},
			{"executors", "revoke", "--state-dir", dir, "build-1"},
		} {
			var out, errb bytes.Buffer
			code := run(args, &out, &errb)
			if code != 1 || !strings.Contains(errb.String(), "does not exist") || !strings.Contains(errb.String(), dir) {
				t.Errorf("%v: exit %d, stderr %q; want 1 and a missing-store error naming %s", args, code, errb.String(), dir)
			}
		}
	}
	if _, err := os.Stat(typo); !os.IsNotExist(err) {
		t.Errorf("a read-only command created %s: %v", typo, err)
	}
	if _, err := os.Stat(filepath.Join(empty, "relay.db")); !os.IsNotExist(err) {
		t.Errorf("a read-only command created the database: %v", err)
	}
	// token create may create both.
	tokenCreate(t, typo, "--client")
	var out, errb bytes.Buffer
	if code := run([]string{"token", "ls", "--state-dir", typo}, &out, &errb); code != 0 {
		t.Fatalf("ls after create: %d %s", code, errb.String())
	}
}
