package main

// The relay cluster's benchmarks (issue 20): one etcd and three `outpost
// relay serve --store etcd://…` processes sharing one key, in this run's
// temporary directory, killed at the end of each metric.
//
//   - cluster_hop: an executor joined to relay B only; clients through B
//     (outpost-relay-single) and through A, which forwards them one hop to
//     B (outpost-relay-hop), their runs interleaved: connect → first
//     output byte of a one-line command on a new connection, and
//     start-to-exit of /bin/true on an established one.
//   - cluster_failover: an executor on two relays of three; clients
//     through an in-process TCP load balancer (round robin over the
//     relays that accept), the URL a user keeps. New commands, each on a
//     new connection, run for -cluster-failover-for while one of the
//     executor's relays is SIGKILLed; then a command streaming a numbered
//     sequence while the relay carrying the client's connection is
//     SIGKILLed (one that holds the executor, and one that forwards to
//     it): the time from the kill to the next output byte, and the output
//     checked complete and byte-exact.
//   - cluster_scale: -cluster-executors lightweight joiners (relayclient
//     Dial + relay/join, holding the session; each its own key) spread
//     over the three relays: the relays' memory per joined executor; then
//     one relay SIGKILLed and started again on its port, and the time
//     until all its joiners (reconnecting with jittered backoff from
//     100 ms, doubling, as executors do) have rejoined, with the etcd
//     writes the storm costs per second.

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flynn/noise"

	"github.com/outpost-exec/outpost/client"
	"github.com/outpost-exec/outpost/executor"
	"github.com/outpost-exec/outpost/identity"
	"github.com/outpost-exec/outpost/internal/backoff"
	"github.com/outpost-exec/outpost/internal/peers"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/relay/relayclient"
)

var (
	clusterExecutors   = flag.Int("cluster-executors", 10000, "lightweight joiners spread over the 3 relays of cluster_scale")
	clusterFailoverFor = flag.Duration("cluster-failover-for", 10*time.Second, "how long cluster_failover starts new commands (a relay is SIGKILLed 3 s in)")
	clusterResumeRuns  = flag.Int("cluster-resume-runs", 3, "cluster_failover resume runs per case (a relay is SIGKILLed in each)")
)

// clusterRelays is how many relays every cluster metric starts.
const clusterRelays = 3

// clusterEnv is one etcd and its relays.
type clusterEnv struct {
	b       *bench
	dir     string
	etcd    *peers.Etcd
	store   string
	state   string // the cluster key, shared by every relay
	fp      string
	relays  []*clusterRelay
	joinTok string
	cliTok  string
}

type clusterRelay struct {
	cfg peers.ClusterRelay
	srv *peers.Server // nil while killed
}

func (r *clusterRelay) url(fp string) string { return "outpost://" + r.cfg.Addr() + "#" + fp }

// startCluster starts etcd and n relays in b.dir/name, waits until every
// relay is ready and sees n members, and makes a join and a client token.
func (b *bench) startCluster(name string, n int, extra ...string) (_ *clusterEnv, err error) {
	if _, err := peers.EtcdBinary(); err != nil {
		return nil, err
	}
	c := &clusterEnv{b: b, dir: filepath.Join(b.dir, name)}
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if c.etcd, err = peers.StartEtcd(ctx, filepath.Join(c.dir, "etcd")); err != nil {
		return nil, err
	}
	c.store = c.etcd.StoreURL("/outpost-bench")
	c.state = filepath.Join(c.dir, "relay-state")
	if c.fp, err = peers.RelayInit(ctx, b.bin, c.state); err != nil {
		return nil, err
	}
	ports, err := peers.FreePorts(2 * n)
	if err != nil {
		return nil, err
	}
	for i := range n {
		c.relays = append(c.relays, &clusterRelay{cfg: peers.ClusterRelay{StateDir: c.state, Store: c.store, ID: "r" + strconv.Itoa(i+1),
			Port: ports[2*i], AdminPort: ports[2*i+1], Extra: extra,
			Env: []string{"XDG_CONFIG_HOME=" + filepath.Join(c.dir, "config"), "XDG_STATE_HOME=" + filepath.Join(c.dir, "xdg-state")}}})
	}
	for i := range c.relays {
		if err := c.start(ctx, i); err != nil {
			return nil, err
		}
	}
	if err := c.waitMembers(ctx, n); err != nil {
		return nil, err
	}
	if c.joinTok, err = peers.TokenEnv(ctx, b.bin, c.state, nil, "--join", "--store", c.store); err != nil {
		return nil, err
	}
	if c.cliTok, err = peers.TokenEnv(ctx, b.bin, c.state, nil, "--client", "--store", c.store); err != nil {
		return nil, err
	}
	return c, nil
}

// start starts relay i (again) and waits until it is ready.
func (c *clusterEnv) start(ctx context.Context, i int) error {
	r := c.relays[i]
	s, err := peers.StartClusterRelay(ctx, c.b.bin, r.cfg)
	if err != nil {
		return fmt.Errorf("relay %s: %w", r.cfg.ID, err)
	}
	r.srv = s
	if err := peers.WaitReady(ctx, r.cfg.Admin()); err != nil {
		return fmt.Errorf("relay %s: %w; stderr: %s", r.cfg.ID, err, lastLines([]byte(s.Stderr()), 5))
	}
	return nil
}

// kill SIGKILLs relay i.
func (c *clusterEnv) kill(i int) error {
	r := c.relays[i]
	if r.srv == nil {
		return nil
	}
	err := r.srv.Kill()
	r.srv = nil
	return err
}

// stop kills every relay and etcd (SIGKILL: the cluster's state goes with
// the temporary directory).
func (c *clusterEnv) stop() {
	for i := range c.relays {
		c.kill(i)
	}
	if c.etcd != nil {
		c.etcd.Stop()
	}
	os.RemoveAll(c.dir)
}

// metrics scrapes relay i's /metrics.
func (c *clusterEnv) metrics(ctx context.Context, i int) (map[string]float64, error) {
	return peers.ScrapeMetrics(ctx, c.relays[i].cfg.Admin()+"/metrics")
}

// waitMetric waits until every running relay's unlabelled metric name
// satisfies ok.
func (c *clusterEnv) waitMetric(ctx context.Context, name string, ok func(i int, v float64) bool) error {
	var last string
	for {
		all := true
		for i, r := range c.relays {
			if r.srv == nil {
				continue
			}
			m, err := c.metrics(ctx, i)
			if err != nil {
				all, last = false, err.Error()
				break
			}
			if v, found := m[name]; !found || !ok(i, v) {
				all, last = false, fmt.Sprintf("%s: %s = %v (present %v)", r.cfg.ID, name, v, found)
				break
			}
		}
		if all {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last: %s)", name, ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitMembers waits until every running relay sees n members.
func (c *clusterEnv) waitMembers(ctx context.Context, n int) error {
	return c.waitMetric(ctx, "outpost_relay_cluster_members", func(_ int, v float64) bool { return int(v) == n })
}

// holders are the relays with joined executors now (their
// outpost_relay_executors gauge above zero).
func (c *clusterEnv) holders(ctx context.Context) []int {
	var out []int
	for i, r := range c.relays {
		if r.srv == nil {
			continue
		}
		if m, err := c.metrics(ctx, i); err == nil && m["outpost_relay_executors"] > 0 {
			out = append(out, i)
		}
	}
	return out
}

// waitHolders waits until exactly n relays hold the (one) executor, and
// every relay sees it in the cluster's presence.
func (c *clusterEnv) waitHolders(ctx context.Context, n int) ([]int, error) {
	for {
		h := c.holders(ctx)
		if len(h) == n {
			if err := c.waitMetric(ctx, "outpost_relay_cluster_executors", func(_ int, v float64) bool { return v >= 1 }); err != nil {
				return nil, err
			}
			return h, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the executor on %d relays: on %v: %w", n, h, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// counter is a relay's unlabelled metric, 0 when it cannot be read.
func (c *clusterEnv) counter(i int, name string) float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, _ := c.metrics(ctx, i)
	return m[name]
}

// executorMaxSessions is the in-process executors' MaxSessions. Every
// client connection leaves its session detached, for resume, for
// DetachedTTL (5 min) after it closes: at the default 1,024 the executor
// refuses new connections ("too many sessions") after 1,024 in 5 min,
// which these metrics, a new connection per command, pass in seconds.
const executorMaxSessions = 1 << 16

// startExecutor starts an in-process executor joined to relay first with
// relayConns sessions; stop ends it.
func (c *clusterEnv) startExecutor(id string, first, relayConns int) (stop func(), err error) {
	cfg := executor.DefaultConfig()
	cfg.MaxSessions = executorMaxSessions
	srv, err := executor.NewServer(cfg)
	if err != nil {
		return nil, err
	}
	k, err := identity.Generate()
	if err != nil {
		srv.Shutdown(context.Background())
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Join(ctx, executor.JoinConfig{RelayURL: c.relays[first].url(c.fp), Key: k.Keypair(), ID: id, Token: c.joinTok, RelayConnections: relayConns})
	}()
	return func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		srv.Shutdown(sctx)
	}, nil
}

// clientConfig is a client of executor id with the cluster's client token.
func (c *clusterEnv) clientConfig(id string, resume bool) client.Config {
	return client.Config{Key: c.b.key, Executor: id, Token: c.cliTok, NoResume: !resume,
		KnownExecutors: filepath.Join(c.dir, "known_executors")}
}

// dialUntil dials url until it answers, within 30 s: the executor's
// presence may still be on its way to the relay.
func dialUntil(url string, cfg client.Config) (*client.Remote, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		env, err := client.Dial(ctx, url, cfg)
		if err == nil || ctx.Err() != nil {
			return env, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// runCommand runs argv on env and returns its stdout+stderr; a non-zero
// exit is an error.
func runCommand(ctx context.Context, env client.Environment, argv ...string) ([]byte, error) {
	p, err := env.Start(ctx, protocol.ExecParams{Argv: argv, Cwd: "file:///tmp", Env: env0})
	if err != nil {
		return nil, err
	}
	var out []byte
	for ev := range p.Events() {
		switch ev.Kind {
		case client.EventOutput:
			out = append(out, ev.Data...)
		case client.EventExited:
			if ev.ExitCode != 0 || ev.Signal != 0 {
				err = fmt.Errorf("exit %d (signal %d)", ev.ExitCode, ev.Signal)
			}
		case client.EventFailed:
			return out, ev.Err
		}
	}
	return out, err
}

// skipAll records why every target of metric has no figures.
func (b *bench) skipAll(metric string, targets []string, why string) {
	why = strings.Join(strings.Fields(why), " ") // one table row
	if len(why) > 600 {
		why = why[:600] + "…"
	}
	for _, t := range targets {
		b.skip(metric, t, why)
	}
}

// ---- cluster_hop ----

func (b *bench) clusterHop() {
	const metric = "cluster_hop"
	targets := []string{"outpost-relay-single", "outpost-relay-hop"}
	c, err := b.startCluster("cluster-hop", clusterRelays, "--drain-timeout", "1s")
	if err != nil {
		b.skipAll(metric, targets, err.Error())
		return
	}
	defer c.stop()
	const A, B = 0, 1
	stop, err := c.startExecutor("hop", B, 1)
	if err != nil {
		b.skipAll(metric, targets, err.Error())
		return
	}
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	h, err := c.waitHolders(ctx, 1)
	cancel()
	if err == nil && (len(h) != 1 || h[0] != B) {
		err = fmt.Errorf("the executor joined relays %v, not only B (index %d)", h, B)
	}
	if err != nil {
		b.skipAll(metric, targets, err.Error())
		return
	}
	urls := map[string]string{targets[0]: c.relays[B].url(c.fp), targets[1]: c.relays[A].url(c.fp)}
	cfg := c.clientConfig("hop", false)

	// Connect → first output: a new connection per run, and a command
	// printing one line; the clock stops at its first byte.
	firstOutput := func(url string) (time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		t0 := time.Now()
		env, err := client.Dial(ctx, url, cfg)
		if err != nil {
			return 0, err
		}
		defer env.Close()
		p, err := env.Start(ctx, protocol.ExecParams{Argv: []string{"echo", "hop"}, Cwd: "file:///tmp", Env: env0})
		if err != nil {
			return 0, err
		}
		var d time.Duration
		var out []byte
		for ev := range p.Events() {
			switch ev.Kind {
			case client.EventOutput:
				if d == 0 && len(ev.Data) > 0 {
					d = time.Since(t0)
				}
				out = append(out, ev.Data...)
			case client.EventFailed:
				return 0, ev.Err
			}
		}
		if string(out) != "hop\n" {
			return 0, fmt.Errorf("output %q, not %q", out, "hop\n")
		}
		return d, nil
	}
	fwd0 := c.counter(A, "outpost_relay_forwarded_total")
	etcd0 := c.etcdMetrics()
	first, err := interleaved(*runs, targets, func(t string) (time.Duration, error) { return firstOutput(urls[t]) })
	if err != nil {
		b.skipAll(metric, targets, "connect→first output: "+err.Error())
		return
	}
	etcd1 := c.etcdMetrics()
	// Start-to-exit on an established session each, as start_to_exit.
	envs := map[string]*client.Remote{}
	for _, t := range targets {
		env, err := dialUntil(urls[t], cfg)
		if err != nil {
			b.skipAll(metric, targets, t+": "+err.Error())
			return
		}
		defer env.Close()
		envs[t] = env
	}
	ste, err := interleaved(*runs, targets, func(t string) (time.Duration, error) {
		t0 := time.Now()
		_, err := startRemote(envs[t], "/bin/true")
		return time.Since(t0), err
	})
	if err != nil {
		b.skipAll(metric, targets, "start-to-exit: "+err.Error())
		return
	}
	forwarded := c.counter(A, "outpost_relay_forwarded_total") - fwd0
	bForwarded := c.counter(B, "outpost_relay_forwarded_total")
	rows := map[string]*Result{}
	for _, t := range targets {
		fp50, fp99 := peers.Percentiles(first[t])
		p50, p99 := peers.Percentiles(ste[t])
		rows[t] = &Result{Metric: metric, Target: t, Runs: *runs, P50Ms: f64(p50), P99Ms: f64(p99), FirstOutputP50Ms: f64(fp50), FirstOutputP99Ms: f64(fp99)}
	}
	single, hop := rows[targets[0]], rows[targets[1]]
	ratio := *hop.FirstOutputP50Ms / *single.FirstOutputP50Ms
	diff := *hop.P50Ms - *single.P50Ms
	hop.VsBase, hop.OverheadMs = f64(ratio), f64(diff)
	conns := 2 * (*runs + 1)
	single.Notes = fmt.Sprintf("client and executor on relay B (%.0f forwarded by B); p50/p99 columns: start-to-exit of /bin/true on an established session; every new connection redeems the client token in etcd: %s",
		bForwarded, etcdCost(etcd0, etcd1, conns))
	hop.Notes = fmt.Sprintf("client on relay A, forwarded one hop to B (%.0f forwarded); targets: connect→first output ≤ 1.5× single: %s; start-to-exit p50 ≤ single +0.30 ms: %s",
		forwarded, met(ratio <= 1.5), met(diff <= 0.3))
	b.add(*single)
	b.add(*hop)
}

// etcdMetrics scrapes etcd's /metrics (nil when it cannot).
func (c *clusterEnv) etcdMetrics() map[string]float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, _ := c.etcd.Metrics(ctx)
	return m
}

// etcdCost describes etcd's transactions and WAL fsyncs between two
// scrapes, over conns connections.
func etcdCost(before, after map[string]float64, conns int) string {
	if before == nil || after == nil {
		return "etcd /metrics unreadable"
	}
	d := func(name string) float64 { return after[name] - before[name] }
	fsyncs := d("etcd_disk_wal_fsync_duration_seconds_count")
	s := fmt.Sprintf("%.0f etcd writes (raft proposals committed: %.0f txns, %.0f puts) for %d connections",
		d("etcd_server_proposals_committed_total"), d("etcd_mvcc_txn_total"), d("etcd_mvcc_put_total"), conns)
	if fsyncs > 0 {
		s += fmt.Sprintf(", %.0f WAL fsyncs of %.2f ms on average", fsyncs, 1000*d("etcd_disk_wal_fsync_duration_seconds_sum")/fsyncs)
	}
	return s
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}

// interleaved runs f for every target in turn, n times each after a
// warm-up, the order alternating every round, so that both see the same
// machine; it returns each target's durations.
func interleaved(n int, targets []string, f func(target string) (time.Duration, error)) (map[string][]time.Duration, error) {
	out := map[string][]time.Duration{}
	for _, t := range targets {
		if _, err := f(t); err != nil {
			return nil, fmt.Errorf("%s: %w", t, err)
		}
	}
	for i := range n {
		for j := range targets {
			t := targets[j]
			if i%2 == 1 {
				t = targets[len(targets)-1-j]
			}
			d, err := f(t)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", t, err)
			}
			out[t] = append(out[t], d)
		}
	}
	return out, nil
}

// ---- the load balancer ----

// balancer is a TCP load balancer: each connection goes to the next relay,
// round robin, skipping those that refuse it — the one address clients
// keep ("behind DNS or a load balancer").
type balancer struct {
	ln       net.Listener
	backends []string
	mu       sync.Mutex
	next     int
	conns    map[net.Conn]lbConn // client side → its backend
	wg       sync.WaitGroup
}

type lbConn struct {
	backend int
	at      time.Time
	peer    net.Conn
}

func newBalancer(backends []string) (*balancer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	lb := &balancer{ln: ln, backends: backends, conns: map[net.Conn]lbConn{}}
	lb.wg.Add(1)
	go func() {
		defer lb.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			lb.wg.Add(1)
			go func() { defer lb.wg.Done(); lb.handle(c) }()
		}
	}()
	return lb, nil
}

func (lb *balancer) addr() string { return lb.ln.Addr().String() }

// steer makes the next connection try backend i first.
func (lb *balancer) steer(i int) {
	lb.mu.Lock()
	lb.next = i
	lb.mu.Unlock()
}

func (lb *balancer) handle(c net.Conn) {
	lb.mu.Lock()
	start := lb.next
	lb.next = (lb.next + 1) % len(lb.backends)
	lb.mu.Unlock()
	for k := range lb.backends {
		i := (start + k) % len(lb.backends)
		bc, err := net.DialTimeout("tcp", lb.backends[i], time.Second)
		if err != nil {
			continue
		}
		lb.mu.Lock()
		if lb.conns == nil { // closed
			lb.mu.Unlock()
			bc.Close()
			c.Close()
			return
		}
		lb.conns[c] = lbConn{backend: i, at: time.Now(), peer: bc}
		lb.mu.Unlock()
		done := make(chan struct{}, 2)
		pipe := func(dst, src net.Conn) {
			io.Copy(dst, src)
			dst.Close()
			src.Close()
			done <- struct{}{}
		}
		go pipe(bc, c)
		go pipe(c, bc)
		<-done
		<-done
		lb.mu.Lock()
		delete(lb.conns, c)
		lb.mu.Unlock()
		return
	}
	c.Close() // no relay accepts
}

// newest is the backend of the most recent open connection (-1: none).
func (lb *balancer) newest() int {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	best, at := -1, time.Time{}
	for _, lc := range lb.conns {
		if lc.at.After(at) {
			best, at = lc.backend, lc.at
		}
	}
	return best
}

// close stops accepting and closes every connection.
func (lb *balancer) close() {
	lb.ln.Close()
	lb.mu.Lock()
	for c, lc := range lb.conns {
		c.Close()
		lc.peer.Close()
	}
	lb.conns = nil
	lb.mu.Unlock()
	lb.wg.Wait()
}

// ---- cluster_failover ----

func (b *bench) clusterFailover() {
	const metric = "cluster_failover"
	newTarget := "outpost-cluster-new-commands"
	resumeTargets := []string{"outpost-cluster-resume-via-executor-relay", "outpost-cluster-resume-via-forwarding-relay"}
	all := append([]string{newTarget}, resumeTargets...)
	c, err := b.startCluster("cluster-failover", clusterRelays, "--drain-timeout", "1s")
	if err != nil {
		b.skipAll(metric, all, err.Error())
		return
	}
	defer c.stop()
	stopExec, err := c.startExecutor("failover", 0, 2)
	if err != nil {
		b.skipAll(metric, all, err.Error())
		return
	}
	defer stopExec()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	holders, err := c.waitHolders(ctx, 2)
	cancel()
	if err != nil {
		b.skipAll(metric, all, err.Error())
		return
	}
	var backends []string
	for _, r := range c.relays {
		backends = append(backends, r.cfg.Addr())
	}
	lb, err := newBalancer(backends)
	if err != nil {
		b.skipAll(metric, all, err.Error())
		return
	}
	defer lb.close()
	url := "outpost://" + lb.addr() + "#" + c.fp
	// Every relay reaches the executor before the clock starts.
	for range clusterRelays {
		env, err := dialUntil(url, c.clientConfig("failover", false))
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			_, err = runCommand(ctx, env, "true")
			cancel()
			env.Close()
		}
		if err != nil {
			b.skipAll(metric, all, "warm-up through the balancer: "+err.Error())
			return
		}
	}

	b.failoverNewCommands(c, lb, url, holders, newTarget)

	// The resume cases: the client's connection on a relay holding the
	// executor, then on one forwarding to it; that relay is SIGKILLed
	// mid-stream.
	for k, target := range resumeTargets {
		b.failoverResume(c, lb, url, target, k == 0)
	}
}

// restore starts every killed relay again and waits until the cluster
// has all its members and the executor two sessions.
func (c *clusterEnv) restore() ([]int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i, r := range c.relays {
		if r.srv == nil {
			if err := c.start(ctx, i); err != nil {
				return nil, err
			}
		}
	}
	if err := c.waitMembers(ctx, len(c.relays)); err != nil {
		return nil, err
	}
	return c.waitHolders(ctx, 2)
}

// failoverNewCommands starts short commands, each on a new connection
// through the balancer, from two loops for *clusterFailoverFor; 3 s in,
// one of the executor's relays is SIGKILLed.
func (b *bench) failoverNewCommands(c *clusterEnv, lb *balancer, url string, holders []int, target string) {
	const metric = "cluster_failover"
	const workers = 2
	victim := holders[len(holders)-1]
	cfg := c.clientConfig("failover", true)
	type outcome struct {
		at, took time.Duration
		err      error
	}
	var mu sync.Mutex
	var outs []outcome
	t0 := time.Now()
	deadline := t0.Add(*clusterFailoverFor)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				start := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				env, err := client.Dial(ctx, url, cfg)
				if err == nil {
					var out []byte
					out, err = runCommand(ctx, env, "echo", "ok")
					if err == nil && string(out) != "ok\n" {
						err = fmt.Errorf("output %q", out)
					}
					env.Close()
				}
				cancel()
				mu.Lock()
				outs = append(outs, outcome{at: start.Sub(t0), took: time.Since(start), err: err})
				mu.Unlock()
			}
		}()
	}
	killAt := min(3*time.Second, *clusterFailoverFor/3)
	time.Sleep(killAt)
	killed := time.Since(t0)
	kerr := c.kill(victim)
	wg.Wait()
	if kerr != nil {
		b.skip(metric, target, kerr.Error())
		return
	}
	failed, before, after := 0, 0, 0
	var d []time.Duration
	var slowest time.Duration
	errs := map[string]int{}
	var when []string // the failed commands' start and end, from the kill
	for _, o := range outs {
		if o.at+o.took < killed {
			before++
		} else {
			after++
		}
		d = append(d, o.took)
		slowest = max(slowest, o.took)
		if o.err != nil {
			failed++
			errs[firstLine(o.err.Error())]++
			when = append(when, fmt.Sprintf("%+.2f–%+.2f s", (o.at-killed).Seconds(), (o.at+o.took-killed).Seconds()))
		}
	}
	p50, p99 := peers.Percentiles(d)
	notes := fmt.Sprintf("%d loops for %.0f s, each command a new connection through the balancer; relay %s (one of the executor's two) SIGKILLed %.1f s in; %d commands ended before the kill, %d after; slowest %.0f ms; %d of %d failed (target 0: %s)",
		workers, clusterFailoverFor.Seconds(), c.relays[victim].cfg.ID, killed.Seconds(), before, after, float64(slowest)/float64(time.Millisecond), failed, len(outs), met(failed == 0))
	if len(errs) > 0 {
		if len(when) > 5 {
			when = append(when[:5], "…")
		}
		notes += "; errors: " + summarize(errs) + "; the failed commands ran (from the kill) " + strings.Join(when, ", ")
	}
	b.add(Result{Metric: metric, Target: target, Runs: len(outs), P50Ms: f64(p50), P99Ms: f64(p99), WallS: f64(time.Since(t0).Seconds()), Errors: intp(failed), Notes: notes})
}

// streamLines is how many numbered lines the resumed command prints,
// one every 10 ms or so.
const streamLines = 600

// failoverResume streams a numbered sequence through the balancer, its
// first connection steered to a relay that holds the executor
// (viaHolder) or to the one that forwards to it, SIGKILLs that relay
// about a second into the output, and measures the time from the kill to
// the next output byte; the output must come out complete and
// byte-exact. *clusterResumeRuns runs, the killed relay restarted after
// each.
func (b *bench) failoverResume(c *clusterEnv, lb *balancer, url, target string, viaHolder bool) {
	const metric = "cluster_failover"
	var want bytes.Buffer
	for i := 1; i <= streamLines; i++ {
		fmt.Fprintf(&want, "%d\n", i)
	}
	script := fmt.Sprintf("for i in $(seq 1 %d); do echo $i; sleep 0.01; done", streamLines)
	var gaps []time.Duration
	var silences []time.Duration
	bad := 0
	var notes []string
	killedIDs := map[string]int{}
	for run := range *clusterResumeRuns {
		holders, err := c.restore()
		if err != nil {
			b.skip(metric, target, "restoring the cluster: "+err.Error())
			return
		}
		pick := -1
		for i := range c.relays {
			isHolder := false
			for _, h := range holders {
				isHolder = isHolder || h == i
			}
			if isHolder == viaHolder {
				pick = i
				break
			}
		}
		if pick < 0 {
			b.skip(metric, target, fmt.Sprintf("no relay to steer to (executor on %v)", holders))
			return
		}
		lb.steer(pick)
		cfg := c.clientConfig("failover", true)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		env, err := client.Dial(ctx, url, cfg)
		if err != nil {
			cancel()
			b.skip(metric, target, "dial: "+err.Error())
			return
		}
		carrier := lb.newest()
		if carrier != pick {
			env.Close()
			cancel()
			b.skip(metric, target, fmt.Sprintf("the balancer put the client on relay %d, not %d", carrier, pick))
			return
		}
		p, err := env.Start(ctx, protocol.ExecParams{Argv: []string{"sh", "-c", script}, Cwd: "file:///tmp", Env: env0})
		if err != nil {
			env.Close()
			cancel()
			b.skip(metric, target, "start: "+err.Error())
			return
		}
		type arrival struct {
			at         time.Time
			reconnects int64
		}
		var mu sync.Mutex
		var arrivals []arrival
		var out bytes.Buffer
		var runErr error
		lines := atomic.Int64{}
		done := make(chan struct{})
		go func() {
			defer close(done)
			for ev := range p.Events() {
				switch ev.Kind {
				case client.EventOutput:
					now := time.Now()
					mu.Lock()
					arrivals = append(arrivals, arrival{now, env.Reconnects()})
					out.Write(ev.Data)
					lines.Store(int64(bytes.Count(out.Bytes(), []byte("\n"))))
					mu.Unlock()
				case client.EventExited:
					if ev.ExitCode != 0 || ev.Signal != 0 {
						runErr = fmt.Errorf("exit %d (signal %d)", ev.ExitCode, ev.Signal)
					}
				case client.EventFailed:
					runErr = ev.Err
				}
			}
		}()
		// About a second of output first.
		for lines.Load() < 80 && ctx.Err() == nil && !isClosed(done) {
			time.Sleep(5 * time.Millisecond)
		}
		if isClosed(done) || ctx.Err() != nil {
			env.Close()
			cancel()
			b.skip(metric, target, fmt.Sprintf("the command ended (or hung) before the kill: %v", runErr))
			return
		}
		tKill := time.Now()
		victimID := c.relays[pick].cfg.ID
		kerr := c.kill(pick)
		select {
		case <-done:
		case <-ctx.Done():
		}
		env.Close()
		cancel()
		if kerr != nil {
			b.skip(metric, target, kerr.Error())
			return
		}
		killedIDs[victimID]++
		mu.Lock()
		got := out.Bytes()
		var gap, silence time.Duration
		var prev time.Time
		for _, a := range arrivals {
			if !prev.IsZero() {
				silence = max(silence, a.at.Sub(prev))
			}
			prev = a.at
			if gap == 0 && a.at.After(tKill) && a.reconnects > 0 {
				gap = a.at.Sub(tKill)
			}
		}
		reconnects := env.Reconnects()
		mu.Unlock()
		switch {
		case runErr != nil:
			bad++
			notes = append(notes, fmt.Sprintf("run %d: %v", run+1, firstLine(runErr.Error())))
		case !bytes.Equal(got, want.Bytes()):
			bad++
			notes = append(notes, fmt.Sprintf("run %d: output not byte-exact (%d bytes, want %d)", run+1, len(got), want.Len()))
		case gap == 0:
			bad++
			notes = append(notes, fmt.Sprintf("run %d: no output after a reconnect (%d reconnects)", run+1, reconnects))
		default:
			gaps = append(gaps, gap)
			silences = append(silences, silence)
		}
	}
	if _, err := c.restore(); err != nil {
		notes = append(notes, "restoring the cluster after the last run: "+err.Error())
	}
	how := "a relay the executor is joined to (its session there dies too)"
	if !viaHolder {
		how = "the relay forwarding to the executor's (the executor keeps both sessions)"
	}
	r := Result{Metric: metric, Target: target, Runs: *clusterResumeRuns, Errors: intp(bad)}
	desc := fmt.Sprintf("client through the balancer, on %s, SIGKILLed ~1 s into %d numbered lines (relays killed: %s); p50 and p99 columns: kill → next output byte, the median and the worst run", how, streamLines, summarize(killedIDs))
	if len(gaps) > 0 {
		p50, _ := peers.Percentiles(gaps)
		worst := slicesMax(gaps)
		r.P50Ms, r.P99Ms = f64(p50), f64(ms(worst)) // a few runs: the worst
		desc += fmt.Sprintf("; worst %.0f ms (target ≤ 2000: %s); longest silence in the output %.0f ms; %d of %d runs complete and byte-exact",
			ms(worst), met(worst <= 2*time.Second && bad == 0), ms(slicesMax(silences)), len(gaps), *clusterResumeRuns)
	}
	if len(notes) > 0 {
		desc += "; " + strings.Join(notes, "; ")
	}
	r.Notes = desc
	b.add(r)
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func slicesMax(d []time.Duration) time.Duration {
	var m time.Duration
	for _, v := range d {
		m = max(m, v)
	}
	return m
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 160 {
		s = s[:160] + "…"
	}
	return s
}

// summarize is "a ×3, b ×1", most frequent first.
func summarize(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	var parts []string
	for i, k := range keys {
		if i == 5 {
			parts = append(parts, fmt.Sprintf("%d more kinds", len(keys)-5))
			break
		}
		parts = append(parts, fmt.Sprintf("%s ×%d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// ---- cluster_scale ----

// joiner is a lightweight executor: a relay connection and relay/join,
// held until the relay goes, then joined again with jittered backoff
// (100 ms, doubling, to 30 s) as executor.Server.Join does.
type joiner struct {
	id       string
	key      noise.DHKey
	group    int // index into joinStats.joined: the relay it joins
	url      string
	joinedAt atomic.Int64 // unix ns of its last join
	attempts atomic.Int64 // failed attempts since its last join
}

type joinStats struct {
	joined [clusterRelays + 1]atomic.Int64 // joined now, per relay (the last: a standalone relay)
	mu     sync.Mutex
	errs   map[string]int
}

var loopbackAddr = regexp.MustCompile(`127\.0\.0\.1:[0-9]+`)

func (s *joinStats) fail(err error) {
	// The ports vary: keep the kind of failure.
	msg := loopbackAddr.ReplaceAllString(firstLine(err.Error()), "ADDR")
	s.mu.Lock()
	s.errs[msg]++
	s.mu.Unlock()
}

func (j *joiner) run(ctx context.Context, tok string, sem chan struct{}, st *joinStats) {
	bo := backoff.Backoff{Initial: 100 * time.Millisecond, Max: 30 * time.Second}
	first := true
	for ctx.Err() == nil {
		if first {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
		}
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		rc, err := relayclient.Dial(actx, j.url, j.key, relayclient.Options{})
		if err == nil {
			if _, err = rc.Join(actx, protocol.RelayJoinParams{ExecutorID: j.id, Token: tok}); err != nil {
				rc.Close()
			}
		}
		cancel()
		if first {
			<-sem
		}
		if err == nil {
			first = false
			bo.Reset() // as a long-lived executor's
			j.joinedAt.Store(time.Now().UnixNano())
			st.joined[j.group].Add(1)
			select {
			case <-rc.Done():
			case <-ctx.Done():
			}
			rc.Close()
			j.attempts.Store(0)
			st.joined[j.group].Add(-1)
			if ctx.Err() != nil {
				return
			}
		} else if ctx.Err() == nil {
			j.attempts.Add(1)
			st.fail(err)
		}
		if bo.Wait(ctx) != nil {
			return
		}
	}
}

// joinAll starts a goroutine per joiner (at most 128 first joins in
// flight) and waits until group's count reaches want, or 60 s pass
// without progress (at most 10 min). It returns how long it took.
func joinAll(ctx context.Context, wg *sync.WaitGroup, joiners []*joiner, tok string, st *joinStats, count func() int) time.Duration {
	sem := make(chan struct{}, 128)
	t0 := time.Now()
	for _, j := range joiners {
		wg.Add(1)
		go func() { defer wg.Done(); j.run(ctx, tok, sem, st) }()
	}
	last, lastAt := 0, time.Now()
	for count() < len(joiners) && time.Since(lastAt) < time.Minute && time.Since(t0) < 10*time.Minute {
		time.Sleep(50 * time.Millisecond)
		if v := count(); v != last {
			last, lastAt = v, time.Now()
		}
	}
	return time.Since(t0)
}

// newJoiners makes n joiners with keys of their own, joiner i on
// urls[i%len(urls)] (its group that index plus offset).
func newJoiners(prefix string, n int, urls []string, offset int) ([]*joiner, error) {
	out := make([]*joiner, n)
	for i := range out {
		k, err := identity.Generate()
		if err != nil {
			return nil, err
		}
		g := i % len(urls)
		out[i] = &joiner{id: prefix + strconv.Itoa(i), key: k.Keypair(), group: g + offset, url: urls[g]}
	}
	return out, nil
}

// standaloneRSS joins n joiners to one relay outside any cluster (a local
// token store) and returns its memory per joined executor, the baseline
// of the cluster's.
func (b *bench) standaloneRSS(n int, st *joinStats) (float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	state := filepath.Join(b.dir, "cluster-scale-standalone")
	defer os.RemoveAll(state)
	rs, err := peers.Start(ctx, nil, b.bin, "relay", "serve", "--listen", "tcp://127.0.0.1:0", "--state-dir", state, "--log-level", "warn", "--max-failed-handshakes", "1000000")
	if err != nil {
		return 0, err
	}
	defer rs.Kill()
	tok, err := peers.Token(b.bin, state, "--join")
	if err != nil {
		return 0, err
	}
	js, err := newJoiners("standalone-", n, []string{rs.URL}, clusterRelays)
	if err != nil {
		return 0, err
	}
	before := rssKiB(rs.Pid())
	jctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	joinAll(jctx, &wg, js, tok, st, func() int { return int(st.joined[clusterRelays].Load()) })
	joined := int(st.joined[clusterRelays].Load())
	if joined == 0 {
		return 0, errors.New("no joiner joined the standalone relay")
	}
	time.Sleep(time.Second)
	return float64(rssKiB(rs.Pid())-before) / float64(joined), nil
}

func (b *bench) clusterScale() {
	const metric = "cluster_scale"
	joinTarget, stormTarget := "outpost-cluster-join", "outpost-cluster-restart-storm"
	targets := []string{joinTarget, stormTarget}
	n := *clusterExecutors
	// Each joiner holds a connection here and one at a relay; the relays
	// also hold peer links, etcd and the joiners of a storm.
	nofile := raiseNofile(uint64(n + 4096))
	// Every joiner comes from 127.0.0.1: a storm's failed handshakes must
	// not get the address blocked, as they would not from many hosts.
	c, err := b.startCluster("cluster-scale", clusterRelays, "--drain-timeout", "1s", "--max-failed-handshakes", "1000000")
	if err != nil {
		b.skipAll(metric, targets, err.Error())
		return
	}
	defer c.stop()
	var why []string
	if nofile < uint64(n+256) {
		why = append(why, fmt.Sprintf("RLIMIT_NOFILE is %d here, below %d joiners' connections", nofile, n))
	}
	rssBefore := make([]int, clusterRelays)
	for i, r := range c.relays {
		rssBefore[i] = rssKiB(r.srv.Pid())
	}
	st := &joinStats{errs: map[string]int{}}
	urls := make([]string, clusterRelays)
	for i, r := range c.relays {
		urls[i] = r.url(c.fp)
	}
	joiners, err := newJoiners("scale-", n, urls, 0)
	if err != nil {
		b.skipAll(metric, targets, err.Error())
		return
	}
	jctx, stopJoiners := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		stopJoiners()
		wg.Wait()
	}()
	total := func() int {
		s := 0
		for i := range clusterRelays {
			s += int(st.joined[i].Load())
		}
		return s
	}
	etcd0 := c.etcdMetrics()
	wall := joinAll(jctx, &wg, joiners, c.joinTok, st, total)
	joined := total()
	etcd1 := c.etcdMetrics()
	if joined < n {
		why = append(why, fmt.Sprintf("%d of %d joined within %.0f s (errors: %s)", joined, n, wall.Seconds(), summarizeErrs(st)))
	}
	if joined == 0 {
		b.skipAll(metric, targets, strings.Join(why, "; "))
		return
	}
	// Every relay sees every executor in the cluster's presence.
	presenceFrom := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	perr := c.waitMetric(ctx, "outpost_relay_cluster_executors", func(_ int, v float64) bool { return int(v) >= joined })
	cancel()
	presenceAt := wall + time.Since(presenceFrom)
	time.Sleep(time.Second) // settled
	var perRelay []string
	sum := 0
	for i, r := range c.relays {
		d := rssKiB(r.srv.Pid()) - rssBefore[i]
		sum += d
		perRelay = append(perRelay, fmt.Sprintf("%s %d executors +%.0f MiB", r.cfg.ID, st.joined[i].Load(), float64(d)/1024))
	}
	notes := fmt.Sprintf("%d joiners (relayclient Dial + relay/join, own keys, one join token) over %d relays, at most 128 first joins at a time: %.0f joins/s, %s; RSS %s; RLIMIT_NOFILE %d",
		n, clusterRelays, float64(joined)/wall.Seconds(), etcdCost(etcd0, etcd1, joined), strings.Join(perRelay, ", "), nofile)
	if perr != nil {
		notes += "; presence not complete on every relay: " + perr.Error()
	} else {
		notes += fmt.Sprintf("; every relay saw all %d in the presence %.1f s after the start", joined, presenceAt.Seconds())
	}
	if len(why) > 0 {
		notes += "; " + strings.Join(why, "; ")
	}
	// The same joiners, a relay's share, on a relay outside any cluster.
	if base, err := b.standaloneRSS(joined/clusterRelays, st); err != nil {
		notes += "; standalone baseline: " + err.Error()
	} else {
		notes += fmt.Sprintf("; a standalone relay (no cluster) with %d of the same joiners: %.0f KiB per executor", joined/clusterRelays, base)
	}
	b.add(Result{Metric: metric, Target: joinTarget, Runs: joined, WallS: f64(wall.Seconds()), RSSPerExecutorKiB: f64(float64(sum) / float64(joined)), Notes: notes})

	b.restartStorm(c, joiners, st, stormTarget)
}

// cpuSeconds is the user+system CPU time a process has used (0 when it
// cannot be read).
func cpuSeconds(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command name, which is in parentheses.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}

func summarizeErrs(st *joinStats) string {
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.errs) == 0 {
		return "none"
	}
	return summarize(st.errs)
}

// restartStorm SIGKILLs relay 0, starts it again on its port, and times
// the rejoin of all its joiners, sampling the presence writes on its
// /metrics and the writes on etcd's.
func (b *bench) restartStorm(c *clusterEnv, joiners []*joiner, st *joinStats, target string) {
	const metric = "cluster_scale"
	const victim = 0
	n0 := int(st.joined[victim].Load())
	if n0 == 0 {
		b.skip(metric, target, "no joiner on the relay to restart")
		return
	}
	st.mu.Lock()
	clear(st.errs)
	st.mu.Unlock()
	ectx, ecancel := context.WithTimeout(context.Background(), 10*time.Second)
	etcdBefore, eerr := c.etcd.Metrics(ectx)
	ecancel()
	tKill := time.Now()
	if err := c.kill(victim); err != nil {
		b.skip(metric, target, err.Error())
		return
	}
	// Every joiner of the dead relay notices (its connection is reset).
	for st.joined[victim].Load() > 0 && time.Since(tKill) < 30*time.Second {
		time.Sleep(5 * time.Millisecond)
	}
	tRestart := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	r := c.relays[victim]
	s, err := peers.StartClusterRelay(ctx, b.bin, r.cfg)
	cancel()
	if err != nil {
		b.skip(metric, target, "restart: "+err.Error())
		return
	}
	r.srv = s
	tUp := time.Now()
	readyAt := make(chan time.Time, 1)
	go func() {
		rctx, rcancel := context.WithTimeout(context.Background(), time.Minute)
		defer rcancel()
		if peers.WaitReady(rctx, r.cfg.Admin()) == nil {
			readyAt <- time.Now()
		}
		close(readyAt)
	}()
	// The relay's /metrics, scraped on its own goroutine (a busy relay
	// may take seconds to answer), and every 100 ms the joiners' count
	// and the CPU time of the relay, etcd and this process.
	type scrape struct {
		at                       time.Duration
		writes, txns             float64
		executorsGauge, attached float64
	}
	type sample struct {
		at                  time.Duration
		joined              int64
		relayCPU, etcdCPU   float64
		selfCPU             float64
		executorsGauge      float64 // the last scrape's
		attached, scrapedAt float64
	}
	var smu sync.Mutex
	var scrapes []scrape
	stopScrape := make(chan struct{})
	scraped := make(chan struct{})
	go func() {
		defer close(scraped)
		for {
			sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
			m, err := c.metrics(sctx, victim)
			scancel()
			if err == nil {
				smu.Lock()
				scrapes = append(scrapes, scrape{at: time.Since(tRestart), writes: m["outpost_relay_presence_writes_total"], txns: m["outpost_relay_presence_txns_total"],
					executorsGauge: m["outpost_relay_executors"], attached: m["outpost_relay_cluster_attached"]})
				smu.Unlock()
			}
			select {
			case <-stopScrape:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	lastScrape := func() (scrape, bool) {
		smu.Lock()
		defer smu.Unlock()
		if len(scrapes) == 0 {
			return scrape{}, false
		}
		return scrapes[len(scrapes)-1], true
	}
	relayPid, etcdPid, selfPid := s.Pid(), c.etcd.Pid(), os.Getpid()
	cpu0 := [3]float64{cpuSeconds(relayPid), cpuSeconds(etcdPid), cpuSeconds(selfPid)}
	var samples []sample
	var tAll time.Time
	for time.Since(tRestart) < 3*time.Minute {
		sm := sample{at: time.Since(tRestart), joined: st.joined[victim].Load(),
			relayCPU: cpuSeconds(relayPid) - cpu0[0], etcdCPU: cpuSeconds(etcdPid) - cpu0[1], selfCPU: cpuSeconds(selfPid) - cpu0[2]}
		if sc, ok := lastScrape(); ok {
			sm.executorsGauge, sm.attached, sm.scrapedAt = sc.executorsGauge, sc.attached, sc.at.Seconds()
		}
		samples = append(samples, sm)
		if int(sm.joined) >= n0 {
			tAll = time.Now()
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The presence writer lags the joins: wait until its counter has not
	// moved for a second (at most 30 s more).
	stable, lastW := time.Now(), -1.0
	for time.Since(stable) < time.Second && time.Since(tRestart) < 3*time.Minute+30*time.Second {
		time.Sleep(100 * time.Millisecond)
		if sc, ok := lastScrape(); ok && sc.writes+sc.txns != lastW {
			lastW, stable = sc.writes+sc.txns, time.Now()
		}
	}
	close(stopScrape)
	<-scraped
	ectx, ecancel = context.WithTimeout(context.Background(), 10*time.Second)
	etcdAfter, eerr2 := c.etcd.Metrics(ectx)
	ecancel()
	if len(scrapes) == 0 {
		scrapes = append(scrapes, scrape{})
	}
	lastSc := scrapes[len(scrapes)-1]
	lastS := struct {
		at           time.Duration
		writes, txns float64
		joined       int64
	}{lastSc.at, lastSc.writes, lastSc.txns, st.joined[victim].Load()}
	// The storm's window: from the restart to the last presence write.
	end := lastS.at
	for i := len(scrapes) - 1; i > 0; i-- {
		if scrapes[i].writes != scrapes[i-1].writes || scrapes[i].txns != scrapes[i-1].txns {
			end = scrapes[i].at
			break
		}
	}
	rejoined := int(lastS.joined)
	res := Result{Metric: metric, Target: target, Runs: n0}
	var parts []string
	if tAll.IsZero() {
		parts = append(parts, fmt.Sprintf("only %d of %d rejoined within 3 min (errors: %s)", rejoined, n0, summarizeErrs(st)))
	} else {
		res.WallS = f64(tAll.Sub(tRestart).Seconds())
		parts = append(parts, fmt.Sprintf("relay %s SIGKILLed with %d joiners, started again on its port %.2f s after (its URL printed %.2f s after that); all %d rejoined %.2f s after the restart, %.2f s after the kill",
			r.cfg.ID, n0, tRestart.Sub(tKill).Seconds(), tUp.Sub(tRestart).Seconds(), n0, tAll.Sub(tRestart).Seconds(), tAll.Sub(tKill).Seconds()))
		if tr, ok := <-readyAt; ok {
			parts = append(parts, fmt.Sprintf("its /readyz answered 200 (etcd lease taken) %.2f s after the restart", tr.Sub(tRestart).Seconds()))
		}
		// A timeline, every half second: joined by the joiners' count and
		// by the relay's gauge (its last answered scrape, and when), and
		// the CPU the relay, etcd and this process (the joiners) used
		// since the sample before, in cores.
		var tl []string
		var prev sample
		for i, sm := range samples {
			if i > 0 && sm.at < prev.at+500*time.Millisecond && i != len(samples)-1 {
				continue
			}
			dt := (sm.at - prev.at).Seconds()
			if i == 0 || dt <= 0 {
				dt = 1
			}
			att := ""
			if sm.attached > 0 {
				att = " attached"
			}
			tl = append(tl, fmt.Sprintf("%.1f s: %d joined, gauge %.0f%s (scraped %.1f s); CPU relay %.1f etcd %.1f joiners %.1f",
				sm.at.Seconds(), sm.joined, sm.executorsGauge, att, sm.scrapedAt, (sm.relayCPU-prev.relayCPU)/dt, (sm.etcdCPU-prev.etcdCPU)/dt, (sm.selfCPU-prev.selfCPU)/dt))
			prev = sm
		}
		parts = append(parts, "timeline from the restart: "+strings.Join(tl, " | "))
		// When each rejoined, and how many failed attempts it took.
		var at []time.Duration
		var attempts, maxAttempts int64
		for _, j := range joiners {
			if j.group == victim {
				at = append(at, time.Unix(0, j.joinedAt.Load()).Sub(tRestart))
				a := j.attempts.Load()
				attempts += a
				maxAttempts = max(maxAttempts, a)
			}
		}
		sort.Slice(at, func(i, k int) bool { return at[i] < at[k] })
		q := func(f float64) float64 { return at[int(f*float64(len(at)-1))].Seconds() }
		parts = append(parts, fmt.Sprintf("rejoined after the restart: half by %.2f s, 90%% by %.2f s, 99%% by %.2f s; %.1f failed attempts each on average (at most %d)",
			q(0.5), q(0.9), q(0.99), float64(attempts)/float64(len(at)), maxAttempts))
	}
	// The writing phase: from the last scrape that had seen less than 1%
	// of the writes (the relay writes nothing before it holds a lease,
	// and a busy relay may not answer a scrape for seconds) to the last
	// write.
	var from time.Duration
	for _, sc := range scrapes {
		if sc.writes >= lastS.writes/100 && sc.writes > 0 {
			break
		}
		from = sc.at
	}
	active := (end - from).Seconds()
	if secs := end.Seconds(); secs > 0 && active > 0 && lastS.writes > 0 {
		res.WritesPerS = f64(lastS.writes / active)
		peak := 0.0
		for i := 1; i < len(scrapes); i++ {
			if dt := (scrapes[i].at - scrapes[i-1].at).Seconds(); dt > 0 {
				peak = max(peak, (scrapes[i].writes-scrapes[i-1].writes)/dt)
			}
		}
		p := fmt.Sprintf("relay /metrics: %.0f presence writes, all between %.2f and %.2f s after the restart (%.0f/s over those %.2f s, the writes/s column; %.0f/s over the whole storm; peak %.0f/s over ~0.1 s)",
			lastS.writes, from.Seconds(), end.Seconds(), lastS.writes/active, active, lastS.writes/secs, peak)
		if lastS.txns > 0 {
			res.TxnsPerS = f64(lastS.txns / active)
			p += fmt.Sprintf(" in %.0f transactions (%.1f writes each)", lastS.txns, lastS.writes/lastS.txns)
		}
		parts = append(parts, p)
	}
	if eerr == nil && eerr2 == nil {
		window := (tRestart.Sub(tKill) + end).Seconds()
		delta := func(name string) float64 { return etcdAfter[name] - etcdBefore[name] }
		txn, put, del, prop := delta("etcd_mvcc_txn_total"), delta("etcd_mvcc_put_total"), delta("etcd_mvcc_delete_total"), delta("etcd_server_proposals_committed_total")
		parts = append(parts, fmt.Sprintf("etcd /metrics from the kill to the last write (%.1f s): %.0f txns, %.0f puts, %.0f deletes, %.0f raft proposals committed",
			window, txn, put, del, prop))
		if res.TxnsPerS == nil && active > 0 {
			// The relay does not export its presence transactions:
			// etcd's count, over the writing phase.
			res.TxnsPerS = f64(txn / active)
			parts = append(parts, fmt.Sprintf("txns/s column: etcd's %.0f txns over the writing phase", txn))
		}
	} else {
		parts = append(parts, fmt.Sprintf("etcd /metrics unreadable: %v %v", eerr, eerr2))
	}
	if res.WallS == nil {
		res.Errors = intp(n0 - rejoined)
	}
	parts = append(parts, "joiners' failed attempts meanwhile: "+summarizeErrs(st))
	res.Notes = strings.Join(parts, "; ")
	b.add(res)
}
