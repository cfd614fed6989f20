package executor

// Unauthenticated floods against the native listener, over real sockets
// and real Noise: idle connections must not keep a real client out, from
// another address or its own; failing addresses are refused for the rest
// of their window; the per-address and listener bounds hold.

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flynn/noise"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/outpost-exec/outpost/internal/admission"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/transport"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type floodFixture struct {
	srv     *Server
	ln      *NativeListener
	key     noise.DHKey
	metrics *Metrics
	clock   *fakeClock
	network string
	addr    string
}

func floodKey(t *testing.T) noise.DHKey {
	t.Helper()
	k, err := transport.NoiseSuite.GenerateKeypair(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// startFloodListener serves the native transport on url with a fake
// clock for the gate; tweak adjusts the listener's configuration.
func startFloodListener(t *testing.T, url string, tweak func(*NativeConfig)) *floodFixture {
	t.Helper()
	f := &floodFixture{key: floodKey(t), clock: newFakeClock(), metrics: NewMetrics(prometheus.NewRegistry())}
	cfg := DefaultConfig()
	cfg.Logger = zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	cfg.DefaultCwd = t.TempDir()
	cfg.Metrics = f.metrics
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	nativeCfg := NativeConfig{Key: f.key, now: f.clock.now}
	if tweak != nil {
		tweak(&nativeCfg)
	}
	ln, err := srv.ListenNative(url, nativeCfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ln.Close()
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		srv.Shutdown(ctx)
	})
	f.srv, f.ln = srv, ln
	f.network, f.addr, _ = ParseNativeURL(ln.URL())
	return f
}

// dialFrom opens a raw connection, from source IP from when it is set.
func (f *floodFixture) dialFrom(t *testing.T, from string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second}
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	c, err := d.Dial(f.network, f.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// floodClient is a real client: Noise IK, the multiplexer, the control stream.
type floodClient struct {
	sess *transport.MuxSession
	mc   *transport.MsgpackConn
	id   int64
}

// connect runs the handshake and initialize on c.
func (f *floodFixture) connect(ctx context.Context, c net.Conn, clientKey noise.DHKey) (*floodClient, error) {
	nc, err := transport.NoiseInitiator(ctx, c, transport.NoiseConfig{Static: clientKey, Purpose: NativePurpose, PeerStatic: f.key.Public})
	if err != nil {
		return nil, err
	}
	sess, err := transport.MuxClient(nc, transport.DefaultMuxConfig())
	if err != nil {
		return nil, err
	}
	st, err := sess.OpenStream()
	if err != nil {
		sess.Close()
		return nil, err
	}
	fc := &floodClient{sess: sess, mc: transport.NewMsgpackConn(st, 0)}
	var init protocol.InitializeResult
	if err := fc.call(ctx, protocol.MethodInitialize, protocol.InitializeParams{ClientName: "flood-test"}, &init); err != nil {
		sess.Close()
		return nil, err
	}
	if init.SessionID == "" {
		sess.Close()
		return nil, errors.New("initialize returned no session id")
	}
	if err := fc.mc.WriteNotification(ctx, protocol.MethodInitialized, protocol.Empty{}); err != nil {
		sess.Close()
		return nil, err
	}
	return fc, nil
}

func (fc *floodClient) call(ctx context.Context, method string, params, result any) error {
	fc.id++
	m, err := fc.mc.Call(ctx, transport.IntID(fc.id), method, params)
	if err != nil {
		return err
	}
	if m.Error != nil {
		return fmt.Errorf("%s: %w", method, m.Error)
	}
	return m.Result.Decode(result)
}

// run runs argv and returns its stdout once it has exited.
func (fc *floodClient) run(ctx context.Context, argv ...string) (string, error) {
	var started protocol.StartResult
	if err := fc.call(ctx, protocol.MethodProcessStart, protocol.ExecParams{ProcessID: "p1", Argv: argv}, &started); err != nil {
		return "", err
	}
	var out strings.Builder
	var after uint64
	wait := uint64(1000)
	for ctx.Err() == nil {
		var res protocol.ReadResult
		if err := fc.call(ctx, protocol.MethodProcessRead, protocol.ReadParams{ProcessID: "p1", AfterSeq: &after, WaitMs: &wait}, &res); err != nil {
			return "", err
		}
		for _, c := range res.Chunks {
			out.Write(c.Chunk)
		}
		if res.NextSeq > 0 {
			after = res.NextSeq - 1
		}
		if res.Closed {
			return out.String(), nil
		}
	}
	return "", ctx.Err()
}

// closedSoon reports whether the server closes c within d (reading
// nothing); false if c is still open then.
func closedSoon(t *testing.T, c net.Conn, d time.Duration) bool {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	defer c.SetReadDeadline(time.Time{})
	var b [1]byte
	n, err := c.Read(b[:])
	switch {
	case n > 0:
		t.Fatalf("the server sent %q before any handshake", b[:n])
	case errors.Is(err, os.ErrDeadlineExceeded):
		return false
	}
	return true
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (f *floodFixture) refused(reason string) float64 {
	return testutil.ToFloat64(f.metrics.refusedConns.WithLabelValues(reason))
}

func (f *floodFixture) failures(reason string) float64 {
	return testutil.ToFloat64(f.metrics.failedHandshakes.WithLabelValues(reason))
}

func (f *floodFixture) pending() int {
	f.ln.gate.mu.Lock()
	defer f.ln.gate.mu.Unlock()
	return f.ln.gate.pending
}

// handshaking counts the pending connections that have sent a byte.
func (f *floodFixture) handshaking() int {
	f.ln.gate.mu.Lock()
	defer f.ln.gate.mu.Unlock()
	n := 0
	for _, conns := range f.ln.gate.addrs {
		for _, c := range conns {
			if c.state == stateHandshaking {
				n++
			}
		}
	}
	return n
}

// The reported attack: 200 connections that never send a byte, then a
// real client. It must get in, handshake and initialize within a second,
// and run a command — whether the flood comes from another address or
// from its own (on loopback, where it must evict the flood's oldest idle
// connections rather than be refused). Every idle connection past the
// per-address bound is closed at once, the rest only at FirstByteTimeout.
func TestNativeListenerLetsARealClientThroughAnIdleFlood(t *testing.T) {
	for _, tc := range []struct{ name, floodFrom string }{
		{"flood from another address", "127.0.0.2"},
		{"flood from the client's own address", "127.0.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Defaults but the first-byte timeout, long enough that the
			// survivors are still open when they are checked.
			f := startFloodListener(t, "tcp://127.0.0.1:0", func(o *NativeConfig) { o.FirstByteTimeout = 30 * time.Second })
			const flood = 200
			idle := make([]net.Conn, flood)
			for i := range idle {
				idle[i] = f.dialFrom(t, tc.floodFrom)
			}
			perAddr := DefaultMaxHandshakesPerAddress
			waitFor(t, "the flood to be accepted", func() bool { return f.refused(refusedEvicted) == flood-float64(perAddr) })

			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			start := time.Now()
			hctx, hcancel := context.WithTimeout(ctx, time.Second)
			fc, err := f.connect(hctx, f.dialFrom(t, "127.0.0.1"), floodKey(t))
			hcancel()
			if err != nil {
				t.Fatalf("real client behind %d idle connections: %v", flood, err)
			}
			defer fc.sess.Close()
			if took := time.Since(start); took > time.Second {
				t.Fatalf("handshake and initialize took %v behind the flood", took)
			}
			out, err := fc.run(ctx, "/bin/echo", "through the flood")
			if err != nil || out != "through the flood\n" {
				t.Fatalf("command: %q, %v", out, err)
			}

			// The per-address bound held: the oldest idle connections
			// were closed at once; the newest (less the one the client
			// took, when it shares their address) are still open.
			survivors := perAddr
			if tc.floodFrom == "127.0.0.1" {
				survivors--
			}
			for i, c := range idle[:flood-survivors] {
				if !closedSoon(t, c, 2*time.Second) {
					t.Fatalf("idle connection %d of %d still open past the per-address bound", i, flood)
				}
			}
			for i, c := range idle[flood-survivors:] {
				if closedSoon(t, c, 20*time.Millisecond) {
					t.Fatalf("idle connection %d (within the bound) was closed", flood-survivors+i)
				}
			}
			if got := f.failures(failSilent) + f.failures(failError); got != 0 {
				t.Fatalf("%v failures counted for idle connections; evictions must not count", got)
			}
			if f.ln.BlockedAddresses() != 0 {
				t.Fatal("an idle flood got an address blocked")
			}
		})
	}
}

// The same over a Unix socket, where the peer's uid is the address.
func TestNativeUnixListenerLetsARealClientThroughAnIdleFlood(t *testing.T) {
	dir, err := os.MkdirTemp("", "opflood")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	f := startFloodListener(t, "unix://"+filepath.Join(dir, "s.sock"), nil)
	const flood = 200
	for range flood {
		f.dialFrom(t, "")
	}
	waitFor(t, "the flood to be accepted", func() bool { return f.refused(refusedEvicted) == flood-DefaultMaxHandshakesPerAddress })
	f.ln.gate.mu.Lock()
	_, byUID := f.ln.gate.addrs[fmt.Sprintf("uid:%d", os.Getuid())]
	f.ln.gate.mu.Unlock()
	if !byUID {
		t.Fatal("unix peers are not counted by uid")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	fc, err := f.connect(ctx, f.dialFrom(t, ""), floodKey(t))
	if err != nil {
		t.Fatalf("real client behind %d idle unix connections: %v", flood, err)
	}
	fc.sess.Close()
}

// Failed handshakes — junk, and a key the allow-list refuses — count
// against the address; at the limit it is refused, even a real client
// with a good key, until its window ends; other addresses are unaffected.
func TestNativeListenerBlocksAnAddressForTheRestOfItsWindow(t *testing.T) {
	good := floodKey(t)
	f := startFloodListener(t, "tcp://127.0.0.1:0", func(o *NativeConfig) {
		o.MaxFailedHandshakes = 3
		o.FailureWindow = time.Minute
		o.Authorize = func(k []byte) error {
			if string(k) != string(good.Public) {
				return errors.New("not on the list")
			}
			return nil
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	junk := func() {
		c := f.dialFrom(t, "127.0.0.1")
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		if !closedSoon(t, c, 5*time.Second) {
			t.Fatal("junk was not hung up on")
		}
	}
	junk()
	junk()
	if _, err := f.connect(ctx, f.dialFrom(t, "127.0.0.1"), floodKey(t)); !errors.Is(err, transport.ErrHandshakeRefused) {
		t.Fatalf("unauthorised key: %v, want ErrHandshakeRefused", err)
	}
	waitFor(t, "the refusal to be counted", func() bool { return f.failures(failUnauthorized) == 1 })
	if got := f.failures(failError); got != 2 {
		t.Fatalf("junk failures %v, want 2", got)
	}
	if f.ln.BlockedAddresses() != 1 || f.metrics.blockedAddresses() != 1 || testutil.ToFloat64(f.metrics.addressBlocks) != 1 {
		t.Fatalf("blocked addresses %d (gauge %v, blocks counted %v), want 1",
			f.ln.BlockedAddresses(), f.metrics.blockedAddresses(), testutil.ToFloat64(f.metrics.addressBlocks))
	}

	// Blocked: closed at accept, before a byte is read (the client sees
	// its handshake refused, or its write fail).
	if !closedSoon(t, f.dialFrom(t, "127.0.0.1"), 2*time.Second) {
		t.Fatal("a connection from a blocked address was kept")
	}
	if _, err := f.connect(ctx, f.dialFrom(t, "127.0.0.1"), good); err == nil {
		t.Fatal("a good key got in from a blocked address")
	}
	if got := f.refused(refusedBlocked); got != 2 {
		t.Fatalf("refused as blocked %v, want 2", got)
	}
	// Another address is served meanwhile.
	fc, err := f.connect(ctx, f.dialFrom(t, "127.0.0.3"), good)
	if err != nil {
		t.Fatalf("another address during the block: %v", err)
	}
	fc.sess.Close()

	// Still blocked just before the window ends (which refusals do not
	// extend); served once it has.
	f.clock.advance(time.Minute - time.Second)
	if _, err := f.connect(ctx, f.dialFrom(t, "127.0.0.1"), good); err == nil {
		t.Fatal("a good key got in from a blocked address before the window ended")
	}
	f.clock.advance(time.Second)
	if f.ln.BlockedAddresses() != 0 || f.metrics.blockedAddresses() != 0 {
		t.Fatal("the block outlived its window")
	}
	fc, err = f.connect(ctx, f.dialFrom(t, "127.0.0.1"), good)
	if err != nil {
		t.Fatalf("after the window: %v", err)
	}
	fc.sess.Close()
}

// A connection silent past FirstByteTimeout, and one that sends a byte
// and stalls past HandshakeTimeout, are closed then and count as
// failures; enough of them block the address.
func TestNativeListenerTimesOutSilentAndStalledConnections(t *testing.T) {
	f := startFloodListener(t, "tcp://127.0.0.1:0", func(o *NativeConfig) {
		o.FirstByteTimeout = 150 * time.Millisecond
		o.HandshakeTimeout = time.Second
		o.MaxFailedHandshakes = 2
	})
	silent := f.dialFrom(t, "127.0.0.1")
	stalled := f.dialFrom(t, "127.0.0.1")
	stalled.Write([]byte{'O'})
	start := time.Now()
	if !closedSoon(t, silent, 5*time.Second) {
		t.Fatal("silent connection not closed")
	}
	if took := time.Since(start); took > 900*time.Millisecond {
		t.Fatalf("silent connection closed after %v, want about FirstByteTimeout", took)
	}
	if closedSoon(t, stalled, 300*time.Millisecond) {
		t.Fatalf("a connection that sent a byte was closed at FirstByteTimeout (after %v)", time.Since(start))
	}
	if !closedSoon(t, stalled, 5*time.Second) {
		t.Fatal("stalled handshake not closed")
	}
	if took := time.Since(start); took < 800*time.Millisecond {
		t.Fatalf("stalled handshake closed after %v, before HandshakeTimeout", took)
	}
	waitFor(t, "both failures to be counted", func() bool { return f.failures(failSilent) == 1 && f.failures(failTimeout) == 1 })
	if f.ln.BlockedAddresses() != 1 {
		t.Fatal("silent and stalled connections did not count toward a block")
	}
	if f.pending() != 0 {
		t.Fatalf("%d connections still pending", f.pending())
	}
}

// The per-address bound: a connection past it takes the slot of its
// address's oldest idle connection, else of its oldest handshaking one
// (a failure only when that one had been handshaking for over
// staleHandshake). The listener bound: a connection from another address
// takes a slot from the address holding the most, the oldest victim first
// among equals.
func TestNativeListenerBoundsPendingConnectionsPerAddressAndInAll(t *testing.T) {
	f := startFloodListener(t, "tcp://127.0.0.1:0", func(o *NativeConfig) {
		o.MaxHandshakesPerAddress = 3
		o.MaxHandshakes = 5
		o.FirstByteTimeout = 30 * time.Second
		o.HandshakeTimeout = 30 * time.Second
	})
	trickle := func(from string) net.Conn {
		c := f.dialFrom(t, from)
		c.Write([]byte{'O'})
		return c
	}
	open := func(conns ...net.Conn) {
		t.Helper()
		for i, c := range conns {
			if closedSoon(t, c, 10*time.Millisecond) {
				t.Fatalf("connection %d was closed", i)
			}
		}
	}
	// Three trickling handshakes from .1 fill its share; a fourth takes
	// the oldest one's slot, which was fresh: no failure.
	s := []net.Conn{trickle("127.0.0.1"), trickle("127.0.0.1"), trickle("127.0.0.1")}
	waitFor(t, "three handshaking", func() bool { return f.handshaking() == 3 })
	s = append(s, trickle("127.0.0.1"))
	if !closedSoon(t, s[0], 2*time.Second) {
		t.Fatal("the oldest handshake of a full address was not evicted")
	}
	open(s[1:]...)
	waitFor(t, "three handshaking", func() bool { return f.handshaking() == 3 })
	if f.refused(refusedEvicted) != 1 || f.failures(failSlow) != 0 {
		t.Fatalf("evicted %v, slow %v; want 1 and 0", f.refused(refusedEvicted), f.failures(failSlow))
	}

	// Once they are stale, the next eviction counts as a failure.
	f.clock.advance(staleHandshake)
	idle := f.dialFrom(t, "127.0.0.1")
	if !closedSoon(t, s[1], 2*time.Second) {
		t.Fatal("the oldest stale handshake was not evicted")
	}
	open(idle, s[2], s[3])
	if f.failures(failSlow) != 1 {
		t.Fatalf("slow failures %v, want 1", f.failures(failSlow))
	}

	// .2 brings two idle connections: the listener is full (3 + 2).
	a := f.dialFrom(t, "127.0.0.2")
	b := f.dialFrom(t, "127.0.0.2")
	waitFor(t, "the listener to fill", func() bool { return f.pending() == 5 })
	// A connection from .3 takes the slot of .1's idle one: .1 holds the
	// most (3), and idle connections go before handshaking ones.
	c3 := f.dialFrom(t, "127.0.0.3")
	if !closedSoon(t, idle, 2*time.Second) {
		t.Fatal("the fullest address's idle connection was not evicted")
	}
	// Now .1 (two stale handshakes) and .2 (two idle) hold two each: the
	// older of their victims, .1's handshake, goes.
	c4 := f.dialFrom(t, "127.0.0.4")
	if !closedSoon(t, s[2], 2*time.Second) {
		t.Fatal("the oldest victim of the fullest addresses was not evicted")
	}
	open(s[3], a, b, c3, c4)
	if f.failures(failSlow) != 2 {
		t.Fatalf("slow failures %v, want 2", f.failures(failSlow))
	}
	if f.pending() != 5 {
		t.Fatalf("%d pending, want the bound of 5", f.pending())
	}
}

// A trickle of one-byte connections from the client's own address (the
// hardening suite's slowloris) does not keep a real client out either.
func TestNativeListenerLetsARealClientThroughATrickleFromItsAddress(t *testing.T) {
	f := startFloodListener(t, "tcp://127.0.0.1:0", func(o *NativeConfig) { o.FirstByteTimeout = 30 * time.Second })
	for range 100 {
		c := f.dialFrom(t, "127.0.0.1")
		c.Write([]byte{'O'})
	}
	waitFor(t, "the trickle to be accepted", func() bool {
		return f.refused(refusedEvicted) == 100-DefaultMaxHandshakesPerAddress && f.handshaking() == DefaultMaxHandshakesPerAddress
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	fc, err := f.connect(ctx, f.dialFrom(t, "127.0.0.1"), floodKey(t))
	if err != nil {
		t.Fatalf("real client behind a trickle from its address: %v", err)
	}
	fc.sess.Close()
	if f.ln.BlockedAddresses() != 0 || f.failures(failSlow) != 0 {
		t.Fatal("evicting fresh handshakes counted as failures")
	}
}

// The failure table stays bounded: past its size, expired windows go
// first, then the oldest live one of an address not blocked (a blocked
// address is kept; internal/admission tests the rest of the order).
func TestHandshakeGateFailureTableIsBounded(t *testing.T) {
	clock := newFakeClock()
	cfg := NativeConfig{now: clock.now, MaxFailedHandshakes: 2}.withDefaults()
	g := newHandshakeGate(cfg, zap.NewNop(), nil)
	small, err := admission.New(admission.Config{MaxFailures: 2, Window: cfg.FailureWindow, MaxEntries: 3, Now: clock.now})
	if err != nil {
		t.Fatal(err)
	}
	g.failures = small
	g.failed("a", failError)
	g.failed("a", failError) // a is blocked
	clock.advance(time.Second)
	g.failed("b", failError)
	g.failed("c", failError)
	g.failed("d", failError) // full: b, the oldest not blocked, goes
	if st := g.failures.Stats(); st.Entries != 3 || st.Evictions != 1 || g.blockedCount() != 1 {
		t.Fatalf("table %+v, want 3 entries, 1 eviction, a still blocked", st)
	}
	if !g.failures.Blocked(admission.Opaque("a")) {
		t.Fatal("the blocked address was evicted while others were not blocked")
	}
	clock.advance(time.Minute)
	g.failed("e", failError) // a, c and d have expired
	if st := g.failures.Stats(); st.Entries != 1 || st.Blocked != 0 {
		t.Fatalf("table %+v after the others expired, want 1 entry, none blocked", st)
	}
}

// Sources are grouped: IPv4 by address, IPv6 by /64, mapped IPv4 as IPv4.
func TestAddressKeyGroupsIPv6By64(t *testing.T) {
	for _, tc := range []struct{ ip, want string }{
		{"192.0.2.7", "192.0.2.7"},
		{"::ffff:192.0.2.7", "192.0.2.7"},
		{"2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"},
		{"2001:db8:1:2:bbbb::9", "2001:db8:1:2::/64"},
		{"::1", "::/64"},
	} {
		c := fakeAddrConn{remote: &net.TCPAddr{IP: net.ParseIP(tc.ip), Port: 1}}
		if got := addressKey(c); got != tc.want {
			t.Errorf("addressKey(%s) = %s, want %s", tc.ip, got, tc.want)
		}
	}
}

type fakeAddrConn struct {
	net.Conn
	remote net.Addr
}

func (c fakeAddrConn) RemoteAddr() net.Addr { return c.remote }

// Zero fields take DefaultNativeConfig's values (MaxHandshakes from
// MaxConnections), and the handshake bound must leave room for
// connections past it.
func TestNativeConfigDefaultsAndChecks(t *testing.T) {
	key := floodKey(t)
	o := NativeConfig{Key: key}.withDefaults()
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if o.MaxHandshakes != DefaultMaxHandshakes || o.MaxHandshakesPerAddress != DefaultMaxHandshakesPerAddress ||
		o.FirstByteTimeout != DefaultFirstByteTimeout || o.MaxFailedHandshakes != DefaultMaxFailedHandshakes || o.FailureWindow != DefaultFailureWindow {
		t.Fatalf("defaults %+v", o)
	}
	if o := (NativeConfig{MaxConnections: 100}).withDefaults(); o.MaxHandshakes != 50 {
		t.Fatalf("MaxHandshakes %d with 100 connections, want 50", o.MaxHandshakes)
	}
	if err := (NativeConfig{Key: key, MaxConnections: 100, MaxHandshakes: 100}).withDefaults().Validate(); err == nil {
		t.Fatal("MaxHandshakes equal to MaxConnections accepted")
	}
	if o := (NativeConfig{HandshakeTimeout: time.Second, FirstByteTimeout: 5 * time.Second}).withDefaults(); o.FirstByteTimeout != time.Second {
		t.Fatalf("FirstByteTimeout %v above HandshakeTimeout", o.FirstByteTimeout)
	}
	if o := (NativeConfig{MaxHandshakes: 4}).withDefaults(); o.MaxHandshakesPerAddress != 4 {
		t.Fatalf("MaxHandshakesPerAddress %d above MaxHandshakes 4", o.MaxHandshakesPerAddress)
	}
}

// An authenticated client that opens no stream after its handshake is
// closed after the handshake timeout, so idle sessions cannot fill the
// listener's connections.
func TestNativeListenerClosesAnAuthenticatedConnectionThatOpensNoStream(t *testing.T) {
	f := startFloodListener(t, "tcp://127.0.0.1:0", func(o *NativeConfig) { o.HandshakeTimeout = 500 * time.Millisecond })
	c := f.dialFrom(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	nc, err := transport.NoiseInitiator(ctx, c, transport.NoiseConfig{Static: floodKey(t), Purpose: NativePurpose, PeerStatic: f.key.Public})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := transport.MuxClient(nc, transport.DefaultMuxConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	select {
	case <-sess.CloseChan():
	case <-time.After(5 * time.Second):
		t.Fatal("an idle authenticated connection was kept open")
	}
	// A client that opens its stream at once is served as before.
	fc, err := f.connect(ctx, f.dialFrom(t, ""), floodKey(t))
	if err != nil {
		t.Fatal(err)
	}
	defer fc.sess.Close()
	time.Sleep(700 * time.Millisecond) // past the timeout: an active session stays
	if fc.sess.IsClosed() {
		t.Fatal("a session that opened a stream was closed")
	}
}
