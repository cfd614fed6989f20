package executor

// Floods through a relay. Every stream a joined relay splices to the
// executor takes the native listener's path (responder): the admission
// gate, the first-byte and handshake timeouts. Each relay session is one
// address: idle streams cannot hold slots — the executor's or, through
// it, the relay's per-executor stream limit — against a real client, and
// failing handshakes are counted but never lock the session out.

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/outpost-exec/outpost/identity"
	"github.com/outpost-exec/outpost/relay"
	"github.com/outpost-exec/outpost/relay/relayclient"
)

type relayedFixture struct {
	*floodFixture // the executor's key and metrics, for connect and the counters
	relay         *relay.Server
	url           string
	clientToken   string
}

// startRelayedExecutor runs a relay and an executor joined to it as "x".
func startRelayedExecutor(t *testing.T, tuneRelay func(*relay.Config), tune func(*JoinConfig)) *relayedFixture {
	t.Helper()
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	store, err := relay.OpenStore(filepath.Join(t.TempDir(), "relay.db"))
	if err != nil {
		t.Fatal(err)
	}
	relayKey := floodKey(t)
	rcfg := relay.Config{Key: relayKey, Tokens: store, Logger: log}
	if tuneRelay != nil {
		tuneRelay(&rcfg)
	}
	rs, err := relay.NewServer(rcfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := rs.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var pub identity.PublicKey
	copy(pub[:], relayKey.Public)
	r := &relayedFixture{relay: rs, url: "outpost://" + ln.Addr().String() + "#" + pub.Fingerprint()}
	joinToken, _, err := store.Create(relay.TokenJoin, relay.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r.clientToken, _, err = store.Create(relay.TokenClient, relay.CreateOptions{Executors: "*"}); err != nil {
		t.Fatal(err)
	}

	f := &floodFixture{key: floodKey(t), metrics: NewMetrics(prometheus.NewRegistry())}
	cfg := DefaultConfig()
	cfg.Logger = log
	cfg.DefaultCwd = t.TempDir()
	cfg.Metrics = f.metrics
	if f.srv, err = NewServer(cfg); err != nil {
		t.Fatal(err)
	}
	r.floodFixture = f
	joined := make(chan struct{}, 8)
	joinCfg := JoinConfig{RelayURL: r.url, Key: f.key, ID: "x", Token: joinToken, Joined: func() { joined <- struct{}{} }}
	if tune != nil {
		tune(&joinCfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.srv.Join(ctx, joinCfg) }()
	t.Cleanup(func() {
		cancel()
		<-done
		sctx, scancel := context.WithTimeout(context.Background(), testTimeout)
		defer scancel()
		f.srv.Shutdown(sctx)
	})
	select {
	case <-joined:
	case err := <-done:
		t.Fatalf("join ended: %v", err)
	case <-time.After(testTimeout):
		t.Fatal("the executor did not join")
	}
	return r
}

// splicedConn is the client's end of a stream the relay spliced to the
// executor; closing it closes its relay connection.
type splicedConn struct {
	net.Conn
	rc *relayclient.Conn
}

func (c *splicedConn) Close() error { c.Conn.Close(); return c.rc.Close() }

// splice asks the relay for a stream to the executor, as a client does
// before its own handshake.
func (r *relayedFixture) splice(t *testing.T) (net.Conn, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	rc, err := relayclient.Dial(ctx, r.url, floodKey(t), relayclient.Options{})
	if err != nil {
		return nil, err
	}
	st, _, err := rc.Connect(ctx, "x", r.clientToken)
	if err != nil {
		rc.Close()
		return nil, err
	}
	c := &splicedConn{Conn: st, rc: rc}
	t.Cleanup(func() { c.Close() })
	return c, nil
}

// realClient connects through the relay, handshakes and initializes
// within a second, and runs a command.
func (r *relayedFixture) realClient(t *testing.T, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	st, err := r.splice(t)
	if err != nil {
		t.Fatalf("real client behind %s: relay/connect: %v", what, err)
	}
	hctx, hcancel := context.WithTimeout(ctx, time.Second)
	fc, err := r.connect(hctx, st, floodKey(t))
	hcancel()
	if err != nil {
		t.Fatalf("real client behind %s: %v", what, err)
	}
	defer fc.sess.Close()
	if out, err := fc.run(ctx, "/bin/echo", "through the relay"); err != nil || out != "through the relay\n" {
		t.Fatalf("real client behind %s: command: %q, %v", what, out, err)
	}
}

// streamClosedSoon is closedSoon for the client's end of a spliced
// stream, whose read deadline is yamux's (not os.ErrDeadlineExceeded).
func streamClosedSoon(t *testing.T, c net.Conn, d time.Duration) bool {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	defer c.SetReadDeadline(time.Time{})
	var b [1]byte
	n, err := c.Read(b[:])
	switch {
	case n > 0:
		t.Fatalf("the executor sent %q before any handshake", b[:n])
	case isTimeout(err):
		return false
	}
	return true
}

func (r *relayedFixture) pendingGauge() float64 {
	return testutil.ToFloat64(r.metrics.pendingHandshakes)
}

// Idle streams through the relay: before the shared responder, each held
// a goroutine on the executor, and a slot of the relay's per-executor
// stream limit, for the whole handshake timeout; a token holder could
// fill the limit and keep every client out. Now the relay session is held
// to MaxHandshakesPerAddress pending streams, the oldest idle ones are
// closed as new ones come (the relay then frees their slots), and a real
// client gets through at once.
func TestRelayedIdleFloodCannotKeepARealClientOut(t *testing.T) {
	const streamLimit = 24 // the relay's, per executor: the flood exceeds it
	perSession := DefaultMaxHandshakesPerAddress
	r := startRelayedExecutor(t,
		func(c *relay.Config) { c.MaxStreamsPerExecutor = streamLimit },
		func(o *JoinConfig) { o.FirstByteTimeout = 30 * time.Second }) // survivors stay open while checked
	const flood = 3 * streamLimit
	idle := make([]net.Conn, flood)
	for i := range idle {
		c, err := r.splice(t)
		if err != nil {
			t.Fatalf("idle stream %d of %d: %v", i, flood, err)
		}
		idle[i] = c
		if got := r.pendingGauge(); got > float64(perSession) {
			t.Fatalf("%v handshakes pending from one relay session, the bound is %d", got, perSession)
		}
	}
	waitFor(t, "the flood's evictions", func() bool { return r.refused(refusedEvicted) == float64(flood-perSession) })
	waitFor(t, "the relay to free the evicted streams", func() bool { return r.relay.Stats().SplicedStreams == perSession })

	r.realClient(t, "an idle flood")

	// The oldest idle streams were closed; the newest, less the one the
	// client's took, are still open.
	survivors := perSession - 1
	for i, c := range idle[:flood-survivors] {
		if !streamClosedSoon(t, c, 2*time.Second) {
			t.Fatalf("idle stream %d of %d still open past the per-session bound", i, flood)
		}
	}
	for i, c := range idle[flood-survivors:] {
		if streamClosedSoon(t, c, 20*time.Millisecond) {
			t.Fatalf("idle stream %d (within the bound) was closed", flood-survivors+i)
		}
	}
	if got := r.failures(failSilent) + r.failures(failError); got != 0 {
		t.Fatalf("%v failures counted for idle streams; evictions must not count", got)
	}
}

// Junk, and handshakes for a wrong executor key (a client with a stale
// pin), far past MaxFailedHandshakes: each is counted, none is held
// against the relay session, which every relayed client shares.
func TestRelayedFailedHandshakesNeverLockTheSessionOut(t *testing.T) {
	r := startRelayedExecutor(t, nil, nil)
	const junk, stale = DefaultMaxFailedHandshakes, DefaultMaxFailedHandshakes
	for i := range junk {
		c, err := r.splice(t)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte("GET / HTTP/1.1\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		if !streamClosedSoon(t, c, 5*time.Second) {
			t.Fatalf("junk stream %d was not closed", i)
		}
	}
	wrong := &floodFixture{key: floodKey(t)}
	for i := range stale {
		c, err := r.splice(t)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if _, err := wrong.connect(ctx, c, floodKey(t)); err == nil {
			t.Fatalf("handshake %d for a wrong executor key succeeded", i)
		}
		cancel()
	}
	waitFor(t, "the failures to be counted", func() bool { return r.failures(failError) == junk+stale })
	r.realClient(t, "failed handshakes")
}

// The native listener's timeouts hold for relayed streams too: silence
// past FirstByteTimeout, and a handshake unfinished HandshakeTimeout after
// the relay spliced the stream.
func TestRelayedStreamsHaveTheNativeHandshakeTimeouts(t *testing.T) {
	const firstByte, handshake = 300 * time.Millisecond, 900 * time.Millisecond
	r := startRelayedExecutor(t, nil, func(o *JoinConfig) { o.FirstByteTimeout, o.HandshakeTimeout = firstByte, handshake })

	start := time.Now()
	silent, err := r.splice(t)
	if err != nil {
		t.Fatal(err)
	}
	if !streamClosedSoon(t, silent, 5*time.Second) {
		t.Fatal("a silent stream outlived FirstByteTimeout")
	}
	if took := time.Since(start); took < firstByte-50*time.Millisecond || took > handshake {
		t.Fatalf("silent stream closed after %v, want about %v", took, firstByte)
	}

	start = time.Now()
	stalled, err := r.splice(t)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stalled.Write([]byte{'O'}); err != nil { // a preamble's first byte, then nothing
		t.Fatal(err)
	}
	if !streamClosedSoon(t, stalled, 5*time.Second) {
		t.Fatal("a stalled handshake outlived HandshakeTimeout")
	}
	if took := time.Since(start); took < handshake-50*time.Millisecond {
		t.Fatalf("stalled stream closed after %v, want about %v", took, handshake)
	}
	waitFor(t, "the failures to be counted", func() bool { return r.failures(failSilent) == 1 && r.failures(failTimeout) == 1 })
	r.realClient(t, "timed-out streams")
}
