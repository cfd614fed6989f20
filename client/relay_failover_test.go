package client

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/outpost-exec/outpost/executor"
	"github.com/outpost-exec/outpost/internal/etcdtest"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/relay"
	"github.com/outpost-exec/outpost/relay/relayclient"
	"github.com/outpost-exec/outpost/transport"
)

// clusterRelay is one relay of a testRelayCluster.
type clusterRelay struct {
	id, addr string
	srv      *relay.Server
	ln       *relay.Listener
}

// testRelayCluster is n relays of one cluster on a real etcd, sharing a
// key and one bbolt token store, and an executor joined to two of them.
type testRelayCluster struct {
	relays      []*clusterRelay
	fp          string // the cluster key's fingerprint
	clientToken string
	exec        string // the executor's id
}

// url is the relay URL listing relays idx (0-based), in that order.
func (tc *testRelayCluster) url(idx ...int) string {
	addrs := make([]string, len(idx))
	for i, n := range idx {
		addrs[i] = tc.relays[n].addr
	}
	return "outpost://" + strings.Join(addrs, ",") + "#" + tc.fp
}

// kill ends relay i as a killed process would, for its peers: its port
// and every connection through it close at once (the executor's session,
// the clients' splices), and its member entry and presence go.
func (tc *testRelayCluster) kill(i int) {
	tc.relays[i].ln.Close()
	tc.relays[i].srv.Close()
}

// startRelayCluster starts n relays of one cluster and an executor joined
// through r1 with two sessions (the cluster's default): one on r1, one on
// another member.
func startRelayCluster(t *testing.T, n int) *testRelayCluster {
	t.Helper()
	etcd := etcdtest.Start(t, 1)
	cli := etcd.Client(t)
	tokens, err := relay.OpenStore(filepath.Join(t.TempDir(), "relay.db"))
	if err != nil {
		t.Fatal(err)
	}
	key := newKey(t)
	tc := &testRelayCluster{fp: key.PublicKey().Fingerprint(), exec: "build-1"}
	for i := range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		id := fmt.Sprintf("r%d", i+1)
		srv, err := relay.NewServer(relay.Config{Key: key.Keypair(), Tokens: tokens, Logger: zaptest.NewLogger(t).Named(id),
			Cluster: &relay.ClusterConfig{Client: cli, Prefix: "/outpost-client-test", RelayID: id, Advertise: addr, LeaseTTL: relay.DefaultLeaseTTL}})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-srv.Attached():
		case <-ctxT(t).Done():
			t.Fatalf("relay %s did not attach to etcd", id)
		}
		ln, err := srv.Listen(addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close(); srv.Close() })
		tc.relays = append(tc.relays, &clusterRelay{id: id, addr: addr, srv: srv, ln: ln})
	}
	waitFor(t, fmt.Sprintf("%d members", n), func() bool {
		for _, r := range tc.relays {
			if r.srv.Stats().ClusterMembers != n {
				return false
			}
		}
		return true
	})
	joinToken, _, err := tokens.Create(relay.TokenJoin, relay.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if tc.clientToken, _, err = tokens.Create(relay.TokenClient, relay.CreateOptions{Executors: "*"}); err != nil {
		t.Fatal(err)
	}
	srv, err := executor.NewServer(executor.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- srv.Join(ctx, executor.JoinConfig{RelayURL: tc.url(0), Key: newKey(t).Keypair(), ID: tc.exec, Token: joinToken})
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		srv.Shutdown(context.Background())
	})
	// Joined to r1 and to one other relay, and every relay sees it.
	waitFor(t, "the executor on two relays, r1 one of them", func() bool {
		joined := 0
		for _, r := range tc.relays {
			st := r.srv.Stats()
			if st.ClusterExecutors != 1 {
				return false
			}
			joined += st.Executors
		}
		return joined == 2 && tc.relays[0].srv.Stats().Executors == 1
	})
	return tc
}

// linesWriter collects a command's output and says when it holds a line.
type linesWriter struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	want   string
	seen   chan struct{} // closed once want has been written
	closed bool
}

func (w *linesWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if !w.closed && strings.Contains(w.buf.String(), w.want) {
		close(w.seen)
		w.closed = true
	}
	return len(p), nil
}

func (w *linesWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// countTo is what `seq 50` prints.
func countTo(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		b.WriteString(strconv.Itoa(i) + "\n")
	}
	return b.String()
}

// runThroughKilledRelay runs a 5-second command through url, whose
// connection is made through r1, kills r1 once the command has printed
// its 10th line, and checks that the command's output arrives whole,
// once, on a session resumed through r2.
func runThroughKilledRelay(t *testing.T, tc *testRelayCluster, url string) {
	t.Helper()
	r := dial(t, url, Config{Executor: tc.exec, Token: tc.clientToken})
	out := &linesWriter{want: "\n10\n", seen: make(chan struct{})}
	cmd := Command(r, "/bin/sh", "-c", "for i in $(seq 50); do echo $i; sleep 0.1; done")
	cmd.Stdout = out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }() // Wait copies the output
	if st := tc.relays[0].srv.Stats(); st.SplicedStreams != 1 {
		t.Fatalf("the client's connection is not through r1: r1 has %d spliced streams", st.SplicedStreams)
	}
	select {
	case <-out.seen:
	case <-ctxT(t).Done():
		t.Fatalf("no 10th line; output %q", out.String())
	}
	tc.kill(0)
	if err := <-waited; err != nil {
		t.Fatalf("the command through a killed relay: %v; output %q", err, out.String())
	}
	if got, want := out.String(), countTo(50); got != want {
		t.Fatalf("output through a killed relay:\n%q\nwant\n%q", got, want)
	}
	if r.recovered.Load() < 1 {
		t.Fatal("the output came whole, but the session was never resumed: was r1 killed under it?")
	}
	if st := tc.relays[1].srv.Stats(); st.SplicedStreams != 1 {
		t.Fatalf("the resumed session is not through r2: r2 has %d spliced streams", st.SplicedStreams)
	}
	// And the next command goes through r2 at once.
	if got, err := Command(r, "/bin/echo", "after").Output(); err != nil || string(got) != "after\n" {
		t.Fatalf("a command after the resume: %q %v", got, err)
	}
}

// A URL listing r1 and r2: when r1, the client's relay, is killed under a
// running command, the session resumes through r2 (to the executor joined
// there, or forwarded one hop to it), and the command's output arrives
// complete — nothing lost, nothing twice. This needs nothing from the
// relays' answers.
func TestACommandSurvivesItsRelayKilledWhenTheURLListsAnother(t *testing.T) {
	tc := startRelayCluster(t, 3)
	runThroughKilledRelay(t, tc, tc.url(0, 1))
}

// A URL naming r1 alone: r1's answer to relay/connect names the cluster's
// members, and when r1 is killed the session resumes through one of them.
// (It needs the relay to fill protocol.RelayConnectResult.Cluster,
// relay.(*Server).connectMembers.)
func TestACommandSurvivesItsRelayKilledThroughMembersTheRelayNamed(t *testing.T) {
	tc := startRelayCluster(t, 3)
	// What the client learns from: r1's answer names the three.
	var heard protocol.RelayConnectResult
	rc, err := relayclient.Dial(ctxT(t), tc.url(0), newKey(t).Keypair(), relayclient.Options{OnConnect: func(res protocol.RelayConnectResult) { heard = res }})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = rc.Connect(ctxT(t), tc.exec, tc.clientToken)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	if heard.Cluster == nil || heard.Cluster.Relay != "r1" || len(heard.Cluster.Members) != 3 {
		t.Fatalf("r1's answer to relay/connect names %+v, not the cluster's three members (is relay.(*Server).connectMembers in the answer?)", heard.Cluster)
	}
	runThroughKilledRelay(t, tc, tc.url(0))
}

// The candidate list: the preferred relay first, then the URL's order,
// then members learnt (not the configured ones again, not an outpost+ws://
// URL's); an answer without a cluster keeps what was learnt.
func TestRelayCandidatesOrder(t *testing.T) {
	fp := newKey(t).PublicKey().Fingerprint()
	u := mustParse(t, "outpost://a:1,b:2#"+fp)
	c := newRelayCandidates(u)
	if got := addrsOf(c.order()); got != "a:1 b:2" {
		t.Fatalf("order %s", got)
	}
	c.heard(connectAnswer("b:2", "c:3", "a:1", "c:3", "bad", "d:4"))
	if got := addrsOf(c.order()); got != "a:1 b:2 c:3 d:4" {
		t.Fatalf("after an answer: %s", got)
	}
	c.worked("c:3")
	if got := addrsOf(c.order()); got != "c:3 a:1 b:2 d:4" {
		t.Fatalf("after c:3 worked: %s", got)
	}
	c.heard(protocol.RelayConnectResult{ExecutorKey: fp})
	if got := addrsOf(c.order()); got != "c:3 a:1 b:2 d:4" {
		t.Fatalf("an answer without a cluster changed the list: %s", got)
	}
	c.heard(connectAnswer("a:1", "e:5"))
	if got := addrsOf(c.order()); got != "c:3 a:1 b:2 e:5" {
		t.Fatalf("after a member left: %s", got)
	}
	for _, ru := range c.order() {
		if ru.String() != "outpost://"+ru.Addr+"#"+fp {
			t.Fatalf("candidate URL %s", ru.String())
		}
	}
	ws := newRelayCandidates(mustParse(t, "outpost+ws://a:1#"+fp))
	ws.heard(connectAnswer("a:1", "b:2"))
	if got := addrsOf(ws.order()); got != "a:1" {
		t.Fatalf("an outpost+ws:// URL learnt members: %s", got)
	}
}

func mustParse(t *testing.T, s string) transport.URL {
	t.Helper()
	u, err := transport.ParseURL(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func addrsOf(us []transport.URL) string {
	var out []string
	for _, u := range us {
		out = append(out, u.Addr)
	}
	return strings.Join(out, " ")
}

// connectAnswer is a connect answer naming members at addrs (ids m0, m1…).
func connectAnswer(addrs ...string) protocol.RelayConnectResult {
	rc := &protocol.RelayCluster{Relay: "m0"}
	for i, a := range addrs {
		rc.Members = append(rc.Members, protocol.RelayMember{ID: fmt.Sprintf("m%d", i), Addr: a})
	}
	return protocol.RelayConnectResult{Cluster: rc}
}
