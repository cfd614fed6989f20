package relay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap/zaptest"

	"github.com/outpost-exec/outpost/client"
	"github.com/outpost-exec/outpost/executor"
	"github.com/outpost-exec/outpost/identity"
	"github.com/outpost-exec/outpost/internal/etcdtest"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/relay/relayclient"
)

// testCluster is n relays of one cluster on a real etcd, sharing a key
// and a token store.
type testCluster struct {
	etcd   *etcdtest.Cluster
	relays []*testRelay
	prefix string
}

// freeAddr picks a loopback address to listen on (a relay advertises its
// address before it listens).
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// joinOne joins an executor to relayURL with one relay connection, so it
// is joined to that relay alone.
func joinOne(t *testing.T, relayURL, id, token string, k identity.Key, dataConns int) *testExecutor {
	t.Helper()
	e := startJoined(t, k, executor.JoinConfig{RelayURL: relayURL, ID: id, Token: token, DataConns: dataConns, RelayConnections: 1})
	e.waitJoined(t)
	return e
}

func startCluster(t *testing.T, n int) *testCluster {
	return startClusterWith(t, n, clusterOpts{tune: func(_ int, c *Config) { c.Cluster.LeaseTTL = 2 * time.Second }})
}

// clusterOpts tunes startClusterWith.
type clusterOpts struct {
	etcdMembers int                    // etcd members (1 by default, or 3)
	etcdTokens  bool                   // each relay a token store on the cluster's etcd (as in production), not one shared bbolt file
	clientOf    func(i int) []int      // the etcd members relay i's client talks to (all by default)
	tune        func(i int, c *Config) // relay i's configuration (the lease is DefaultLeaseTTL: 2 s detaches a relay on a loaded machine's etcd stall)
}

// startClusterWith starts n relays of one cluster on a real etcd, sharing
// a key (and, unless o says otherwise, one bbolt token store), as o says.
func startClusterWith(t *testing.T, n int, o clusterOpts) *testCluster {
	t.Helper()
	etcd := etcdtest.Start(t, cmp.Or(o.etcdMembers, 1))
	tc := &testCluster{etcd: etcd, prefix: "/outpost-test"}
	var shared *Store
	if !o.etcdTokens {
		s, err := OpenStore(filepath.Join(t.TempDir(), "relay.db"))
		if err != nil {
			t.Fatal(err)
		}
		shared = s
	}
	k := key(t)
	for i := range n {
		tc.relays = append(tc.relays, tc.startRelay(t, fmt.Sprintf("r%d", i+1), k, shared, o, i))
	}
	tc.waitMembers(t, n)
	return tc
}

// startRelay starts relay id of tc (index i for o's functions); a nil
// tokens is a store on the cluster's etcd.
func (tc *testCluster) startRelay(t *testing.T, id string, k identity.Key, tokens *Store, o clusterOpts, i int) *testRelay {
	t.Helper()
	var eps []int
	if o.clientOf != nil {
		eps = o.clientOf(i)
	}
	cli := tc.etcd.Client(t, eps...)
	if tokens == nil {
		s, err := NewEtcdStore(cli, tc.prefix, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		tokens = s
	}
	addr := freeAddr(t)
	cfg := Config{Key: k.Keypair(), Tokens: tokens, Logger: zaptest.NewLogger(t).Named(id),
		Cluster: &ClusterConfig{Client: cli, Prefix: tc.prefix, RelayID: id, Advertise: addr, LeaseTTL: DefaultLeaseTTL}}
	if o.tune != nil {
		o.tune(i, &cfg)
	}
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := srv.Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	r := &testRelay{srv: srv, ln: ln, key: k, tokens: tokens, addr: ln.Addr().String()}
	t.Cleanup(func() { ln.Close(); srv.Close() })
	return r
}

// waitMembers waits until every relay sees n members.
func (tc *testCluster) waitMembers(t *testing.T, n int) {
	t.Helper()
	waitFor(t, testTimeout, fmt.Sprintf("%d members", n), func() bool {
		for _, r := range tc.relays {
			if r.srv.Stats().ClusterMembers != n {
				return false
			}
		}
		return true
	})
}

func TestClientReachesAnExecutorJoinedToAnotherRelayThroughOneHop(t *testing.T) {
	tc := startCluster(t, 3)
	r1, r2, r3 := tc.relays[0], tc.relays[1], tc.relays[2]
	e := joinOne(t, r1.url(), "build-1", r1.token(t, TokenJoin, CreateOptions{Uses: 1}), key(t), 2)
	tok := r1.token(t, TokenClient, CreateOptions{Executors: "*"})
	waitFor(t, testTimeout, "presence at r2", func() bool { return r2.srv.Stats().ClusterExecutors == 1 })

	// The mux path (no pinned key) and the raw path (pinned) through r2.
	for _, cfg := range []client.Config{{}, pinned(e)} {
		env, err := dialVia(t, r2, "build-1", tok, cfg)
		if err != nil {
			t.Fatal(err)
		}
		out, err := client.Command(env, "/bin/sh", "-c", "echo forwarded; head -c 300000 /dev/zero | tr '\\0' x").Output()
		if err != nil || !strings.HasPrefix(string(out), "forwarded\n") || len(out) != len("forwarded\n")+300000 {
			t.Fatalf("%d bytes %q… %v", len(out), out[:min(len(out), 20)], err)
		}
		env.Close()
	}
	if st := r2.srv.Stats(); st.Forwarded != 2 {
		t.Fatalf("r2 stats %+v", st)
	}
	// Both forwarded to r1; a health link to each peer.
	waitFor(t, testTimeout, "links to both peers", func() bool { return r2.srv.Stats().PeerLinks == 2 })
	if ps := r2.srv.Peers(); len(ps) != 2 || !ps[0].Linked || ps[0].ID != "r1" || ps[0].Forwards != 2 || !ps[1].Linked || ps[1].Forwards != 0 {
		t.Fatalf("r2 peers %+v", ps)
	}

	// Every relay lists the executor, with the relay it is joined to.
	for _, r := range []*testRelay{r1, r2, r3} {
		rc := rawControl(t, r)
		list, err := rc.Executors(ctxT(t), tok)
		if err != nil || len(list) != 1 || list[0].ID != "build-1" || !slices.Equal(list[0].Relays, []string{"r1"}) || list[0].Fingerprint != e.key.PublicKey().Fingerprint() {
			t.Fatalf("listing at %s: %+v %v", r.addr, list, err)
		}
	}
}

func TestJoinAnswerNamesTheClusterMembers(t *testing.T) {
	tc := startCluster(t, 3)
	r2 := tc.relays[1]
	rc := rawControl(t, r2)
	res, err := rc.Join(ctxT(t), protocol.RelayJoinParams{ExecutorID: "x", Token: r2.token(t, TokenJoin, CreateOptions{})})
	if err != nil {
		t.Fatal(err)
	}
	if res.Cluster == nil || res.Cluster.Relay != "r2" || len(res.Cluster.Members) != 3 {
		t.Fatalf("join answer %+v", res.Cluster)
	}
	for i, m := range res.Cluster.Members {
		if m.ID != fmt.Sprintf("r%d", i+1) || m.Addr != tc.relays[i].addr {
			t.Fatalf("member %d: %+v", i, m)
		}
	}
}

func TestPeerLinksNeedTheClusterKeyAndMembership(t *testing.T) {
	tc := startCluster(t, 2)
	r1 := tc.relays[0]
	// Any other key: refused.
	rc, err := relayclient.Dial(ctxT(t), r1.url(), key(t).Keypair(), relayclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	err = rc.Call(ctxT(t), protocol.MethodRelayPeer, protocol.RelayPeerParams{Relay: "r2"}, nil)
	if protocol.KindOf(err) != protocol.KindRefused {
		t.Fatalf("a stranger's relay/peer: %v", err)
	}
	// The cluster key naming a relay that is not a member: refused.
	rc2, err := relayclient.Dial(ctxT(t), r1.url(), r1.key.Keypair(), relayclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer rc2.Close()
	err = rc2.Call(ctxT(t), protocol.MethodRelayPeer, protocol.RelayPeerParams{Relay: "r9"}, nil)
	if protocol.KindOf(err) != protocol.KindRefused {
		t.Fatalf("a non-member's relay/peer: %v", err)
	}
	// relay/forward needs the cluster's key and a member's name.
	for _, k := range []identity.Key{key(t), r1.key} {
		_, _, err := relayclient.Forward(ctxT(t), r1.url(), k.Keypair(), relayclient.Options{}, protocol.RelayForwardParams{ExecutorID: "x", Relay: "r9"})
		if protocol.KindOf(err) != protocol.KindRefused {
			t.Fatalf("relay/forward by a stranger or a non-member: %v", err)
		}
	}
}

func TestAClosedRelaysExecutorsLeaveThePresenceAtOnce(t *testing.T) {
	tc := startCluster(t, 2)
	r1, r2 := tc.relays[0], tc.relays[1]
	// A bare join, not an executor: a real one learns the members from its
	// join answer and rejoins at r2 within milliseconds, which is what it
	// should do and not what this test measures.
	rc := rawControl(t, r1)
	if _, err := rc.Join(ctxT(t), protocol.RelayJoinParams{ExecutorID: "e1", Token: r1.token(t, TokenJoin, CreateOptions{})}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, testTimeout, "presence at r2", func() bool { return r2.srv.Stats().ClusterExecutors == 1 })
	r1.ln.Close()
	r1.srv.Close()
	waitFor(t, testTimeout, "presence gone", func() bool { st := r2.srv.Stats(); return st.ClusterExecutors == 0 && st.ClusterMembers == 1 })
	_, err := dialVia(t, r2, "e1", r2.token(t, TokenClient, CreateOptions{Executors: "*"}), client.Config{})
	if protocol.KindOf(err) != protocol.KindUnavailable {
		t.Fatalf("connect to an offline executor: %v (kind %q)", err, protocol.KindOf(err))
	}
}

func TestLosingEtcdDetachesTheRelayButKeepsItsStreams(t *testing.T) {
	tc := startCluster(t, 1)
	r1 := tc.relays[0]
	joinOne(t, r1.url(), "e1", r1.token(t, TokenJoin, CreateOptions{}), key(t), 0)
	env, err := dialVia(t, r1, "e1", r1.token(t, TokenClient, CreateOptions{Executors: "*"}), client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r1.srv.Ready(); err != nil {
		t.Fatalf("ready: %v", err)
	}
	tc.etcd.Kill(0)
	waitFor(t, testTimeout, "detached", func() bool { return errors.Is(r1.srv.Ready(), ErrDetached) })
	out, err := client.Command(env, "/bin/echo", "still here").Output()
	if err != nil || string(out) != "still here\n" {
		t.Fatalf("%q %v", out, err)
	}
	tc.etcd.Restart(0)
	waitFor(t, testTimeout, "attached again", func() bool { return r1.srv.Ready() == nil })
	// Its presence is written again under the new lease.
	cli := tc.etcd.Client(t)
	waitFor(t, testTimeout, "presence rewritten", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		resp, err := cli.Get(ctx, tc.prefix+"/presence/e1/r1", clientv3.WithKeysOnly())
		return err == nil && len(resp.Kvs) == 1
	})
}

// A relay that dies while a client's connection is being made through it
// (a cluster's member killed behind a load balancer) costs the client a
// new connection, not its command: the client dials again, and gets the
// relay's answer when it is one.
func TestAConnectionBrokenBeforeItsSessionIsMadeAgain(t *testing.T) {
	r := newRelay(t)
	joinOne(t, r.url(), "e1", r.token(t, TokenJoin, CreateOptions{}), key(t), 0)
	tok := r.token(t, TokenClient, CreateOptions{Executors: "*"})
	var mu sync.Mutex
	conns, drop := 0, 2
	// The front cuts its first two connections once the client has sent
	// its first bytes (mid-handshake), then forwards.
	front := listenForwarding(t, r.addr, func(c, u net.Conn) {
		mu.Lock()
		conns++
		cut := conns <= drop
		mu.Unlock()
		if cut {
			go func() {
				c.Read(make([]byte, 1))
				c.Close()
				u.Close()
			}()
			return
		}
		go func() { io.Copy(c, u); c.Close() }()
		go func() { io.Copy(u, c); u.Close() }()
	})
	url := "outpost://" + front.Addr().String() + "#" + r.key.PublicKey().Fingerprint()
	cfg := client.Config{Executor: "e1", Token: tok, Key: key(t), KnownExecutors: filepath.Join(t.TempDir(), "known")}
	env, err := client.Dial(ctxT(t), url, cfg)
	if err != nil {
		t.Fatalf("dial through a front that broke two connections: %v", err)
	}
	out, err := client.Command(env, "/bin/echo", "made again").Output()
	env.Close()
	if err != nil || string(out) != "made again\n" {
		t.Fatalf("%q %v", out, err)
	}
	// Every connection broken: the dial gives up after its attempts.
	mu.Lock()
	conns, drop = 0, 1<<30
	mu.Unlock()
	if _, err := client.Dial(ctxT(t), url, cfg); err == nil {
		t.Fatal("a dial through a front that breaks every connection succeeded")
	}
	mu.Lock()
	n := conns
	mu.Unlock()
	if n != 3 {
		t.Fatalf("%d connections for one dial, want 3 attempts", n)
	}
	// A refusal is an answer: one connection, no second attempt.
	mu.Lock()
	conns, drop = 0, 0
	mu.Unlock()
	cfg.Token = "opt_" + strings.Repeat("A", 43)
	if _, err := client.Dial(ctxT(t), url, cfg); protocol.KindOf(err) != protocol.KindRefused {
		t.Fatalf("dial with an unknown token: %v", err)
	}
	mu.Lock()
	n = conns
	mu.Unlock()
	if n != 1 {
		t.Fatalf("%d connections for a refused dial, want 1", n)
	}
}
