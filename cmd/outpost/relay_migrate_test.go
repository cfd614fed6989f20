package main

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/outpost-exec/outpost/internal/etcdtest"
	"github.com/outpost-exec/outpost/relay"
)

// runCLI runs outpost in-process with args.
func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

// etcdKeys counts the keys under prefix.
func etcdKeys(t *testing.T, cli *clientv3.Client, prefix string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

// A relay's bbolt store moves into etcd: the old tokens redeem there with
// their counters, the bindings and revocations hold, and the token and
// executors commands reach it with --store.
func TestRelayMigrateMovesTheBoltStoreIntoEtcd(t *testing.T) {
	c := etcdtest.Start(t, 1)
	dir := filepath.Join(t.TempDir(), "relay")
	single, _ := tokenCreate(t, dir, "--join", "--uses", "1", "--label", "zone=a")
	twice, _ := tokenCreate(t, dir, "--client", "--uses", "2", "--executors", "build-*")
	revokedSecret, revokedID := tokenCreate(t, dir, "--client")
	if code, _, errs := runCLI("token", "revoke", "--state-dir", dir, revokedID); code != 0 {
		t.Fatalf("revoke: %s", errs)
	}
	bolt, err := relay.OpenStore(filepath.Join(dir, "relay.db"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bolt.Redeem(relay.TokenClient, twice); err != nil {
		t.Fatal(err)
	}
	var k1, k2 [32]byte
	k1[0], k2[0] = 1, 2
	if err := bolt.BindExecutor("a", k1); err != nil {
		t.Fatal(err)
	}
	if err := bolt.BindExecutor("b", k2); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := runCLI("executors", "revoke", "--state-dir", dir, "a"); code != 0 {
		t.Fatalf("executors revoke: %s", errs)
	}

	url := c.URL("/cluster1")
	code, out, errs := runCLI("relay", "migrate", "--state-dir", dir, "--to", url)
	if code != 0 {
		t.Fatalf("migrate: %d %s", code, errs)
	}
	for _, want := range []string{"tokens", "3", "executor bindings", "revoked keys", "revocation sequence", "9 records in 1 transaction)"} {
		if !strings.Contains(out, want) {
			t.Errorf("migrate output lacks %q:\n%s", want, out)
		}
	}

	// The etcd store is the old one.
	o, err := relay.ParseEtcdURL(url)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := relay.DialEtcd(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	s, err := relay.OpenExistingEtcdStore(cli, o.Prefix, 0)
	if err != nil {
		t.Fatal(err)
	}
	if tk, err := s.Redeem(relay.TokenJoin, single); err != nil || tk.Labels["zone"] != "a" {
		t.Fatalf("old single-use token: %+v %v", tk, err)
	}
	if _, err := s.Redeem(relay.TokenJoin, single); !errors.Is(err, relay.ErrTokenUsedUp) {
		t.Fatalf("single-use token twice: %v", err)
	}
	if tk, err := s.Redeem(relay.TokenClient, twice); err != nil || tk.Used != 2 || tk.Executors != "build-*" {
		t.Fatalf("two-use token (used once before): %+v %v", tk, err)
	}
	if _, err := s.Redeem(relay.TokenClient, twice); !errors.Is(err, relay.ErrTokenUsedUp) {
		t.Fatalf("two-use token a third time: %v", err)
	}
	if _, err := s.Redeem(relay.TokenClient, revokedSecret); !errors.Is(err, relay.ErrTokenRevoked) {
		t.Fatalf("revoked token: %v", err)
	}
	if err := s.BindExecutor("a", k1); !errors.Is(err, relay.ErrKeyRevoked) {
		t.Fatalf("revoked key: %v", err)
	}
	if k, ok, err := s.ExecutorKey("b"); err != nil || !ok || k != k2 {
		t.Fatalf("binding of b: %v %v %v", k, ok, err)
	}
	// One revoked token and one revoked key: two revocations.
	if seq, err := s.RevocationSeq(); err != nil || seq != 2 {
		t.Fatalf("revocation sequence %d %v", seq, err)
	}

	// The commands reach it with --store, or $OUTPOST_RELAY_STORE.
	code, out, errs = runCLI("token", "ls", "--store", url)
	if code != 0 || strings.Count(out, "\n") != 4 || !strings.Contains(out, "used up") || !strings.Contains(out, "revoked") {
		t.Fatalf("token ls --store: %d\n%s%s", code, out, errs)
	}
	t.Setenv("OUTPOST_RELAY_STORE", url)
	if code, out, errs := runCLI("token", "create", "--join", "--state-dir", t.TempDir()); code != 0 || !strings.HasPrefix(out, "opt_") {
		t.Fatalf("token create with $OUTPOST_RELAY_STORE: %d %s", code, errs)
	}
	if code, _, errs := runCLI("executors", "revoke", "b"); code != 0 {
		t.Fatalf("executors revoke on etcd: %s", errs)
	}
	if seq, err := s.RevocationSeq(); err != nil || seq != 3 {
		t.Fatalf("revocation sequence after executors revoke: %d %v", seq, err)
	}

	// A second migration is refused and writes nothing.
	before := etcdKeys(t, cli, o.Prefix)
	code, _, errs = runCLI("relay", "migrate", "--state-dir", dir, "--to", url)
	if code != 1 || !strings.Contains(errs, "already holds") || !strings.Contains(errs, "nothing was written") {
		t.Fatalf("second migrate: %d %s", code, errs)
	}
	if after := etcdKeys(t, cli, o.Prefix); after != before {
		t.Fatalf("the refused migration changed the keys: %d → %d", before, after)
	}
}

// The store flags: a mistyped prefix is not answered from an empty store,
// --etcd-* flags without an etcd store are an error, and a password is
// never printed.
func TestRelayStoreFlags(t *testing.T) {
	c := etcdtest.Start(t, 1)
	if code, _, errs := runCLI("token", "ls", "--store", c.URL("/nothing-here")); code != 1 || !strings.Contains(errs, "no token store") {
		t.Fatalf("ls of an empty prefix: %d %s", code, errs)
	}
	if code, _, errs := runCLI("token", "ls", "--state-dir", t.TempDir(), "--etcd-user", "alice"); code != 1 || !strings.Contains(errs, "needs --store") {
		t.Fatalf("--etcd-user without --store: %d %s", code, errs)
	}
	// etcd without authentication takes any user (the client's
	// authentication is answered "not enabled" and skipped).
	code, out, errs := runCLI("token", "create", "--client", "--store", c.URL("/pw"), "--etcd-user", "alice:s3cret-pw")
	if code != 0 || strings.Contains(out+errs, "s3cret-pw") {
		t.Fatalf("create with a user: %d %s %s", code, out, errs)
	}
	t.Setenv("OUTPOST_ETCD_PASSWORD", "s3cret-env")
	code, out, errs = runCLI("token", "ls", "--store", "etcd://127.0.0.1:1/pw", "--etcd-user", "alice")
	if code != 1 || !strings.Contains(errs, "unavailable") || strings.Contains(out+errs, "s3cret") {
		t.Fatalf("ls on a dead endpoint: %d %s %s", code, out, errs)
	}
	if code, _, errs := runCLI("token", "ls", "--store", "etcd://u:s3cret-url@127.0.0.1:1/pw"); code != 1 || strings.Contains(errs, "s3cret") {
		t.Fatalf("a password in the URL: %d %s", code, errs)
	}
	if code, _, errs := runCLI("relay", "migrate", "--state-dir", t.TempDir(), "--to", "http://x"); code != exitUsage {
		t.Fatalf("migrate --to http://: %d %s", code, errs)
	}
	if code, _, _ := runCLI("relay", "migrate", "--state-dir", t.TempDir()); code != exitUsage {
		t.Fatalf("migrate without --to: %d", code)
	}
	if code, _, errs := runCLI("relay", "migrate", "--state-dir", filepath.Join(t.TempDir(), "none"), "--to", c.URL("/m")); code != 1 || !strings.Contains(errs, "no token store") {
		t.Fatalf("migrate of a missing relay.db: %d %s", code, errs)
	}
}
