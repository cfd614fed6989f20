package executor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/outpost-exec/outpost/client"
	"github.com/outpost-exec/outpost/identity"
	"github.com/outpost-exec/outpost/internal/etcdtest"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/relay"
	"github.com/outpost-exec/outpost/transport"
)

func members(ids ...string) []protocol.RelayMember {
	out := make([]protocol.RelayMember, len(ids))
	for i, id := range ids {
		out[i] = protocol.RelayMember{ID: id, Addr: fmt.Sprintf("127.0.0.1:%d", 7000+i)}
	}
	return out
}

// everyChoice runs pickMember once for every choice its random source
// can make among n candidates, so a test covers every outcome instead of
// the ones a seed happens to give.
func everyChoice(t *testing.T, ms []protocol.RelayMember, taken map[string]bool, left string, failed map[string]bool, check func(protocol.RelayMember, bool)) {
	t.Helper()
	for choice := range len(ms) + 1 {
		m, ok := pickMember(ms, taken, left, failed, func(n int) int {
			if n <= 0 {
				t.Fatalf("rnd(%d)", n)
			}
			return choice % n
		})
		check(m, ok)
	}
}

// K slots picking one after the other, each seeing the others' members
// as taken, hold K distinct members; the one more finds none free.
func TestPickMemberGivesSlotsDistinctMembers(t *testing.T) {
	ms := members("r1", "r2", "r3", "r4")
	for seed := range 16 {
		taken := map[string]bool{}
		for slot := range len(ms) {
			m, ok := pickMember(ms, taken, "", nil, func(n int) int { return (seed + slot) % n })
			if !ok {
				t.Fatalf("seed %d slot %d: no member free among %d with %d taken", seed, slot, len(ms), len(taken))
			}
			if taken[m.ID] {
				t.Fatalf("seed %d slot %d: picked %s, held by another slot", seed, slot, m.ID)
			}
			taken[m.ID] = true
		}
		if m, ok := pickMember(ms, taken, "", nil, func(int) int { return 0 }); ok {
			t.Fatalf("seed %d: a slot beyond the members picked %s", seed, m.ID)
		}
	}
}

// A slot leaving a relay (closed, drained) moves to another free one
// whenever there is one, even one whose last attempt failed; when the
// relay it left is the only free one, it goes back to it.
func TestPickMemberAvoidsTheRelayJustLeft(t *testing.T) {
	ms := members("r1", "r2", "r3")
	everyChoice(t, ms, map[string]bool{"r2": true}, "r1", nil, func(m protocol.RelayMember, ok bool) {
		if !ok || m.ID != "r3" {
			t.Fatalf("left r1, r2 taken: picked %q (%v), want r3", m.ID, ok)
		}
	})
	everyChoice(t, ms, map[string]bool{"r2": true}, "r1", map[string]bool{"r3": true}, func(m protocol.RelayMember, ok bool) {
		if !ok || m.ID != "r3" {
			t.Fatalf("left r1, r2 taken, r3 failed: picked %q (%v), want r3 (not the relay just left)", m.ID, ok)
		}
	})
	everyChoice(t, ms, map[string]bool{"r2": true, "r3": true}, "r1", nil, func(m protocol.RelayMember, ok bool) {
		if !ok || m.ID != "r1" {
			t.Fatalf("left r1, the only free one: picked %q (%v), want r1", m.ID, ok)
		}
	})
	// Among several others, a failed one comes last.
	everyChoice(t, members("r1", "r2", "r3", "r4"), nil, "r1", map[string]bool{"r2": true, "r3": true}, func(m protocol.RelayMember, ok bool) {
		if !ok || m.ID != "r4" {
			t.Fatalf("left r1, r2 and r3 failed: picked %q (%v), want r4", m.ID, ok)
		}
	})
	// And every free one but the one left gets picked by some choice:
	// executors spread over the cluster.
	seen := map[string]bool{}
	everyChoice(t, members("r1", "r2", "r3", "r4"), nil, "r1", nil, func(m protocol.RelayMember, ok bool) { seen[m.ID] = ok })
	if len(seen) != 3 || seen["r1"] {
		t.Fatalf("picks after leaving r1: %v, want r2, r3 and r4", seen)
	}
}

// Fewer members than slots: the slots beyond them find nothing free.
func TestPickMemberFewerMembersThanSlots(t *testing.T) {
	ms := members("r1", "r2")
	taken := map[string]bool{}
	picked := 0
	for range 5 {
		if m, ok := pickMember(ms, taken, "", nil, func(int) int { return 0 }); ok {
			taken[m.ID] = true
			picked++
		}
	}
	if picked != len(ms) {
		t.Fatalf("%d of 5 slots got a member of 2", picked)
	}
	if _, ok := pickMember(nil, nil, "", nil, func(int) int { return 0 }); ok {
		t.Fatal("picked a member of none")
	}
}

// Members that leave the list are never picked again, even if a slot
// still holds one (taken) or just left one (left); the taken set may
// name members no longer listed.
func TestPickMemberMembersDisappearing(t *testing.T) {
	before := members("r1", "r2", "r3")
	after := []protocol.RelayMember{before[1]} // r1 and r3 gone
	everyChoice(t, after, map[string]bool{"r3": true}, "r1", map[string]bool{"r1": true}, func(m protocol.RelayMember, ok bool) {
		if !ok || m.ID != "r2" {
			t.Fatalf("picked %q (%v), want r2, the one member left", m.ID, ok)
		}
	})
	everyChoice(t, after, map[string]bool{"r2": true}, "r1", nil, func(m protocol.RelayMember, ok bool) {
		if ok {
			t.Fatalf("picked %q, though the only member left is held", m.ID)
		}
	})
}

// The members of a join answer are bounded, deduplicated (by id and by
// address: one relay under two ids would let two slots target it) and
// dialable.
func TestValidMembers(t *testing.T) {
	key, err := identity.Generate()
	if err != nil {
		t.Fatal(err)
	}
	fp := key.PublicKey().Fingerprint()
	in := []protocol.RelayMember{
		{ID: "r1", Addr: "10.0.0.1:7443"},
		{ID: "r1", Addr: "10.0.0.9:7443"}, // the same id again
		{ID: "r2", Addr: "10.0.0.1:7443"}, // the same address again
		{ID: "", Addr: "10.0.0.3:7443"},
		{ID: "r4", Addr: "no port"},
		{ID: strings.Repeat("x", maxRelayIDLen+1), Addr: "10.0.0.5:7443"},
		{ID: "r6", Addr: "[::1]:7443"},
	}
	got := validMembers(in, fp)
	if len(got) != 2 || got[0].ID != "r1" || got[1].ID != "r6" {
		t.Fatalf("valid members %v, want r1 and r6", got)
	}
	u, err := transport.ParseURL(memberURL(got[1].Addr, fp), transport.SchemeRelay)
	if err != nil || u.Addr != "[::1]:7443" || u.Key != key.PublicKey() {
		t.Fatalf("member URL: %+v, %v", u, err)
	}
	var many []protocol.RelayMember
	for i := range 3 * protocol.MaxRelayMembers {
		many = append(many, protocol.RelayMember{ID: fmt.Sprint("r", i), Addr: fmt.Sprintf("10.0.%d.%d:7443", i/200, i%200)})
	}
	if got := validMembers(many, fp); len(got) != protocol.MaxRelayMembers {
		t.Fatalf("%d members kept of %d, want at most %d", len(got), len(many), protocol.MaxRelayMembers)
	}
}

// testRoster is a roster whose slots are driven by the test (pick,
// release), not started.
func testRoster(t *testing.T, k int, ms []protocol.RelayMember) *roster {
	t.Helper()
	key, err := identity.Generate()
	if err != nil {
		t.Fatal(err)
	}
	url := "outpost://relay.example:7443#" + key.PublicKey().Fingerprint()
	u, err := transport.ParseURL(url, transport.SchemeRelay)
	if err != nil {
		t.Fatal(err)
	}
	r := newRoster(&Server{log: zaptest.NewLogger(t)}, nil, JoinConfig{RelayURL: url, ID: "x", RelayConnections: k}, u)
	r.rnd = func(int) int { return 0 }
	r.clustered = ms != nil
	r.members = ms
	for i := range k {
		r.slots[i].active = true
		r.running++
	}
	return r
}

// The roster's picks: the configured URL until members are known, then
// members only, distinct across slots; a surplus slot ends; the
// configured URL again only when nothing is joined or in flight and
// every member failed.
func TestRosterPicks(t *testing.T) {
	r := testRoster(t, 2, nil)
	if tg, ok := r.pick(0, "", false); !ok || !tg.configured || tg.url != r.cfg.RelayURL {
		t.Fatalf("no members known: slot 0 picked %+v (%v), want the configured URL", tg, ok)
	}
	r.release(0, false)
	if r.cfg.RelayConnections = 0; r.want() != 1 {
		t.Fatalf("automatic count before a cluster is known: %d, want 1", r.want())
	}

	r = testRoster(t, 3, members("r1", "r2"))
	a, ok0 := r.pick(0, "", false)
	b, ok1 := r.pick(1, "", false)
	if !ok0 || !ok1 || a.configured || b.configured || a.id == b.id {
		t.Fatalf("slots 0 and 1 picked %+v and %+v", a, b)
	}
	if !strings.HasPrefix(a.url, "outpost://"+a.addr+"#") || !strings.HasSuffix(a.url, r.fp) {
		t.Fatalf("member URL %q for %s", a.url, a.addr)
	}
	if tg, ok := r.pick(2, "", false); ok {
		t.Fatalf("slot 2 of 2 members picked %+v", tg)
	}
	r.stop(2) // as the surplus slot's goroutine does
	if r.running != 2 || r.slots[2].active {
		t.Fatalf("the surplus slot did not end: running %d", r.running)
	}

	// Both attempts fail: slot 0 (the only one in flight) falls back to
	// the configured URL once, then tries members again.
	r.release(0, false)
	r.release(1, false)
	r.stop(1)
	tg, ok := r.pick(0, a.id, false)
	if !ok || !tg.configured {
		t.Fatalf("every member failed, nothing joined: picked %+v (%v), want the configured URL", tg, ok)
	}
	r.release(0, false)
	if tg, ok := r.pick(0, "", true); !ok || tg.configured {
		t.Fatalf("after the configured URL: picked %+v (%v), want a member", tg, ok)
	}
	r.release(0, true) // joined: the member no longer counts as failed
	if tg, ok := r.pick(0, "", false); !ok || tg.configured {
		t.Fatalf("a member joined: picked %+v (%v), want a member", tg, ok)
	}
}

// The automatic count is 2 once a cluster is known, never above the
// members; an explicit count is kept, bounded by the members.
func TestRosterWant(t *testing.T) {
	for _, c := range []struct {
		k, members, want int
	}{{0, 3, DefaultClusterRelayConnections}, {0, 1, 1}, {1, 3, 1}, {3, 5, 3}, {8, 3, 3}, {MaxRelayConnections, 64, MaxRelayConnections}} {
		ids := make([]string, c.members)
		for i := range ids {
			ids[i] = fmt.Sprint("r", i)
		}
		r := testRoster(t, 0, members(ids...))
		r.cfg.RelayConnections = c.k
		if got := r.want(); got != c.want {
			t.Errorf("K=%d with %d members: %d slots, want %d", c.k, c.members, got, c.want)
		}
	}
}

func TestJoinConfigRelayConnectionsBounds(t *testing.T) {
	key, err := identity.Generate()
	if err != nil {
		t.Fatal(err)
	}
	for k, ok := range map[int]bool{-1: false, 0: true, 1: true, MaxRelayConnections: true, MaxRelayConnections + 1: false} {
		cfg := DefaultJoinConfig()
		cfg.RelayURL, cfg.Key, cfg.ID, cfg.RelayConnections = "outpost://relay:7443#"+key.PublicKey().Fingerprint(), key.Keypair(), "x", k
		if err := cfg.Validate(); (err == nil) != ok {
			t.Errorf("RelayConnections %d: %v", k, err)
		}
	}
}

// Integration: real relays in cluster mode on a real etcd.

// clusterRelay is one relay of a test cluster.
type clusterRelay struct {
	id   string
	srv  *relay.Server
	ln   *relay.Listener
	addr string
	url  string
}

// relayCluster is n relays of one cluster sharing a key, a token store
// (a bbolt file, shared in one process) and one etcd.
type relayCluster struct {
	relays      []*clusterRelay
	tokens      *relay.Store
	clientToken string
	joinToken   string
}

// freeLoopback picks a loopback address: a relay of a cluster advertises
// its address before it listens.
func freeLoopback(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func startRelayCluster(t *testing.T, n int) *relayCluster {
	t.Helper()
	etcd := etcdtest.Start(t, 1) // skips without an etcd binary
	tokens, err := relay.OpenStore(filepath.Join(t.TempDir(), "relay.db"))
	if err != nil {
		t.Fatal(err)
	}
	k, err := identity.Generate()
	if err != nil {
		t.Fatal(err)
	}
	c := &relayCluster{tokens: tokens}
	for i := range n {
		id, addr := fmt.Sprintf("r%d", i+1), freeLoopback(t)
		srv, err := relay.NewServer(relay.Config{Key: k.Keypair(), Tokens: tokens, Logger: zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)).Named(id),
			Cluster: &relay.ClusterConfig{Client: etcd.Client(t), Prefix: "/multijoin", RelayID: id, Advertise: addr, LeaseTTL: 2 * time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		ln, err := srv.Listen(addr)
		if err != nil {
			t.Fatal(err)
		}
		r := &clusterRelay{id: id, srv: srv, ln: ln, addr: addr, url: "outpost://" + addr + "#" + k.PublicKey().Fingerprint()}
		t.Cleanup(func() { r.close() })
		c.relays = append(c.relays, r)
	}
	waitFor(t, fmt.Sprintf("every relay to see %d members", n), func() bool {
		for _, r := range c.relays {
			if r.srv.Stats().ClusterMembers != n {
				return false
			}
		}
		return true
	})
	if c.joinToken, _, err = tokens.Create(relay.TokenJoin, relay.CreateOptions{Uses: 1}); err != nil { // one use: the other slots join by the bound key
		t.Fatal(err)
	}
	if c.clientToken, _, err = tokens.Create(relay.TokenClient, relay.CreateOptions{Executors: "*"}); err != nil {
		t.Fatal(err)
	}
	return c
}

// close stops the relay as a crash would for its connections (every
// session ends) and leaves the cluster at once.
func (r *clusterRelay) close() {
	r.ln.Close()
	r.srv.Close()
}

func (r *clusterRelay) has(id string) bool { return slices.Contains(r.srv.Executors(), id) }

// clusterExecutor is an executor joining a cluster.
type clusterExecutor struct {
	id  string
	key identity.Key
}

// startExecutor joins an executor as id through relayURL with k
// sessions (0: automatic); it ends with the test.
func (c *relayCluster) startExecutor(t *testing.T, id, relayURL string, k int) *clusterExecutor {
	t.Helper()
	key, err := identity.Generate()
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Logger = zaptest.NewLogger(t).Named(id)
	cfg.DefaultCwd = t.TempDir()
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- srv.Join(ctx, JoinConfig{RelayURL: relayURL, Key: key.Keypair(), ID: id, Token: c.joinToken, RelayConnections: k})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("join ended with %v", err)
			}
		case <-time.After(testTimeout):
			t.Error("join did not end")
		}
		sctx, scancel := context.WithTimeout(context.Background(), testTimeout)
		defer scancel()
		srv.Shutdown(sctx)
	})
	return &clusterExecutor{id: id, key: key}
}

// holders are the relays id is joined to now.
func (c *relayCluster) holders(id string) []*clusterRelay {
	var out []*clusterRelay
	for _, r := range c.relays {
		if r.has(id) {
			out = append(out, r)
		}
	}
	return out
}

// waitHolders waits until id is joined to exactly the relays want
// names (any k of them when want is nil and k > 0), within d; at no
// moment may it be joined to more than max relays.
func (c *relayCluster) waitHolders(t *testing.T, id string, k, maxHeld int, d time.Duration, want ...*clusterRelay) []*clusterRelay {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		got := c.holders(id)
		if len(got) > maxHeld {
			t.Fatalf("%s is joined to %d relays (%s), more than its %d sessions", id, len(got), relayIDs(got), maxHeld)
		}
		if len(got) == k && (want == nil || relayIDs(got) == relayIDs(want)) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is joined to %s after %v, want %d relays %s", id, relayIDs(got), d, k, relayIDs(want))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func relayIDs(rs []*clusterRelay) string {
	ids := make([]string, len(rs))
	for i, r := range rs {
		ids[i] = r.id
	}
	slices.Sort(ids)
	return strings.Join(ids, ",")
}

// run runs echo on e through r, at once: no retry.
func (c *relayCluster) run(t *testing.T, r *clusterRelay, e *clusterExecutor) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	clientKey, err := identity.Generate()
	if err != nil {
		t.Fatal(err)
	}
	env, err := client.Dial(ctx, r.url, client.Config{Executor: e.id, Token: c.clientToken, Key: clientKey,
		KnownExecutors: filepath.Join(t.TempDir(), "known_executors"), Pin: e.key.PublicKey().Fingerprint()})
	if err != nil {
		t.Fatalf("through %s: %v (kind %q)", r.id, err, protocol.KindOf(err))
	}
	defer env.Close()
	out, err := client.CommandContext(ctx, env, "/bin/echo", "via", r.id).Output()
	if err != nil || string(out) != "via "+r.id+"\n" {
		t.Fatalf("through %s: %q, %v", r.id, out, err)
	}
}

// others are the relays of c not in rs.
func (c *relayCluster) others(rs ...*clusterRelay) []*clusterRelay {
	var out []*clusterRelay
	for _, r := range c.relays {
		if !slices.Contains(rs, r) {
			out = append(out, r)
		}
	}
	return out
}

// An executor with two relay connections joins two distinct relays of a
// three-relay cluster, through the configured URL first and a member
// next; when one of them dies it stays reachable through both relays
// left at once — the one it is joined to, and the third, which forwards
// — and its slot joins the third within a few seconds.
func TestMultiJoinClusterDistinctRelaysAndAClosedOne(t *testing.T) {
	c := startRelayCluster(t, 3)
	e := c.startExecutor(t, "x", c.relays[0].url, 2)
	held := c.waitHolders(t, "x", 2, 2, testTimeout)
	free := c.others(held...)[0]
	for _, r := range c.relays {
		c.run(t, r, e)
	}
	if free.srv.Stats().Forwarded == 0 {
		t.Fatalf("%s, where x is not joined, forwarded nothing", free.id)
	}

	gone, kept := held[0], held[1]
	gone.close()
	for _, r := range c.others(gone) {
		c.run(t, r, e) // no wait: the session on kept still serves
	}
	start := time.Now()
	c.waitHolders(t, "x", 2, 2, 10*time.Second, kept, free)
	t.Logf("the slot rejoined %s %v after %s closed", free.id, time.Since(start), gone.id)
	for _, r := range c.others(gone) {
		c.run(t, r, e)
	}
}

// A relay that drains (relay/reconnect) sends its slot to the member no
// other slot holds; the other slot stays where it is. The count is
// automatic: two, once the answer names a cluster.
func TestMultiJoinClusterDrainedRelayMovesTheSlot(t *testing.T) {
	c := startRelayCluster(t, 3)
	e := c.startExecutor(t, "x", c.relays[1].url, 0)
	held := c.waitHolders(t, "x", 2, 2, testTimeout)
	drained, kept, free := held[0], held[1], c.others(held...)[0]
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	drainDone := make(chan error, 1)
	go func() { drainDone <- drained.srv.Drain(ctx) }()
	// The old session on the drained relay may stay until the relay
	// closes it, so it is not counted: the slot is on free.
	waitFor(t, "the drained relay's slot to join the free member", func() bool { return free.has("x") && kept.has("x") })
	c.run(t, free, e)
	c.run(t, kept, e)
	drained.close()
	c.waitHolders(t, "x", 2, 2, 10*time.Second, kept, free)
	if err := <-drainDone; err != nil && !errors.Is(err, context.Canceled) {
		t.Logf("drain: %v", err)
	}
}
