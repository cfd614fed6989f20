package executor

// The native transport: tcp:// or unix:// → Noise (the executor responds;
// IK for clients that pinned its key, XX for first contact) → mux; and
// the same inside each stream a joined relay splices to the executor. The
// client opens a control stream carrying msgpack RPC (the same method
// table as the WebSocket front); the executor opens one stream per
// followed process, starting with a process/events header and carrying
// that process's notifications in seq order, then closes it after
// process/closed.
//
// Both kinds of link take one path, the responder: its admission gate,
// the first byte, the Noise handshake (allow-list included), mux and the
// method table, under the same limits.
//
// Bounds: MaxConnections connections per listener (per relay session for
// relayed links); of them at most MaxHandshakes, and
// MaxHandshakesPerAddress from one source address, before the end of
// their handshake (see handshakeGate: a new connection never waits for a
// slot, it takes the oldest one, idle ones first); at most
// maxFailureEntries addresses in the failure table behind
// MaxFailedHandshakes (internal/admission, shared with the relay and the
// bridge); MuxConfig.MaxInboundStreams control streams per
// connection (more are reset); one stream and one goroutine per followed
// process.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flynn/noise"
	"go.uber.org/zap"

	"github.com/outpost-exec/outpost/engine"
	"github.com/outpost-exec/outpost/identity"
	"github.com/outpost-exec/outpost/internal/admission"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/transport"
)

// NativePurpose is the Noise purpose of client↔executor links, direct or
// relayed.
const NativePurpose = transport.PurposeExec

// Defaults of NativeConfig.
const (
	DefaultMaxNativeConnections    = 1024
	DefaultMaxHandshakes           = 256
	DefaultMaxHandshakesPerAddress = 16
	DefaultFirstByteTimeout        = 3 * time.Second
	DefaultMaxFailedHandshakes     = 20
	DefaultFailureWindow           = time.Minute
)

// NativeConfig configures a native listener. Start from
// DefaultNativeConfig and set Key; ListenNative fills any other field
// left zero from DefaultNativeConfig.
type NativeConfig struct {
	// Key is the executor's static key (required).
	Key noise.DHKey
	// Authorize, when set, decides whether a client key may connect
	// (the --authorized-clients allow-list); refused clients learn nothing.
	// Default nil: any client.
	Authorize func(clientKey []byte) error
	// Mux configures the multiplexer on every connection (default
	// transport.DefaultMuxConfig()).
	Mux transport.MuxConfig
	// MaxMessageBytes bounds one message on a control stream (default
	// protocol.MaxMessageBytes, 64 MiB: fs/writeFile carries a whole
	// file of up to Config.MaxFileBytes, 64 MiB by default, in one);
	// a larger one is refused (KindTooLarge). ConnectionReadBytes bounds
	// a connection's partly read messages, all its control streams
	// together, past the first 64 KiB of each (default 64 MiB, one
	// message of the largest size; at least MaxMessageBytes); a message
	// past it, or past the server's Config.MessageReadBytes, is dropped
	// and refused (KindExhausted). See readbudget.go.
	MaxMessageBytes     int
	ConnectionReadBytes int64
	// MaxConnections bounds open connections (default 1024).
	MaxConnections int
	// MaxHandshakes bounds connections accepted whose handshake has not
	// finished (default 256; left zero, 256 or half of MaxConnections when
	// that is smaller). It must stay below MaxConnections, or connections
	// past their handshake could leave no room to accept the ones that
	// would evict older ones. MaxHandshakesPerAddress bounds them per
	// source address (default 16, capped by MaxHandshakes): an IPv4
	// address, an IPv6 /64, or on unix:// the peer's uid. Neither makes a
	// new connection wait or refuses it: it takes the slot of the oldest,
	// idle ones first (see handshakeGate).
	MaxHandshakes           int
	MaxHandshakesPerAddress int
	// HandshakeTimeout bounds each handshake, from accept (default
	// transport.DefaultHandshakeTimeout, 10 s).
	HandshakeTimeout time.Duration
	// FirstByteTimeout bounds how long a connection may stay silent after
	// accept before the handshake's first byte (default 3 s; capped by
	// HandshakeTimeout). Clients send their first message at once.
	FirstByteTimeout time.Duration
	// MaxFailedHandshakes failed, silent or slow handshakes from one
	// address within FailureWindow make the listener refuse that address
	// for the rest of the window (defaults 20 per minute), as the relay
	// does.
	MaxFailedHandshakes int
	FailureWindow       time.Duration

	// now replaces time.Now for failure windows and handshake ages
	// (tests); socket deadlines always use the real clock.
	now func() time.Time
}

// DefaultNativeConfig returns the default configuration of a native
// listener, without the Key it needs.
func DefaultNativeConfig() NativeConfig {
	return NativeConfig{
		Mux:                     transport.DefaultMuxConfig(),
		MaxMessageBytes:         protocol.MaxMessageBytes,
		ConnectionReadBytes:     transport.DefaultConnectionReadBytes,
		MaxConnections:          DefaultMaxNativeConnections,
		MaxHandshakes:           DefaultMaxHandshakes,
		MaxHandshakesPerAddress: DefaultMaxHandshakesPerAddress,
		HandshakeTimeout:        transport.DefaultHandshakeTimeout,
		FirstByteTimeout:        DefaultFirstByteTimeout,
		MaxFailedHandshakes:     DefaultMaxFailedHandshakes,
		FailureWindow:           DefaultFailureWindow,
	}
}

// withDefaults fills every zero field from DefaultNativeConfig (a zero
// MaxHandshakes from MaxConnections too), then applies the caps of
// MaxHandshakesPerAddress and FirstByteTimeout; the rest is left to
// Validate.
func (c NativeConfig) withDefaults() NativeConfig {
	d := DefaultNativeConfig()
	if c.Mux == (transport.MuxConfig{}) {
		c.Mux = d.Mux
	}
	c.MaxConnections = cmp.Or(c.MaxConnections, d.MaxConnections)
	c.MaxHandshakes = cmp.Or(c.MaxHandshakes, max(1, min(d.MaxHandshakes, c.MaxConnections/2)))
	c.MaxHandshakesPerAddress = cmp.Or(c.MaxHandshakesPerAddress, d.MaxHandshakesPerAddress)
	c.HandshakeTimeout = cmp.Or(c.HandshakeTimeout, d.HandshakeTimeout)
	c.FirstByteTimeout = cmp.Or(c.FirstByteTimeout, d.FirstByteTimeout)
	c.MaxFailedHandshakes = cmp.Or(c.MaxFailedHandshakes, d.MaxFailedHandshakes)
	c.FailureWindow = cmp.Or(c.FailureWindow, d.FailureWindow)
	c.MaxMessageBytes = cmp.Or(c.MaxMessageBytes, d.MaxMessageBytes)
	c.ConnectionReadBytes = cmp.Or(c.ConnectionReadBytes, d.ConnectionReadBytes)
	if c.MaxHandshakes > 0 {
		c.MaxHandshakesPerAddress = min(c.MaxHandshakesPerAddress, c.MaxHandshakes)
	}
	if c.HandshakeTimeout > 0 {
		c.FirstByteTimeout = min(c.FirstByteTimeout, c.HandshakeTimeout)
	}
	if c.now == nil {
		c.now = time.Now
	}
	return c
}

// Validate reports the first invalid field. It takes the configuration
// as it is: a zero field is invalid here, though ListenNative would fill
// it.
func (c NativeConfig) Validate() error {
	if !validKey(c.Key) {
		return errors.New("executor: NativeConfig.Key is required (an X25519 key pair)")
	}
	if err := c.Mux.Validate(); err != nil {
		return fmt.Errorf("executor: NativeConfig.Mux: %w", err)
	}
	switch {
	case c.MaxConnections < 1:
		return errors.New("executor: NativeConfig.MaxConnections must be at least 1")
	case c.MaxHandshakes < 1:
		return errors.New("executor: NativeConfig.MaxHandshakes must be at least 1")
	case c.MaxHandshakes >= c.MaxConnections:
		return fmt.Errorf("executor: NativeConfig.MaxHandshakes (%d) must be below MaxConnections (%d)", c.MaxHandshakes, c.MaxConnections)
	case c.MaxHandshakesPerAddress < 1:
		return errors.New("executor: NativeConfig.MaxHandshakesPerAddress must be at least 1")
	case c.HandshakeTimeout <= 0:
		return errors.New("executor: NativeConfig.HandshakeTimeout must be positive")
	case c.FirstByteTimeout <= 0:
		return errors.New("executor: NativeConfig.FirstByteTimeout must be positive")
	case c.MaxFailedHandshakes < 1:
		return errors.New("executor: NativeConfig.MaxFailedHandshakes must be at least 1")
	case c.FailureWindow <= 0:
		return errors.New("executor: NativeConfig.FailureWindow must be positive")
	case c.MaxMessageBytes < 1 || c.MaxMessageBytes > protocol.MaxMessageBytes:
		return fmt.Errorf("executor: NativeConfig.MaxMessageBytes must be between 1 and %d", protocol.MaxMessageBytes)
	case c.ConnectionReadBytes < int64(c.MaxMessageBytes):
		return fmt.Errorf("executor: NativeConfig.ConnectionReadBytes (%d) must be at least MaxMessageBytes (%d)", c.ConnectionReadBytes, c.MaxMessageBytes)
	}
	return nil
}

// validKey reports whether k is an X25519 key pair.
func validKey(k noise.DHKey) bool { return len(k.Private) == 32 && len(k.Public) == 32 }

// NativeListener serves the native transport on a listener.
type NativeListener struct {
	*responder
	acc *transport.Acceptor
	url string
}

// ParseNativeURL splits a tcp://HOST:PORT or unix:///path listen URL
// into a network and an address (a thin wrapper over transport.ParseURL).
func ParseNativeURL(s string) (network, addr string, err error) {
	u, err := transport.ParseURL(s, transport.SchemeTCP, transport.SchemeUnix)
	if err != nil {
		return "", "", err
	}
	return u.Network(), u.Addr, nil
}

// ListenNative binds a tcp:// or unix:// URL and serves the native
// transport on it; cfg is validated, its zero fields filled from
// DefaultNativeConfig.
func (s *Server) ListenNative(url string, cfg NativeConfig) (*NativeListener, error) {
	network, addr, err := ParseNativeURL(url)
	if err != nil {
		return nil, err
	}
	r, err := s.newResponder(cfg, true)
	if err != nil {
		return nil, err
	}
	if network == "unix" {
		// A stale socket from a previous run is replaced; anything else
		// at that path is left alone and the bind fails.
		if fi, err := os.Lstat(addr); err == nil && fi.Mode()&os.ModeSocket != 0 {
			os.Remove(addr)
		}
	}
	ln, err := net.Listen(network, addr)
	if err != nil {
		return nil, err
	}
	if network == "unix" {
		os.Chmod(addr, 0o600)
	}
	l := &NativeListener{responder: r}
	if network == "tcp" {
		l.url = transport.SchemeTCP + "://" + ln.Addr().String()
	} else {
		l.url = transport.SchemeUnix + "://" + addr
	}
	s.cfg.Metrics.watchGate(l.gate, true)
	l.acc = r.accept(ln, addressKey, "")
	return l, nil
}

// URL is the bound URL (without the key fingerprint).
func (l *NativeListener) URL() string { return l.url }

// Addr is the bound address.
func (l *NativeListener) Addr() net.Addr { return l.acc.Addr() }

// Close stops accepting and closes every connection (their sessions
// detach) and waits for them to wind down.
func (l *NativeListener) Close() error {
	err := l.acc.Close()
	l.srv.cfg.Metrics.watchGate(l.gate, false)
	return err
}

// StopAccepting closes the port; open connections go on until Close.
func (l *NativeListener) StopAccepting() error { return l.acc.StopAccepting() }

// BlockedAddresses is the number of source addresses refused now for
// failing too many handshakes.
func (l *NativeListener) BlockedAddresses() int { return l.gate.blockedCount() }

// FailureStats are the counters of the listener's failure table: failed
// handshakes recorded against addresses, refusals of blocked ones,
// entries evicted to make room, entries now.
func (l *NativeListener) FailureStats() admission.Stats { return l.gate.failures.Stats() }

// unauthorizedError marks a client key that Authorize refused.
type unauthorizedError struct{ err error }

func (e *unauthorizedError) Error() string { return e.err.Error() }
func (e *unauthorizedError) Unwrap() error { return e.err }

// responder is the executor's one Noise responder path. Every client
// link — a connection to a native listener, or a stream a joined relay
// splices (see Server.Join) — is admitted by its gate (gatedListener) and
// served by serve: the first byte within FirstByteTimeout, the Noise
// handshake (purpose exec, the Authorize allow-list) within
// HandshakeTimeout of accept, the multiplexer, a first stream within
// HandshakeTimeout again, then the method table.
//
// A native listener has a responder of its own, whose addresses are
// source addresses (addressKey). A joined executor has one for all its
// relay sessions, and each session is one address: the relay is to the
// executor what a NAT or a proxy is, every client it brings arrives from
// it, and the client's key is not known before its handshake. So the
// pending-handshake bounds, eviction, timeouts and first-stream rule hold
// per relay session exactly as per source address; but a relay session
// is never refused for failed handshakes (they are counted, in metrics
// and logs, not held against it): one client-token holder sending junk,
// or a client with a stale pin retrying, would otherwise lock every
// relayed client out for the rest of the window. Sources that fail the
// relay's own handshake are refused by the relay.
type responder struct {
	srv  *Server
	cfg  NativeConfig
	gate *handshakeGate
}

// newResponder fills cfg's defaults, validates it and makes the gate;
// block says whether an address that fails too many handshakes is refused
// for the rest of its window.
func (s *Server) newResponder(cfg NativeConfig, block bool) (*responder, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	g := newHandshakeGate(cfg, s.log, s.cfg.Metrics)
	g.neverBlock = !block
	return &responder{srv: s, cfg: cfg, gate: g}, nil
}

// accept serves the links ln accepts, at most MaxConnections at once,
// each counted against the address key names; via names the kind of link
// in traces ("" for ln's network). Closing the Acceptor closes ln.
func (r *responder) accept(ln net.Listener, key func(net.Conn) string, via string) *transport.Acceptor {
	return transport.Serve(&gatedListener{Listener: ln, gate: r.gate, key: key, via: via}, r.cfg.MaxConnections, r.serve)
}

func (r *responder) serve(ctx context.Context, c net.Conn) {
	gc, ok := c.(*gatedConn)
	if !ok {
		return // every connection comes through gatedListener
	}
	defer r.gate.leave(gc)
	deadline := gc.accepted.Add(r.cfg.HandshakeTimeout)
	if !r.awaitFirstByte(ctx, gc, gc.accepted.Add(r.cfg.FirstByteTimeout)) { // FirstByteTimeout ≤ HandshakeTimeout
		return
	}
	cfg := transport.NoiseConfig{Static: r.cfg.Key, Purpose: NativePurpose, AllowXX: true, HandshakeTimeout: r.cfg.HandshakeTimeout}
	var payload, early []byte
	cfg.Authorize = func(peer, p []byte) error {
		payload = p
		if r.cfg.Authorize == nil {
			return nil
		}
		if err := r.cfg.Authorize(peer); err != nil {
			return &unauthorizedError{err}
		}
		return nil
	}
	// IK message 1 may carry early data: taken as the stream's first
	// bytes only if it names this executor's instance and the strike
	// register vouches it was never seen (early.go). Message 2 says so,
	// and names the instance for the client's next early data.
	cfg.Reply = func() (reply []byte) {
		early, reply = r.srv.early.answer(payload)
		return reply
	}
	// HandshakeTimeout counts from accept, the silent start included.
	hctx, cancel := context.WithDeadline(ctx, deadline)
	nc, err := transport.NoiseResponder(hctx, gc, cfg)
	cancel()
	if err != nil {
		r.handshakeFailed(ctx, gc, err)
		return
	}
	r.gate.leave(gc) // authenticated: its slot goes to the next one
	var peer identity.PublicKey
	copy(peer[:], nc.PeerStatic())
	ctx = withHandshake(ctx, handshakeInfo{start: gc.accepted, end: time.Now(), via: gc.via, client: peer.Fingerprint()})
	var link net.Conn = nc
	if len(early) > 0 {
		link = transport.NewPrefixConn(nc, early)
	}
	sess, err := transport.MuxServer(link, r.cfg.Mux)
	if err != nil {
		r.srv.log.Warn("mux setup failed", zap.Error(err))
		return
	}
	defer sess.Close()
	r.srv.serveMux(ctx, sess, r.cfg.Mux.MaxInboundStreams, r.cfg.HandshakeTimeout, r.cfg.controlReads())
}

// awaitFirstByte waits until deadline for the connection's first byte
// (kept for the handshake to read) and moves it from waiting to
// handshaking; false means the connection is done for.
func (r *responder) awaitFirstByte(ctx context.Context, gc *gatedConn, deadline time.Time) bool {
	gc.SetReadDeadline(deadline)
	var b [1]byte
	var n int
	var err error
	for n == 0 && err == nil {
		n, err = gc.Conn.Read(b[:])
	}
	gc.SetReadDeadline(time.Time{})
	if n == 1 {
		gc.first = []byte{b[0]}
		return r.gate.heard(gc)
	}
	switch {
	case r.gate.evicted(gc), ctx.Err() != nil:
		// Counted when evicted; or the listener is closing.
	case isTimeout(err):
		r.gate.failed(gc.key, failSilent)
		r.srv.log.Info("handshake failed: the client sent nothing", zap.Stringer("remote", gc.RemoteAddr()), zap.String("address", gc.key))
	default:
		// It hung up without a word (a port check or a load balancer's
		// probe): it held no slot for long and costs nothing to count.
		r.srv.log.Debug("connection closed before its handshake", zap.Stringer("remote", gc.RemoteAddr()), zap.Error(err))
	}
	return false
}

// handshakeFailed classifies and counts a failed handshake.
func (r *responder) handshakeFailed(ctx context.Context, gc *gatedConn, err error) {
	if ctx.Err() != nil || r.gate.evicted(gc) {
		return // the listener is closing; or counted when evicted
	}
	reason := failError
	var unauth *unauthorizedError
	switch {
	case isTimeout(err):
		reason = failTimeout
	case errors.As(err, &unauth):
		reason = failUnauthorized
	}
	r.gate.failed(gc.key, reason)
	r.srv.log.Info("handshake failed", zap.Stringer("remote", gc.RemoteAddr()), zap.String("address", gc.key), zap.String("reason", reason), zap.Error(err))
}

// isTimeout reports a deadline that passed: a socket's, or a mux
// stream's (a relayed link).
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// Admission of native connections.
//
// Nothing about a connection is known before its handshake ends, so the
// listener bounds what unauthenticated connections can hold: a handler
// goroutine, a socket, and for at most HandshakeTimeout some handshake
// state. The rules:
//
//   - A connection is waiting from accept to its first byte (at most
//     FirstByteTimeout), then handshaking until the handshake ends (at
//     most HandshakeTimeout from accept). Both count as pending.
//   - Pending connections are bounded per address (MaxHandshakesPerAddress)
//     and per listener (MaxHandshakes). A new connection never waits for
//     a slot and is never refused for want of one: if its address is
//     full it takes the slot of that address's oldest waiting connection,
//     else of its oldest handshaking one; if the listener is full it does
//     the same to the address with the most pending connections (the
//     oldest victim among equals). The victim is closed at once.
//   - Failed handshakes (junk, a refused key, a hang-up mid-handshake), a
//     silent connection at FirstByteTimeout, a handshake timeout, and an
//     eviction of a connection that had been handshaking for over
//     staleHandshake count against the address; MaxFailedHandshakes of
//     them within FailureWindow and the address is refused (closed at
//     accept) for the rest of the window. Other evictions and a hang-up
//     before the first byte do not count: they cost us nothing, the
//     evicted connection may be a real client in a burst from a busy
//     address, and counting them would let anyone sharing an address
//     (NAT, a proxy, loopback) lock the others out with bare TCP connects.
//
// Why this lets a real client in through a flood, from the same address
// too: clients send their first message as soon as they connect, so a
// real client's connection is waiting for about one scheduling delay and
// handshaking for about a round trip, while by then a flood's idle or
// trickling connections are the oldest and are evicted first. Evicting
// the oldest rather than refusing the newest is what makes that hold: a
// flood cannot fill the slots ahead of a client, only behind it, so to
// shut a client out it must open more connections than the bound within
// the client's own handshake; and an attacker on another address evicts
// only its own connections until the listener as a whole is full — and
// then the fullest address goes first. Loopback and unix:// peers get no
// exemption: through an SSH tunnel or a local proxy every remote client
// arrives from loopback, and an exemption would exempt them all.
//
// Admission runs in Accept (gatedListener), one connection at a time in
// accept order, so "oldest" is the order in which connections arrived.

// staleHandshake is how long a connection may handshake before its
// eviction counts as a failed (slow) handshake: a real one takes a round
// trip (IK) or one and a half (XX) after the first byte.
const staleHandshake = time.Second

// maxFailureEntries bounds the failure table (addresses with failures in
// their current window, ~250 bytes each); when it is full, expired
// entries go first, then the oldest window of an address not blocked,
// and only when every entry is blocked the oldest blocked one (see
// internal/admission).
const maxFailureEntries = admission.DefaultMaxEntries

// Reasons, as metric labels.
const (
	refusedBlocked = "blocked"
	refusedEvicted = "evicted"

	failSilent       = "silent"
	failTimeout      = "timeout"
	failSlow         = "slow"
	failUnauthorized = "unauthorized"
	failError        = "error"
)

type gateState uint8

const (
	stateWaiting gateState = iota
	stateHandshaking
	stateGone // evicted, or left the gate
)

// gatedConn is an accepted connection under admission control.
type gatedConn struct {
	net.Conn
	key      string    // its source address (see addressKey), or its relay session
	via      string    // the kind of link, for traces: "tcp", "unix" or "relay"
	seq      uint64    // accept order
	accepted time.Time // real clock, for socket deadlines
	// first is the byte read while waiting, handed to the first Read;
	// only the serving goroutine touches it.
	first []byte

	// Under handshakeGate.mu.
	state    gateState
	heardAt  time.Time // gate clock: when its first byte arrived
	wasEvict bool
}

func (c *gatedConn) Read(p []byte) (int, error) {
	if len(c.first) > 0 && len(p) > 0 {
		n := copy(p, c.first)
		c.first = c.first[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// gatedListener admits every connection it accepts through the gate;
// refused ones are closed before Accept returns. key names the address a
// connection counts against; via is the kind of link ("": the
// connection's network).
type gatedListener struct {
	net.Listener
	gate *handshakeGate
	key  func(net.Conn) string
	via  string
}

func (l *gatedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if gc := l.gate.admit(c, l.key(c)); gc != nil {
			gc.via = l.via
			if gc.via == "" {
				gc.via = c.LocalAddr().Network()
			}
			return gc, nil
		}
		closeNow(c)
	}
}

// closeNow closes c and, for a mux stream (whose Close only half-closes
// it), also ends any Read or Write blocked on it.
func closeNow(c net.Conn) {
	c.SetDeadline(time.Unix(1, 0))
	c.Close()
}

// handshakeGate admits connections to a native listener (see above).
type handshakeGate struct {
	maxPending, maxPerAddr int
	now                    func() time.Time
	log                    *zap.Logger
	metrics                *Metrics
	// failures counts failed handshakes per address (the key a
	// connection counts against, as an opaque admission key) and refuses
	// an address that had MaxFailedHandshakes of them within
	// FailureWindow; it is safe for concurrent use, and its lock is taken
	// under mu, never the other way round.
	failures *admission.Limiter
	// neverBlock: failed handshakes are counted but no address is ever
	// refused (a relayed link's, see responder).
	neverBlock bool

	mu      sync.Mutex
	seq     uint64
	pending int
	// addrs holds the pending connections of each address, oldest first;
	// an address leaves it with its last one, so it has at most
	// maxPending entries of at most maxPerAddr connections.
	addrs map[string][]*gatedConn
}

func newHandshakeGate(o NativeConfig, log *zap.Logger, m *Metrics) *handshakeGate {
	failures, err := admission.New(admission.Config{
		MaxFailures: o.MaxFailedHandshakes, Window: o.FailureWindow, MaxEntries: maxFailureEntries, Now: o.now,
	})
	if err != nil {
		panic(err) // NativeConfig.Validate checked both fields; the rest are ours
	}
	return &handshakeGate{
		maxPending: o.MaxHandshakes, maxPerAddr: o.MaxHandshakesPerAddress,
		now: o.now, log: log, metrics: m, failures: failures,
		addrs: map[string][]*gatedConn{},
	}
}

// admit registers a new connection from the address key, evicting an
// older one if it must; nil means refuse it (its address is blocked).
func (g *handshakeGate) admit(c net.Conn, key string) *gatedConn {
	gc := &gatedConn{Conn: c, key: key, accepted: time.Now()}
	g.mu.Lock()
	now := g.now()
	if !g.failures.Allow(admission.Opaque(key)) {
		g.mu.Unlock()
		g.metrics.refused(refusedBlocked)
		g.log.Debug("refused a connection from a blocked address", zap.String("address", key))
		return nil
	}
	var victim *gatedConn
	switch {
	case len(g.addrs[key]) >= g.maxPerAddr:
		victim = addrVictim(g.addrs[key])
	case g.pending >= g.maxPending:
		victim = g.globalVictim()
	default:
		g.addLocked(gc)
		g.mu.Unlock()
		return gc
	}
	slow := victim.state == stateHandshaking && now.Sub(victim.heardAt) >= staleHandshake
	g.removeLocked(victim)
	victim.wasEvict = true
	if slow {
		g.strike(victim.key)
	}
	g.addLocked(gc)
	g.mu.Unlock()
	closeNow(victim.Conn)
	g.metrics.refused(refusedEvicted)
	if slow {
		g.metrics.handshakeFailed(failSlow)
	}
	g.log.Debug("evicted a connection to admit a newer one", zap.String("address", victim.key), zap.Bool("slow", slow), zap.String("for", key))
	return gc
}

func (g *handshakeGate) addLocked(gc *gatedConn) {
	g.seq++
	gc.seq = g.seq
	g.addrs[gc.key] = append(g.addrs[gc.key], gc)
	g.pending++
	g.metrics.handshakesPending(1)
}

func (g *handshakeGate) removeLocked(gc *gatedConn) {
	conns := g.addrs[gc.key]
	for i, c := range conns {
		if c == gc {
			conns = append(conns[:i], conns[i+1:]...)
			break
		}
	}
	if len(conns) == 0 {
		delete(g.addrs, gc.key)
	} else {
		g.addrs[gc.key] = conns
	}
	gc.state = stateGone
	g.pending--
	g.metrics.handshakesPending(-1)
}

// addrVictim is an address's oldest waiting connection, else its oldest
// one (conns is not empty, and in accept order).
func addrVictim(conns []*gatedConn) *gatedConn {
	for _, c := range conns {
		if c.state == stateWaiting {
			return c
		}
	}
	return conns[0]
}

// globalVictim is the victim of the address with the most pending
// connections, the oldest among equals (a scan of at most maxPending
// connections, made only when the listener is full, so pending > 0).
func (g *handshakeGate) globalVictim() *gatedConn {
	var best *gatedConn
	bestN := 0
	for _, conns := range g.addrs {
		v := addrVictim(conns)
		if len(conns) > bestN || len(conns) == bestN && v.seq < best.seq {
			best, bestN = v, len(conns)
		}
	}
	return best
}

// heard moves a connection from waiting to handshaking; false if it was
// evicted meanwhile.
func (g *handshakeGate) heard(gc *gatedConn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if gc.state != stateWaiting {
		return false
	}
	gc.state, gc.heardAt = stateHandshaking, g.now()
	return true
}

// leave releases a connection's slot (its handshake is over either way).
func (g *handshakeGate) leave(gc *gatedConn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if gc.state != stateGone {
		g.removeLocked(gc)
	}
}

func (g *handshakeGate) evicted(gc *gatedConn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return gc.wasEvict
}

// failed counts a failed handshake against an address.
func (g *handshakeGate) failed(key, reason string) {
	g.metrics.handshakeFailed(reason)
	g.strike(key)
}

// strike records a failure of key in the failure table (unless the gate
// never blocks), and logs and counts the one that blocks it.
func (g *handshakeGate) strike(key string) {
	if g.neverBlock {
		return
	}
	s := g.failures.Fail(admission.Opaque(key))
	if s.Crossed {
		g.metrics.addressBlocked()
		g.log.Warn("refusing an address that failed too many handshakes",
			zap.String("address", key), zap.Int("failures", s.Failures), zap.Duration("until", s.Until.Sub(g.now())))
	}
}

// blockedCount is the number of addresses refused now.
func (g *handshakeGate) blockedCount() int { return g.failures.Stats().Blocked }

// addressKey is what the limits count a connection against: its IPv4
// address; for IPv6 its /64 (one subscriber's usual allocation, so an
// attacker cannot mint fresh addresses from its own prefix), as
// admission.NetAddrKey groups them; on a Unix socket the peer's uid
// (SO_PEERCRED).
func addressKey(c net.Conn) string {
	if _, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return admission.NetAddrKey(c.RemoteAddr()).String()
	}
	if uc, ok := c.(*net.UnixConn); ok {
		if uid, ok := peerUID(uc); ok {
			return "uid:" + strconv.Itoa(uid)
		}
		return "unix"
	}
	return c.RemoteAddr().Network() + ":" + c.RemoteAddr().String()
}

// ServeMux serves a mux session: every stream the client opens is a
// control stream with a session of its own. It returns when the mux
// session ends.
func (s *Server) ServeMux(ctx context.Context, sess *transport.MuxSession, maxStreams int) {
	s.serveMux(ctx, sess, maxStreams, 0, DefaultNativeConfig().controlReads())
}

// serveMux is ServeMux that, with firstStream > 0, closes a session that
// opens no stream within firstStream: an authenticated client that then
// sits idle would otherwise hold one of the listener's connections for
// good (a client opens its first stream at once). reads bounds what its
// control streams read.
func (s *Server) serveMux(ctx context.Context, sess *transport.MuxSession, maxStreams int, firstStream time.Duration, reads controlReads) {
	var opened atomic.Bool
	if firstStream > 0 {
		t := time.AfterFunc(firstStream, func() {
			if !opened.Load() {
				s.log.Info("closing a connection that opened no stream after its handshake", zap.Duration("within", firstStream))
				sess.Close()
			}
		})
		defer t.Stop()
	}
	if maxStreams <= 0 {
		maxStreams = transport.DefaultMuxConfig().MaxInboundStreams
	}
	slots := make(chan struct{}, maxStreams)
	budget := s.connectionReads(reads)
	var wg sync.WaitGroup
	defer wg.Wait()
	go func() {
		select {
		case <-ctx.Done():
			sess.Close()
		case <-sess.CloseChan():
		}
	}()
	for {
		st, err := sess.AcceptStream()
		if err != nil {
			return
		}
		opened.Store(true)
		select {
		case slots <- struct{}{}:
		default:
			s.log.Warn("too many streams on one connection; resetting the newest", zap.Int("limit", maxStreams))
			st.Reset() // not Close: what the client sends on it is dropped, not buffered
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			defer st.Close()
			lanes := &streamLanes{open: func() (io.ReadWriteCloser, error) { return sess.OpenStream() }, log: s.log}
			s.serveConn(ctx, controlConn(st, reads, budget), lanes)
		}()
	}
}

// streamLanes pushes each followed process's events on a stream of its own.
type streamLanes struct {
	open func() (io.ReadWriteCloser, error)
	log  *zap.Logger

	mu     sync.Mutex
	lanes  map[*engine.Subscription]io.Closer
	closed bool
	done   chan struct{} // closed by shutdown
	wg     sync.WaitGroup
}

// follow subscribes (holding) and returns the function that starts the
// lane once the reply that created it has been queued.
func (s *streamLanes) follow(ctx context.Context, sessionID, id string, log *engine.EventLog, afterSeq uint64, fromNow bool) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	if s.lanes == nil {
		s.lanes = make(map[*engine.Subscription]io.Closer)
		s.done = make(chan struct{})
	}
	var sub *engine.Subscription
	if fromNow {
		sub = log.SubscribeNow(true, nil)
	} else {
		sub = log.Subscribe(afterSeq, true, nil)
	}
	s.lanes[sub] = nil
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.closed {
			return // shutdown already closed sub
		}
		s.wg.Add(1)
		go s.run(ctx, sessionID, id, sub)
	}
}

func (s *streamLanes) run(ctx context.Context, sessionID, id string, sub *engine.Subscription) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.lanes, sub)
		s.mu.Unlock()
		sub.Close()
	}()
	st, err := s.open()
	if err != nil {
		s.log.Debug("opening an event stream failed", zap.String("process", id), zap.Error(err))
		return
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		st.Close()
		return
	}
	s.lanes[sub] = st
	s.mu.Unlock()
	defer st.Close()
	mc := transport.NewMsgpackConn(st, 0)
	var batch []transport.Notification
	if err := mc.WriteNotification(ctx, protocol.MethodProcessEvents, &protocol.EventsStreamHeader{SessionID: sessionID, ProcessID: id}); err != nil {
		return
	}
	for {
		events, gap, done := sub.Next(laneTurnEvents, laneTurnBytes)
		if gap != nil {
			s.log.Warn("pushed output was evicted before it could be sent; readers see a gap",
				zap.String("process", id), zap.Uint64("fromSeq", gap.FromSeq), zap.Uint64("toSeq", gap.ToSeq))
		}
		if len(events) > 0 {
			batch = batch[:0]
			for i := range events {
				batch = append(batch, transport.Notification{Method: eventMethod(events[i].Kind), Params: eventParams(id, &events[i])})
			}
			if err := mc.WriteNotifications(ctx, batch); err != nil {
				return
			}
		}
		if done {
			return
		}
		if len(events) == 0 {
			select {
			case <-sub.Ready():
			case <-s.done:
				return
			case <-ctx.Done():
				return
			}
		}
	}
}

// shutdown closes every lane's stream and waits for the lanes to end.
func (s *streamLanes) shutdown() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	if s.done != nil {
		close(s.done)
	}
	for sub, st := range s.lanes {
		if st != nil {
			st.Close()
		}
		sub.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}
