package relay

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/outpost-exec/outpost/internal/etcdtest"
	"github.com/outpost-exec/outpost/protocol"
)

var prefixSeq atomic.Int64

// newPrefix is an etcd prefix no other test uses.
func newPrefix() string { return fmt.Sprintf("/test%d", prefixSeq.Add(1)) }

// etcdStore is a store under prefix on a new client of the given members
// of c (all when none is given).
func etcdStore(t *testing.T, c *etcdtest.Cluster, prefix string, members ...int) *Store {
	t.Helper()
	s, err := NewEtcdStore(c.Client(t, members...), prefix, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// storeBackendCase opens stores on one backend; every call of open is a
// new Store value (a new client, on etcd) on the same data.
type storeBackendCase struct {
	name string
	open func(t *testing.T) (open func() *Store)
}

func storeBackendCases(c *etcdtest.Cluster) []storeBackendCase {
	return []storeBackendCase{
		{"bbolt", func(t *testing.T) func() *Store {
			p := filepath.Join(t.TempDir(), "relay.db")
			return func() *Store {
				s, err := OpenStore(p)
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
		}},
		{"etcd", func(t *testing.T) func() *Store {
			prefix := newPrefix()
			return func() *Store { return etcdStore(t, c, prefix) }
		}},
	}
}

// TestStoreBehaviourOnBothBackends runs the store's semantics on bbolt and
// on etcd: whatever the backend, the answers are the same.
func TestStoreBehaviourOnBothBackends(t *testing.T) {
	c := etcdtest.Start(t, 1)
	behaviours := []struct {
		name string
		run  func(t *testing.T, open func() *Store)
	}{
		{"CreateRedeemKinds", testCreateRedeemKinds},
		{"ExpiryUsesAndRevoke", testExpiryUsesAndRevoke},
		{"ListSortedAndPersisted", testListSortedAndPersisted},
		{"BindingFirstWins", testBindingFirstWins},
		{"RevokeExecutor", testRevokeExecutorFlow},
		{"ConcurrentSingleUse", testConcurrentSingleUse},
		{"MigrateRefusesNonEmpty", testMigrateRefusesNonEmpty},
	}
	for _, b := range storeBackendCases(c) {
		for _, bh := range behaviours {
			t.Run(b.name+"/"+bh.name, func(t *testing.T) { bh.run(t, b.open(t)) })
		}
	}
}

func testCreateRedeemKinds(t *testing.T, open func() *Store) {
	s := open()
	labels := map[string]string{"os": "linux"}
	secret, tok, err := s.Create(TokenJoin, CreateOptions{Labels: labels, Uses: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(tok.ID) != 16 || !strings.HasPrefix(secret, "opt_") {
		t.Fatalf("token %+v secret %q", tok, secret)
	}
	if _, err := s.Redeem(TokenClient, secret); !errors.Is(err, ErrTokenKind) {
		t.Fatalf("wrong kind: %v", err)
	}
	// Another last character (a secret ending in "A" made this one the
	// secret itself, once in 64 runs).
	last := "A"
	if strings.HasSuffix(secret, "A") {
		last = "B"
	}
	for _, bad := range []string{"", "garbage", secret[:len(secret)-1] + last, "opt_" + strings.Repeat("B", 43)} {
		if _, err := s.Redeem(TokenJoin, bad); !errors.Is(err, ErrTokenUnknown) {
			t.Fatalf("Redeem(%q) = %v", bad, err)
		}
	}
	got, err := s.Redeem(TokenJoin, secret)
	if err != nil || got.ID != tok.ID || got.Labels["os"] != "linux" || got.Used != 1 {
		t.Fatalf("redeem: %+v %v", got, err)
	}
	// Another Store value on the same data sees the use.
	if got, err := open().Redeem(TokenJoin, secret); err != nil || got.Used != 2 {
		t.Fatalf("second redeem: %+v %v", got, err)
	}
	if _, err := s.Redeem(TokenJoin, secret); !errors.Is(err, ErrTokenUsedUp) {
		t.Fatalf("third redeem: %v", err)
	}
}

func testExpiryUsesAndRevoke(t *testing.T, open func() *Store) {
	s := open()
	clk := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s.now = clk.Now
	exp, _, err := s.Create(TokenClient, CreateOptions{TTL: time.Hour, Executors: "*"})
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second) // List sorts by creation
	rev, rt, err := s.Create(TokenClient, CreateOptions{Executors: "*"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Redeem(TokenClient, exp); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour - time.Second)
	if _, err := s.Redeem(TokenClient, exp); !errors.Is(err, ErrTokenExpired) {
		t.Fatalf("expired: %v", err)
	}
	if err := s.Revoke("nope"); !errors.Is(err, ErrTokenUnknown) {
		t.Fatalf("revoke unknown: %v", err)
	}
	for range 2 { // revoking twice is no error
		if err := s.Revoke(rt.ID); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Redeem(TokenClient, rev); !errors.Is(err, ErrTokenRevoked) {
		t.Fatalf("revoked: %v", err)
	}
	list, err := s.List()
	if err != nil || len(list) != 2 {
		t.Fatalf("list %v %v", list, err)
	}
	// Refusals consumed nothing.
	if list[0].Used != 1 || list[1].Used != 0 || list[0].State(clk.Now()) != TokenExpired || list[1].State(clk.Now()) != TokenRevoked {
		t.Fatalf("list %+v", list)
	}
}

func testListSortedAndPersisted(t *testing.T, open func() *Store) {
	s := open()
	clk := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s.now = clk.Now
	var ids []string
	for range 5 {
		_, tk, err := s.Create(TokenJoin, CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, tk.ID)
		clk.Advance(-time.Minute) // each newer token is older: the sort must reverse them
	}
	slices.Reverse(ids)
	list, err := open().List()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tk := range list {
		got = append(got, tk.ID)
	}
	if !slices.Equal(got, ids) {
		t.Fatalf("List order %v, want %v", got, ids)
	}
}

func testBindingFirstWins(t *testing.T, open func() *Store) {
	s := open()
	var k1, k2 [32]byte
	k1[0], k2[0] = 1, 2
	if err := s.BindExecutor("", k1); err == nil {
		t.Fatal("empty id bound")
	}
	if err := s.BindExecutor("w", k1); err != nil {
		t.Fatal(err)
	}
	if err := s.BindExecutor("w", k1); err != nil {
		t.Fatalf("rebinding the same key: %v", err)
	}
	s2 := open()
	if err := s2.BindExecutor("w", k2); !errors.Is(err, ErrExecutorKeyMismatch) {
		t.Fatalf("another key: %v", err)
	}
	if k, ok, err := s2.ExecutorKey("w"); err != nil || !ok || k != k1 {
		t.Fatalf("ExecutorKey = %v %v %v", k, ok, err)
	}
	if _, ok, err := s2.ExecutorKey("nobody"); err != nil || ok {
		t.Fatalf("ExecutorKey(nobody) = %v %v", ok, err)
	}
}

// testRevokeExecutorFlow is TestRevokeExecutorUnbindsEveryIDOfTheKeyAndRevokesItForGood
// on any backend.
func testRevokeExecutorFlow(t *testing.T, open func() *Store) {
	s := open()
	clock := &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	s.now = clock.Now
	var k1, k2, k3 [32]byte
	k1[0], k2[0], k3[0] = 1, 2, 3
	for id, k := range map[string][32]byte{"a": k1, "b": k1, "c": k2} {
		if err := s.BindExecutor(id, k); err != nil {
			t.Fatal(err)
		}
	}
	if seq, err := s.RevocationSeq(); err != nil || seq != 0 {
		t.Fatalf("seq before = %d %v", seq, err)
	}
	if _, err := s.RevokeExecutor("nobody"); !errors.Is(err, ErrExecutorUnknown) {
		t.Fatalf("revoke unknown = %v", err)
	}
	rev, err := s.RevokeExecutor("a")
	if err != nil {
		t.Fatal(err)
	}
	if rev.Key != k1 || !slices.Equal(rev.IDs, []string{"a", "b"}) || rev.Seq != 1 || !rev.RevokedAt.Equal(clock.Now()) {
		t.Fatalf("revocation %+v", rev)
	}
	for _, id := range []string{"a", "b", "new"} {
		if err := s.BindExecutor(id, k1); !errors.Is(err, ErrKeyRevoked) {
			t.Fatalf("bind revoked key as %s = %v", id, err)
		}
	}
	if err := s.BindExecutor("a", k3); err != nil {
		t.Fatal(err)
	}
	st, err := s.CheckExecutor("a", k1)
	if err != nil || !st.KeyRevoked || !st.Bound || st.BoundKey != k3 || st.Seq != 1 {
		t.Fatalf("CheckExecutor(a, k1) = %+v %v", st, err)
	}
	if st, _ := s.CheckExecutor("zzz", k2); st.KeyRevoked || st.Bound {
		t.Fatalf("CheckExecutor(zzz, k2) = %+v", st)
	}
	if rev, err := open().RevokeExecutor("c"); err != nil || rev.Seq != 2 {
		t.Fatalf("second revocation %+v %v", rev, err)
	}
	revoked, seq, err := s.RevokedKeys([][32]byte{k1, k2, k3})
	if err != nil || seq != 2 || !revoked[k1] || !revoked[k2] || revoked[k3] {
		t.Fatalf("RevokedKeys = %v %d %v", revoked, seq, err)
	}
}

func testConcurrentSingleUse(t *testing.T, open func() *Store) {
	stores := []*Store{open(), open()}
	secret, _, err := stores[0].Create(TokenJoin, CreateOptions{Uses: 1})
	if err != nil {
		t.Fatal(err)
	}
	ok, usedUp, other := redeemConcurrently(stores, TokenJoin, secret, 20)
	if ok != 1 || usedUp != 19 || len(other) > 0 {
		t.Fatalf("successes=%d usedUp=%d other=%v", ok, usedUp, other)
	}
}

func testMigrateRefusesNonEmpty(t *testing.T, open func() *Store) {
	src, err := OpenStore(filepath.Join(t.TempDir(), "src.db"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := src.Create(TokenJoin, CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dst := open()
	_, _, err = dst.Create(TokenClient, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := MigrateStore(dst, src); !errors.Is(err, ErrStoreNotEmpty) || rep.Written != 0 {
		t.Fatalf("migrate into a non-empty store: %+v %v", rep, err)
	}
	if list, _ := dst.List(); len(list) != 1 {
		t.Fatalf("the refused migration wrote: %d tokens", len(list))
	}
}

// redeemConcurrently redeems secret n times at once, spread over stores.
func redeemConcurrently(stores []*Store, kind TokenKind, secret string, n int) (ok, usedUp int, other []error) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := stores[i%len(stores)].Redeem(kind, secret)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, ErrTokenUsedUp):
				usedUp++
			default:
				other = append(other, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	return ok, usedUp, other
}

// threeRelays are three stores on three clients, each talking to another
// member of a 3-member cluster: three relays of a cluster.
func threeRelays(t *testing.T, c *etcdtest.Cluster) []*Store {
	prefix := newPrefix()
	return []*Store{etcdStore(t, c, prefix, 0), etcdStore(t, c, prefix, 1), etcdStore(t, c, prefix, 2)}
}

func usedOf(t *testing.T, s *Store, id string) int {
	t.Helper()
	list, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range list {
		if tk.ID == id {
			return tk.Used
		}
	}
	t.Fatalf("token %s not listed", id)
	return 0
}

// TestEtcdRedemptionIsExactlyOnceAcrossRelays: 100 redemptions of one
// single-use token, at once, through three relays on three members: one
// wins. Then a 5-use token: five win. Then an unlimited one: all win, and
// every use is counted (conflicts are retried, not lost).
func TestEtcdRedemptionIsExactlyOnceAcrossRelays(t *testing.T) {
	c := etcdtest.Start(t, 3)
	relays := threeRelays(t, c)

	secret, tk, err := relays[0].Create(TokenJoin, CreateOptions{Uses: 1})
	if err != nil {
		t.Fatal(err)
	}
	ok, usedUp, other := redeemConcurrently(relays, TokenJoin, secret, 100)
	if ok != 1 || usedUp != 99 || len(other) > 0 {
		t.Fatalf("single use: successes=%d usedUp=%d other=%v", ok, usedUp, other)
	}
	if u := usedOf(t, relays[2], tk.ID); u != 1 {
		t.Fatalf("Used = %d", u)
	}

	secret, tk, err = relays[1].Create(TokenClient, CreateOptions{Uses: 5, Executors: "*"})
	if err != nil {
		t.Fatal(err)
	}
	ok, usedUp, other = redeemConcurrently(relays, TokenClient, secret, 50)
	if ok != 5 || usedUp != 45 || len(other) > 0 {
		t.Fatalf("5 uses: successes=%d usedUp=%d other=%v", ok, usedUp, other)
	}
	if u := usedOf(t, relays[0], tk.ID); u != 5 {
		t.Fatalf("Used = %d", u)
	}

	secret, tk, err = relays[2].Create(TokenClient, CreateOptions{Executors: "*"})
	if err != nil {
		t.Fatal(err)
	}
	ok, _, other = redeemConcurrently(relays, TokenClient, secret, 30)
	if ok != 30 || len(other) > 0 {
		t.Fatalf("unlimited: successes=%d other=%v", ok, other)
	}
	if u := usedOf(t, relays[1], tk.ID); u != 30 {
		t.Fatalf("Used = %d, want 30", u)
	}
}

// TestEtcdConcurrentBindsOfOneIDBindOneKey: 30 relays' worth of joins claim
// one id with 30 different keys at once; one key is bound, every other
// claim is refused.
func TestEtcdConcurrentBindsOfOneIDBindOneKey(t *testing.T) {
	c := etcdtest.Start(t, 3)
	relays := threeRelays(t, c)
	const n = 30
	results := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var k [32]byte
			k[0] = byte(i + 1)
			<-start
			results[i] = relays[i%3].BindExecutor("contested", k)
		}()
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, err := range results {
		switch {
		case err == nil:
			if winner >= 0 {
				t.Fatalf("keys %d and %d both bound", winner, i)
			}
			winner = i
		case !errors.Is(err, ErrExecutorKeyMismatch):
			t.Fatalf("bind %d: %v", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no key bound")
	}
	k, ok, err := relays[1].ExecutorKey("contested")
	if err != nil || !ok || k[0] != byte(winner+1) {
		t.Fatalf("bound key %v %v %v, want key %d", k[0], ok, err, winner+1)
	}
}

// TestEtcdRevokeExecutorRacesBind: a revocation of a key and a binding of
// the same key under another id, at once on two relays, end as if one ran
// before the other — never with the key revoked but still bound. Two
// revocations of one id at once: one revokes, the other finds nothing, and
// the sequence moves by one.
func TestEtcdRevokeExecutorRacesBind(t *testing.T) {
	c := etcdtest.Start(t, 3)
	relays := threeRelays(t, c)
	for round := range 20 {
		var k [32]byte
		k[0], k[1] = 0xee, byte(round)
		a, b := fmt.Sprintf("a%d", round), fmt.Sprintf("b%d", round)
		if err := relays[0].BindExecutor(a, k); err != nil {
			t.Fatal(err)
		}
		seqBefore, err := relays[0].RevocationSeq()
		if err != nil {
			t.Fatal(err)
		}
		var rev Revocation
		var revErr, revErr2, bindErr error
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Add(3)
		go func() { defer wg.Done(); <-start; rev, revErr = relays[1].RevokeExecutor(a) }()
		go func() { defer wg.Done(); <-start; _, revErr2 = relays[0].RevokeExecutor(a) }()
		go func() { defer wg.Done(); <-start; bindErr = relays[2].BindExecutor(b, k) }()
		close(start)
		wg.Wait()
		// Exactly one revocation happened.
		if (revErr == nil) == (revErr2 == nil) {
			t.Fatalf("round %d: revocations: %v, %v", round, revErr, revErr2)
		}
		for _, err := range []error{revErr, revErr2} {
			if err != nil && !errors.Is(err, ErrExecutorUnknown) {
				t.Fatalf("round %d: revoke: %v", round, err)
			}
		}
		seq, err := relays[2].RevocationSeq()
		if err != nil || seq != seqBefore+1 {
			t.Fatalf("round %d: seq %d → %d (%v)", round, seqBefore, seq, err)
		}
		if bindErr != nil && !errors.Is(bindErr, ErrKeyRevoked) {
			t.Fatalf("round %d: bind: %v", round, bindErr)
		}
		// Whatever the order, the key ends unbound everywhere.
		for _, id := range []string{a, b} {
			if _, ok, err := relays[0].ExecutorKey(id); err != nil || ok {
				t.Fatalf("round %d: %s still bound to the revoked key (bind %v, revocation %+v)", round, id, bindErr, rev)
			}
		}
	}
}

// TestEtcdDownFailsUnavailableWithinTheTimeout: with every member dead,
// each operation fails with ErrStoreUnavailable (kind unavailable) within
// the request timeout, and a dial within the dial timeout.
func TestEtcdDownFailsUnavailableWithinTheTimeout(t *testing.T) {
	c := etcdtest.Start(t, 3)
	prefix := newPrefix()
	s, err := NewEtcdStore(c.Client(t), prefix, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	secret, _, err := s.Create(TokenJoin, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		c.Kill(i)
	}
	ops := map[string]func() error{
		"Redeem":         func() error { _, err := s.Redeem(TokenJoin, secret); return err },
		"List":           func() error { _, err := s.List(); return err },
		"BindExecutor":   func() error { return s.BindExecutor("x", [32]byte{1}) },
		"CheckExecutor":  func() error { _, err := s.CheckExecutor("x", [32]byte{1}); return err },
		"RevokeExecutor": func() error { _, err := s.RevokeExecutor("x"); return err },
		"RevocationSeq":  func() error { _, err := s.RevocationSeq(); return err },
	}
	for name, op := range ops {
		start := time.Now()
		err := op()
		took := time.Since(start)
		if !errors.Is(err, ErrStoreUnavailable) || refusalKind(err) != protocol.KindUnavailable {
			t.Errorf("%s with etcd down: %v (kind %s)", name, err, refusalKind(err))
		}
		if took > 3*time.Second {
			t.Errorf("%s took %v with a 1 s timeout", name, took)
		}
	}
	start := time.Now()
	o, err := ParseEtcdURL(c.URL(prefix))
	if err != nil {
		t.Fatal(err)
	}
	o.DialTimeout = time.Second
	if cli, err := DialEtcd(context.Background(), o); !errors.Is(err, ErrStoreUnavailable) {
		if cli != nil {
			cli.Close()
		}
		t.Fatalf("dial with etcd down: %v", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("dial took %v with a 1 s timeout", took)
	}
}

// TestEtcdLeaderKilledMidwayRedemptionsGoOn: relays redeem single-use
// tokens while the leader is killed; after the election they redeem
// again, and no token is ever used more than once.
func TestEtcdLeaderKilledMidwayRedemptionsGoOn(t *testing.T) {
	c := etcdtest.Start(t, 3)
	prefix := newPrefix()
	// Clients of every member, as a relay would be configured: the client
	// fails over when its member dies.
	relays := []*Store{etcdStore(t, c, prefix), etcdStore(t, c, prefix), etcdStore(t, c, prefix)}
	const n = 120
	secrets := make([]string, n)
	ids := make([]string, n)
	for i := range secrets {
		var tk Token
		var err error
		secrets[i], tk, err = relays[0].Create(TokenJoin, CreateOptions{Uses: 1})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = tk.ID
	}
	var granted atomic.Int32
	redeem := func(i int) error {
		_, err := relays[i%3].Redeem(TokenJoin, secrets[i])
		if err == nil {
			granted.Add(1)
		}
		return err
	}
	// First third before the kill, the second third around it (errors
	// allowed: the election), the last third after it: all must pass.
	for i := range n / 3 {
		if err := redeem(i); err != nil {
			t.Fatalf("before: %v", err)
		}
	}
	leader := c.Leader(t)
	var wg sync.WaitGroup
	for i := n / 3; i < 2*n/3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := redeem(i); err != nil && !errors.Is(err, ErrStoreUnavailable) {
				t.Errorf("during: %v", err)
			}
		}()
	}
	c.Kill(leader)
	wg.Wait()
	if now := c.Leader(t); now == leader {
		t.Fatal("the dead member leads")
	}
	deadline := time.Now().Add(10 * time.Second)
	for i := 2 * n / 3; i < n; i++ {
		for {
			err := redeem(i)
			if err == nil {
				break
			}
			// The first requests after the election may still be cut off;
			// a bounded retry rides that out.
			if !errors.Is(err, ErrStoreUnavailable) || time.Now().After(deadline) {
				t.Fatalf("after the election: token %d: %v", i, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	list, err := relays[1].List()
	if err != nil {
		t.Fatal(err)
	}
	used := 0
	for _, tk := range list {
		if tk.Used > 1 {
			t.Fatalf("token %s used %d times", tk.ID, tk.Used)
		}
		used += tk.Used
	}
	// A commit whose answer died with the leader counts as used without
	// having been granted: granted ≤ used, never more.
	if g := int(granted.Load()); g > used || g < n/3+n/3 {
		t.Fatalf("granted %d, used %d", g, used)
	}
	t.Logf("granted %d of %d redemptions; %d uses recorded", granted.Load(), n, used)
}

func TestStoreCloseLeavesTheSharedClientOpen(t *testing.T) {
	c := etcdtest.Start(t, 1)
	cli := c.Client(t)
	s, err := NewEtcdStore(cli, "/shared", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cli.Get(ctx, "x"); err != nil {
		t.Fatalf("the client was closed with the store: %v", err)
	}
}

func TestOpenExistingEtcdStoreNeedsAStore(t *testing.T) {
	c := etcdtest.Start(t, 1)
	cli := c.Client(t)
	if _, err := OpenExistingEtcdStore(cli, "/typo", time.Second); !errors.Is(err, ErrNoStore) {
		t.Fatalf("empty prefix: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if resp, err := cli.Get(ctx, "/typo", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count != 0 {
		t.Fatalf("OpenExistingEtcdStore wrote: %v %v", resp, err)
	}
	if _, err := NewEtcdStore(cli, "/real/", time.Second); err != nil {
		t.Fatal(err)
	}
	s, err := OpenExistingEtcdStore(cli, "/real", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if list, err := s.List(); err != nil || len(list) != 0 {
		t.Fatalf("new store: %v %v", list, err)
	}
}

// TestMigrateStoreCopiesEverythingInBatches moves a bbolt store larger than
// one batch into etcd: the old secrets redeem there, with their counters,
// bindings and revocations.
func TestMigrateStoreCopiesEverythingInBatches(t *testing.T) {
	c := etcdtest.Start(t, 1)
	src, err := OpenStore(filepath.Join(t.TempDir(), "relay.db"))
	if err != nil {
		t.Fatal(err)
	}
	const n = 70 // 140 token records: two batches
	var secrets []string
	for range n {
		sec, _, err := src.Create(TokenJoin, CreateOptions{Uses: 2})
		if err != nil {
			t.Fatal(err)
		}
		secrets = append(secrets, sec)
	}
	if _, err := src.Redeem(TokenJoin, secrets[0]); err != nil {
		t.Fatal(err)
	}
	var k1, k2 [32]byte
	k1[0], k2[0] = 1, 2
	for id, k := range map[string][32]byte{"a": k1, "b": k2} {
		if err := src.BindExecutor(id, k); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := src.RevokeExecutor("a"); err != nil {
		t.Fatal(err)
	}
	dst := etcdStore(t, c, newPrefix())
	rep, err := MigrateStore(dst, src)
	if err != nil {
		t.Fatal(err)
	}
	want := MigrateReport{Tokens: n, TokenIDs: n, Executors: 1, RevokedKeys: 1, Seq: 1, Records: 2*n + 3, Written: 2*n + 3, Txns: 2}
	if rep != want {
		t.Fatalf("report %+v, want %+v", rep, want)
	}
	if tk, err := dst.Redeem(TokenJoin, secrets[0]); err != nil || tk.Used != 2 {
		t.Fatalf("migrated token: %+v %v", tk, err)
	}
	if _, err := dst.Redeem(TokenJoin, secrets[0]); !errors.Is(err, ErrTokenUsedUp) {
		t.Fatalf("migrated counter: %v", err)
	}
	if _, err := dst.Redeem(TokenJoin, secrets[n-1]); err != nil {
		t.Fatal(err)
	}
	if err := dst.BindExecutor("b", k1); !errors.Is(err, ErrKeyRevoked) {
		t.Fatalf("migrated revocation: %v", err)
	}
	if err := dst.BindExecutor("b", k2); err != nil {
		t.Fatalf("migrated binding: %v", err)
	}
	if seq, err := dst.RevocationSeq(); err != nil || seq != 1 {
		t.Fatalf("seq %d %v", seq, err)
	}
	// Again: refused, as the destination holds data now.
	if _, err := MigrateStore(dst, src); !errors.Is(err, ErrStoreNotEmpty) {
		t.Fatalf("second migration: %v", err)
	}
}

func TestParseEtcdURL(t *testing.T) {
	good := []struct {
		in   string
		want EtcdOptions
	}{
		{"etcd://h1:2379,h2:2380/outpost", EtcdOptions{Endpoints: []string{"h1:2379", "h2:2380"}, Prefix: "/outpost"}},
		{"etcd://h1", EtcdOptions{Endpoints: []string{"h1:2379"}, Prefix: DefaultEtcdPrefix}},
		{"etcd://h1:1/", EtcdOptions{Endpoints: []string{"h1:1"}, Prefix: DefaultEtcdPrefix}},
		{"etcds://[::1]:2379/a/b/", EtcdOptions{Endpoints: []string{"[::1]:2379"}, Prefix: "/a/b", TLS: true}},
		{"etcd://[::1]/x", EtcdOptions{Endpoints: []string{"[::1]:2379"}, Prefix: "/x"}},
	}
	for _, g := range good {
		got, err := ParseEtcdURL(g.in)
		if err != nil || !slices.Equal(got.Endpoints, g.want.Endpoints) || got.Prefix != g.want.Prefix || got.TLS != g.want.TLS {
			t.Errorf("ParseEtcdURL(%q) = %+v %v, want %+v", g.in, got, err, g.want)
		}
	}
	for _, bad := range []string{"", "http://h:1", "etcd://", "etcd:///p", "etcd://h:x/p", "etcd://h:0", "etcd://u:secret@h:1/p", "etcd://h:1/p?x=1", "etcd://h:1/a b"} {
		_, err := ParseEtcdURL(bad)
		if err == nil {
			t.Errorf("ParseEtcdURL(%q) accepted", bad)
		} else if strings.Contains(err.Error(), "secret") {
			t.Errorf("ParseEtcdURL echoes the password: %v", err)
		}
	}
	base := EtcdOptions{Endpoints: []string{"h:1"}, Prefix: "/p"}
	for name, o := range map[string]EtcdOptions{
		"cert without key":   {Endpoints: base.Endpoints, Prefix: "/p", TLS: true, Cert: "c"},
		"TLS files, no TLS":  {Endpoints: base.Endpoints, Prefix: "/p", CACert: "ca"},
		"user, no password":  {Endpoints: base.Endpoints, Prefix: "/p", Username: "u"},
		"password, no user":  {Endpoints: base.Endpoints, Prefix: "/p", Password: "pw"},
		"negative timeout":   {Endpoints: base.Endpoints, Prefix: "/p", RequestTimeout: -1},
		"prefix without /":   {Endpoints: base.Endpoints, Prefix: "p"},
		"prefix of only /":   {Endpoints: base.Endpoints, Prefix: "/"},
		"no endpoint at all": {Prefix: "/p"},
	} {
		if err := o.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := base.Validate(); err != nil {
		t.Fatal(err)
	}
	o := base
	o.Username, o.Password = "alice", "hunter2"
	if s := fmt.Sprint(o); strings.Contains(s, "hunter2") || !strings.Contains(s, "alice") {
		t.Fatalf("options print as %q", s)
	}
}

// TestDialEtcdFailsFastOnADeadEndpoint: nothing listens there, so DialEtcd
// fails unavailable within its timeout although clientv3.New itself does
// not connect.
func TestDialEtcdFailsFastOnADeadEndpoint(t *testing.T) {
	o, err := ParseEtcdURL("etcd://127.0.0.1:1/p")
	if err != nil {
		t.Fatal(err)
	}
	o.DialTimeout = 500 * time.Millisecond
	start := time.Now()
	cli, err := DialEtcd(context.Background(), o)
	if !errors.Is(err, ErrStoreUnavailable) {
		if cli != nil {
			cli.Close()
		}
		t.Fatalf("dial: %v", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("dial took %v", took)
	}
}

func TestDialEtcdAndAStoreOnIt(t *testing.T) {
	c := etcdtest.Start(t, 1)
	o, err := ParseEtcdURL(c.URL("/dialled"))
	if err != nil {
		t.Fatal(err)
	}
	cli, err := DialEtcd(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	s, err := NewEtcdStore(cli, o.Prefix, o.RequestTimeout)
	if err != nil {
		t.Fatal(err)
	}
	secret, _, err := s.Create(TokenJoin, CreateOptions{Uses: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Redeem(TokenJoin, secret); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// The layout is <prefix>/<bucket>/<key>.
	resp, err := cli.Get(ctx, "/dialled/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		b, _, _ := strings.Cut(strings.TrimPrefix(string(kv.Key), "/dialled/"), "/")
		keys = append(keys, b)
	}
	if !slices.Equal(keys, []string{"meta", "token_ids", "tokens"}) {
		t.Fatalf("buckets in etcd: %v", keys)
	}
}
