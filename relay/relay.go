// Package relay lets executors behind NAT serve clients. Executors dial
// out and join; clients dial in and ask for an executor by id; the relay
// splices a client's stream to a stream on the executor's session. It
// brokers ciphertext only: inside the spliced stream, client and executor
// run their own Noise IK handshake and mux session, which the relay can
// neither read nor forge.
//
// Wire, per TCP connection to the relay:
//
//	Noise (purpose "relay"; the relay's key is pinned by its URL fingerprint)
//	→ mux → the first stream the peer opens carries one msgpack request:
//	  relay/join      {executorId, token?, labels, version}   executor; the stream stays open
//	  relay/connect   {executorId, token}  → {executorKey}    client; the stream is then spliced
//	  relay/executors {token}              → {executors}      listing
//
// Or the request travels in the payload of the Noise IK message 1, is
// answered in message 2, and the connection then carries raw bytes (see
// data.go): relay/connect with the client's own handshake to the executor
// (the raw path: spliced with splice(2), never re-encrypted), relay/data
// from a joined executor (a pre-dialled data connection for its next
// client). A client is spliced to an idle data connection of the executor
// when it has one, else to a new stream on its session.
//
// An executor's id is bound to its static key on first join (which needs a
// join token); later joins authenticate by the key alone, and another key
// claiming the id is refused.
//
// One live session per id. A join for an id that is already joined with
// the same key is either the executor reconnecting after its old connection
// died without the relay noticing, or a second holder of the key (a stolen
// executor.key). The relay tells them apart by asking the old session: it
// sends a mux ping and waits Config.LivenessTimeout (2.5 s). If the old
// session answers, the newcomer is refused with protocol.CodeRelayAlreadyJoined
// (ErrAlreadyJoined; logged at warn level and counted in Stats.DuplicateJoins)
// and the old session keeps the id; if it does not, the old session is closed
// and the newcomer takes the id. So an impostor can never take the id from a
// live executor (the id does not flap between them), and a real reconnect
// costs at most the liveness timeout. Concurrent newcomers share one ping.
//
// A revoked key (Store.RevokeExecutor, `outpost executors revoke`) is
// refused at the join step with protocol.CodeRelayKeyRevoked, under any id.
// While executors are joined the relay polls the store's revocation
// sequence every Config.RevocationPoll (1 s) and closes the sessions of keys
// revoked meanwhile, so a revocation made by another process takes effect
// within about a second.
//
// Every refusal carries its kind (protocol.KindOf): refused for tokens,
// ACLs and keys; exhausted for a full relay or an executor's stream limit;
// unavailable for an offline executor or a relay shutting down (connect
// again); invalid and unsupported for bad requests. A joining executor
// retries the temporary ones and gives up on a refusal.
//
// A cluster (Config.Cluster; cluster.go, peer.go) is several relays on
// one etcd and one key: the token store, the bindings and revocations
// live in etcd (a single-use token is redeemed by one etcd transaction,
// so exactly one of any number of relays wins), each relay records which
// executors are joined to it (presence, under its etcd lease), and a
// client that reaches a relay its executor is not joined to is forwarded
// one hop, on a connection of its own spliced raw, to a relay it is
// joined to (peer.go):
//
//	relay/forward {executorId, relay, client, tokenId} → {executorKey}   in the handshake, per forwarded client
//	relay/peer    {relay}                                              a health link's first request
//
// relay/join's answer names the cluster's members, so executors keep
// sessions on several of them (executor.JoinConfig.RelayConnections).
//
// Bounds: Config.MaxExecutors joined executors, Config.MaxConnections TCP
// connections (and Config.MaxHandshakes in progress); per executor, its
// mux stream limit, Config.MaxStreamsPerExecutor splices and
// Config.MaxDataConns idle data connections; per splice, two goroutines
// and, unless both ends are TCP sockets (splice(2), the kernel's pipe), a
// copy buffer each way (32 KiB, 128 KiB once it moves bulk data), with
// mux windows or TCP's bounding what is in flight.
package relay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/flynn/noise"
	bolt "go.etcd.io/bbolt"
	"go.uber.org/zap"

	"github.com/outpost-exec/outpost/identity"
	"github.com/outpost-exec/outpost/internal/admission"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/transport"
)

// Purpose is the Noise purpose of links to the relay (relay/relayclient
// is the other end).
const Purpose = transport.PurposeRelay

// Config configures a relay. Start from DefaultConfig and set Key and
// Tokens; NewServer fills any other field left zero from DefaultConfig.
type Config struct {
	// Key is the relay's static key (required); clients and executors pin
	// its public half through the #fingerprint of the relay's URL.
	Key noise.DHKey
	// Tokens is the token store (required).
	Tokens *Store
	// Logger logs (default zap.NewNop()).
	Logger *zap.Logger
	// Mux configures the multiplexer on every connection (default
	// transport.DefaultMuxConfig()).
	Mux transport.MuxConfig
	// MaxExecutors bounds joined executors (default 10,000).
	MaxExecutors int
	// MaxConnections and MaxHandshakes bound TCP connections and
	// handshakes in progress (defaults 20,000 and 256).
	MaxConnections int
	MaxHandshakes  int
	// HandshakeTimeout bounds a connection's Noise handshake, and then
	// again the wait for its first request (default
	// transport.DefaultHandshakeTimeout, 10 s).
	HandshakeTimeout time.Duration
	// MaxStreamsPerExecutor bounds the client streams spliced to one
	// executor at a time (default 1024).
	MaxStreamsPerExecutor int
	// MaxStreamsPerClient and MaxStreamsPerToken bound the share of those
	// one client key and one token may hold (defaults 256 and 512, see
	// slots.go): one holder cannot take every slot.
	MaxStreamsPerClient int
	MaxStreamsPerToken  int
	// MaxFailedHandshakes failed handshakes from one source address within
	// FailureWindow make the relay refuse that address for the rest of the
	// window (defaults 20 per minute), so a scanner or a brute-forcer cannot
	// keep handshake slots busy. An address is an IPv4 address or an IPv6
	// /64; at most admission.DefaultMaxEntries (16,384) are tracked, and a
	// full table drops the oldest address not blocked, never a blocked one
	// while others remain (internal/admission).
	MaxFailedHandshakes int
	FailureWindow       time.Duration
	// LivenessTimeout is how long the joined session of an id has to answer
	// a ping when the same key joins the id again (default
	// DefaultLivenessTimeout, 2.5 s): answered, the newcomer is refused;
	// unanswered, the old session is closed and the newcomer takes the id.
	LivenessTimeout time.Duration
	// RevocationPoll is how often the relay, while executors are joined,
	// looks in the store for keys revoked by another process (default
	// DefaultRevocationPoll, 1 s).
	RevocationPoll time.Duration
	// MaxDataConns bounds the idle data connections one joined executor
	// may hold open (relay/data, PROTOCOL.md section 9.6; default
	// DefaultMaxDataConns, 8). Spliced ones count against
	// MaxStreamsPerExecutor instead.
	MaxDataConns int
	// Cluster, when set, makes the relay a member of a cluster on etcd
	// (cluster.go): presence in etcd, peer links, one-hop forwarding.
	// Tokens should then be a store on the same etcd.
	Cluster *ClusterConfig
}

// Defaults of Config.LivenessTimeout and Config.RevocationPoll.
const (
	DefaultLivenessTimeout = 2500 * time.Millisecond
	DefaultRevocationPoll  = time.Second
	DefaultMaxDataConns    = 8
)

// relayMux is the multiplexer configuration of the relay's sessions: the
// defaults, but a ping every 10 s, so an executor whose network vanished
// without a reset is reported offline within 20 s (10 s + the 10 s
// answer bound) rather than 40; 1,000 executors cost 100 pings a second.
func relayMux() transport.MuxConfig {
	m := transport.DefaultMuxConfig()
	m.KeepAlive = 10 * time.Second
	// The relay accepts one stream a session (its first request) and never
	// another: a peer-opened stream beyond the backlog of one is reset,
	// and what they buffer unaccepted is bounded by the mux minimum.
	m.AcceptBacklog = 1
	m.AcceptBacklogBytes = 256 << 10
	return m
}

// DefaultConfig returns the default configuration, without the two
// fields that have none: Key and Tokens.
func DefaultConfig() Config {
	return Config{
		Logger:                zap.NewNop(),
		Mux:                   relayMux(),
		MaxExecutors:          10000,
		MaxConnections:        20000,
		MaxHandshakes:         256,
		HandshakeTimeout:      transport.DefaultHandshakeTimeout,
		MaxStreamsPerExecutor: 1024,
		MaxStreamsPerClient:   256,
		MaxStreamsPerToken:    512,
		MaxFailedHandshakes:   20,
		FailureWindow:         time.Minute,
		LivenessTimeout:       DefaultLivenessTimeout,
		RevocationPoll:        DefaultRevocationPoll,
		MaxDataConns:          DefaultMaxDataConns,
	}
}

// withDefaults fills every zero field that has a default from
// DefaultConfig; the rest is left to Validate.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Logger == nil {
		c.Logger = d.Logger
	}
	if c.Mux == (transport.MuxConfig{}) {
		c.Mux = d.Mux
	}
	c.MaxExecutors = cmp.Or(c.MaxExecutors, d.MaxExecutors)
	c.MaxConnections = cmp.Or(c.MaxConnections, d.MaxConnections)
	c.MaxHandshakes = cmp.Or(c.MaxHandshakes, d.MaxHandshakes)
	c.HandshakeTimeout = cmp.Or(c.HandshakeTimeout, d.HandshakeTimeout)
	c.MaxStreamsPerExecutor = cmp.Or(c.MaxStreamsPerExecutor, d.MaxStreamsPerExecutor)
	c.MaxStreamsPerClient = cmp.Or(c.MaxStreamsPerClient, min(d.MaxStreamsPerClient, c.MaxStreamsPerExecutor))
	c.MaxStreamsPerToken = cmp.Or(c.MaxStreamsPerToken, min(d.MaxStreamsPerToken, c.MaxStreamsPerExecutor))
	c.MaxFailedHandshakes = cmp.Or(c.MaxFailedHandshakes, d.MaxFailedHandshakes)
	c.FailureWindow = cmp.Or(c.FailureWindow, d.FailureWindow)
	c.LivenessTimeout = cmp.Or(c.LivenessTimeout, d.LivenessTimeout)
	c.RevocationPoll = cmp.Or(c.RevocationPoll, d.RevocationPoll)
	c.MaxDataConns = cmp.Or(c.MaxDataConns, d.MaxDataConns)
	return c
}

// Validate reports the first invalid field. It takes the configuration
// as it is: a zero field is invalid here, though NewServer would fill it.
func (c Config) Validate() error {
	switch {
	case len(c.Key.Private) != 32 || len(c.Key.Public) != 32:
		return errors.New("relay: Key is required (an X25519 key pair)")
	case c.Tokens == nil:
		return errors.New("relay: Tokens is required (a token store)")
	}
	if err := c.Mux.Validate(); err != nil {
		return fmt.Errorf("relay: Mux: %w", err)
	}
	switch {
	case c.MaxExecutors < 1:
		return errors.New("relay: MaxExecutors must be at least 1")
	case c.MaxConnections < 1:
		return errors.New("relay: MaxConnections must be at least 1")
	case c.MaxHandshakes < 1:
		return errors.New("relay: MaxHandshakes must be at least 1")
	case c.HandshakeTimeout <= 0:
		return errors.New("relay: HandshakeTimeout must be positive")
	case c.MaxStreamsPerExecutor < 1:
		return errors.New("relay: MaxStreamsPerExecutor must be at least 1")
	case c.MaxStreamsPerClient < 1 || c.MaxStreamsPerToken < 1:
		return errors.New("relay: MaxStreamsPerClient and MaxStreamsPerToken must be at least 1")
	case c.MaxFailedHandshakes < 1:
		return errors.New("relay: MaxFailedHandshakes must be at least 1")
	case c.FailureWindow <= 0:
		return errors.New("relay: FailureWindow must be positive")
	case c.LivenessTimeout <= 0:
		return errors.New("relay: LivenessTimeout must be positive")
	case c.RevocationPoll <= 0:
		return errors.New("relay: RevocationPoll must be positive")
	case c.MaxDataConns < 1:
		return errors.New("relay: MaxDataConns must be at least 1")
	}
	if c.Cluster != nil {
		return c.Cluster.withDefaults().Validate()
	}
	return nil
}

// Server is a relay.
type Server struct {
	cfg Config
	log *zap.Logger

	mu        sync.Mutex
	executors map[string]*joined
	spliced   int                      // client streams spliced now
	draining  bool                     // Drain was called
	drained   chan struct{}            // closed once draining and spliced == 0
	watching  bool                     // watchRevocations is running
	live      map[*liveClient]struct{} // spliced clients, for token revocation (revoke_clients.go)
	// fresh is the register of relay/connect messages 1 taken as fresh
	// (fresh.go; its own lock).
	fresh   freshness
	cluster *cluster // nil for a single relay

	// failures counts failed handshakes by source address (its own lock).
	failures *admission.Limiter

	failedHandshakes atomic.Uint64
	splicedBytes     atomic.Uint64
	redeemedTokens   atomic.Uint64
	refusedTokens    atomic.Uint64
	duplicateJoins   atomic.Uint64
	revokedJoins     atomic.Uint64
	revokedSessions  atomic.Uint64
	revokedClients   atomic.Uint64
	dataSplices      atomic.Uint64
}

type joined struct {
	id      string
	key     [32]byte
	labels  map[string]string
	version string
	since   time.Time
	sess    *transport.MuxSession
	ctl     net.Conn // the join stream, for the reconnect notice
	mc      *transport.MsgpackConn
	remote  string
	streams int // spliced client streams, under Server.mu
	// byClient and byToken count them per client key and token (slots.go).
	byClient, byToken map[string]int
	// Under Server.mu:
	probe      *liveness // the ping in flight for a duplicate join, if any
	checkedSeq uint64    // the store's revocation sequence its key was checked at
	// Its data connections (see data.go): idle holds those waiting for a
	// client (at most Config.MaxDataConns); data holds every one, idle or
	// spliced, to be closed with the session; gone is set once the
	// session has left, after which none registers.
	idle []*dataConn
	data map[*dataConn]struct{}
	gone bool
}

// presence is what the cluster records of j.
func (j *joined) presence() presenceRecord {
	return presenceRecord{Fingerprint: fingerprint(j.key), Labels: j.labels, Version: j.version, Since: j.since.UnixMilli()}
}

// liveness is one ping of a joined session; done is closed once alive is set.
type liveness struct {
	done  chan struct{}
	alive bool
}

// Errors a client sees.
var (
	ErrExecutorOffline = errors.New("executor is offline")
	ErrNotAllowed      = errors.New("this client token may not reach that executor")
	ErrShuttingDown    = errors.New("the relay is shutting down")
	ErrUnknownExecutor = errors.New("no executor by this id has ever joined this relay")
)

// ErrAlreadyJoined refuses a join: the id is joined, with the same key, on
// another session that still answers (see the package comment).
var ErrAlreadyJoined = errors.New("executor id is already joined from another connection with this key")

// errJoinTokenNeeded refuses the first join of an id without a join token.
var errJoinTokenNeeded = errors.New("a join token is needed the first time an executor joins")

// refusalKind is the kind of a token or key check's failure: refused for
// credentials that will not do, unavailable while the token store cannot
// be reached (etcd down, or another process holding the bbolt file),
// internal for anything else the store fails with.
func refusalKind(err error) protocol.Kind {
	switch {
	case errors.Is(err, ErrTokenUnknown), errors.Is(err, ErrTokenExpired), errors.Is(err, ErrTokenRevoked),
		errors.Is(err, ErrTokenUsedUp), errors.Is(err, ErrTokenKind), errors.Is(err, ErrExecutorKeyMismatch),
		errors.Is(err, ErrKeyRevoked), errors.Is(err, errJoinTokenNeeded):
		return protocol.KindRefused
	case errors.Is(err, ErrStoreUnavailable), errors.Is(err, bolt.ErrTimeout):
		return protocol.KindUnavailable
	}
	return protocol.KindInternal
}

// malformedKind is the kind of an undecodable request's refusal.
func malformedKind(err error) protocol.Kind {
	if errors.Is(err, transport.ErrMessageTooLarge) {
		return protocol.KindTooLarge
	}
	return protocol.KindInvalid
}

// errRelayFull and errDraining refuse a join for the relay's own reasons.
var (
	errRelayFull = errors.New("this relay is full")
	errDraining  = errors.New("draining")
)

// NewServer validates cfg, its zero fields filled from DefaultConfig,
// and returns a relay.
func NewServer(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	failures, err := admission.New(admission.Config{MaxFailures: cfg.MaxFailedHandshakes, Window: cfg.FailureWindow})
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger, executors: map[string]*joined{}, failures: failures, drained: make(chan struct{})}
	s.fresh.now = time.Now
	if cfg.Cluster != nil {
		s.cluster = newCluster(s, cfg.Cluster.withDefaults())
	}
	return s, nil
}

// Close ends the relay's membership of its cluster (nothing for a single
// relay): its member key and the presence of its executors leave etcd at
// once, and its peer links close. Call it after Drain and closing the
// listeners.
func (s *Server) Close() error {
	if s.cluster != nil {
		s.cluster.close()
	}
	return nil
}

// Attached is closed once a clustered relay first holds its etcd lease
// (at once for a single relay). Start listening after it: until then the
// relay refuses every join and connect, and a restarted relay would only
// make its executors back off.
func (s *Server) Attached() <-chan struct{} {
	if s.cluster == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return s.cluster.first
}

// detached is ErrDetached's error while a clustered relay has lost etcd:
// it then decides no token (a partition must not split the database) and
// takes no join (its presence could not be recorded).
func (s *Server) detached() error {
	if s.cluster == nil {
		return nil
	}
	return s.cluster.ready()
}

// Ready says whether the relay can take new work: nil, or why not
// (ErrDetached: a clustered relay that has lost etcd; ErrShuttingDown:
// draining). For /readyz.
func (s *Server) Ready() error {
	s.mu.Lock()
	draining := s.draining
	s.mu.Unlock()
	if draining {
		return ErrShuttingDown
	}
	if s.cluster != nil {
		return s.cluster.ready()
	}
	return nil
}

// Listener serves the relay on a TCP port.
type Listener struct {
	acc *transport.Acceptor
}

// Listen binds addr (HOST:PORT) and serves.
func (s *Server) Listen(addr string) (*Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	hs := make(chan struct{}, s.cfg.MaxHandshakes)
	return &Listener{acc: transport.Serve(ln, s.cfg.MaxConnections, func(ctx context.Context, c net.Conn) { s.serve(ctx, c, hs) })}, nil
}

// Addr is the bound address.
func (l *Listener) Addr() net.Addr { return l.acc.Addr() }

// Close stops the relay and closes every connection.
func (l *Listener) Close() error { return l.acc.Close() }

// StopAccepting closes the port but leaves open connections running (for
// Server.Drain); Close ends them.
func (l *Listener) StopAccepting() error { return l.acc.StopAccepting() }

// ListenWS serves the relay over WebSocket (binary messages at
// transport.RelayWSPath) on addr, for networks that pass only HTTP; the
// bytes are the same as over TCP.
func (s *Server) ListenWS(addr string) (*WSListener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	hs := make(chan struct{}, s.cfg.MaxHandshakes)
	conns := make(chan struct{}, s.cfg.MaxConnections)
	mux := http.NewServeMux()
	mux.HandleFunc(transport.RelayWSPath, func(w http.ResponseWriter, r *http.Request) {
		select {
		case conns <- struct{}{}:
			defer func() { <-conns }()
		default:
			http.Error(w, "relay is full", http.StatusServiceUnavailable)
			return
		}
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true, CompressionMode: websocket.CompressionDisabled})
		if err != nil {
			return
		}
		c.SetReadLimit(-1)
		nc := websocket.NetConn(ctx, c, websocket.MessageBinary)
		defer nc.Close()
		s.serve(ctx, nc, hs)
	})
	hsrv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	l := &WSListener{ln: ln, srv: hsrv, stop: stop, done: make(chan struct{})}
	go func() { defer close(l.done); hsrv.Serve(ln) }()
	return l, nil
}

// WSListener serves the relay over WebSocket.
type WSListener struct {
	ln   net.Listener
	srv  *http.Server
	stop context.CancelFunc
	done chan struct{}
}

// Addr is the bound address.
func (l *WSListener) Addr() net.Addr { return l.ln.Addr() }

// StopAccepting closes the port but leaves open connections running.
func (l *WSListener) StopAccepting() error { return l.ln.Close() }

// Close stops the listener and ends its connections.
func (l *WSListener) Close() error {
	l.stop()
	err := l.srv.Close()
	<-l.done
	return err
}

// blocked reports whether ip failed too many handshakes lately (and
// counts the refusal).
func (s *Server) blocked(ip string) bool { return !s.failures.Allow(admission.HostKey(ip)) }

// failed counts a failed handshake against ip's address (its /64 for
// IPv6).
func (s *Server) failed(ip string) {
	if st := s.failures.Fail(admission.HostKey(ip)); st.Crossed {
		s.log.Warn("refusing an address that failed too many handshakes",
			zap.String("address", admission.HostKey(ip).String()), zap.Int("failures", st.Failures), zap.Time("until", st.Until))
	}
}

func sourceIP(c net.Conn) string {
	host, _, err := net.SplitHostPort(c.RemoteAddr().String())
	if err != nil {
		return c.RemoteAddr().String()
	}
	return host
}

func (s *Server) serve(ctx context.Context, c net.Conn, hs chan struct{}) {
	ip := sourceIP(c)
	if s.blocked(ip) {
		return
	}
	select {
	case hs <- struct{}{}:
	case <-ctx.Done():
		return
	}
	// A request in the handshake's payload (relay/connect, relay/data;
	// see data.go) is answered in message 2; without one, mux follows.
	var hr *handshakeRequest
	ncfg := transport.NoiseConfig{Static: s.cfg.Key, Purpose: Purpose, AllowXX: true, HandshakeTimeout: s.cfg.HandshakeTimeout}
	var freeOnce sync.Once
	free := func() { freeOnce.Do(func() { <-hs }) }
	ncfg.Authorize = func(peerStatic, payload []byte) error {
		if len(payload) > 0 {
			// The request's work (the token store, forwarding to a peer)
			// must not hold a handshake slot: the crypto is done.
			free()
			var peer [32]byte
			copy(peer[:], peerStatic)
			hr = s.handshakeRequest(peer, c.RemoteAddr().String(), payload)
		}
		return nil
	}
	ncfg.Reply = func() []byte {
		if hr == nil {
			return nil
		}
		hr.answered = true
		return hr.reply
	}
	nc, err := transport.NoiseResponder(ctx, c, ncfg)
	free()
	if err != nil {
		if hr != nil {
			hr.abandon(s)
		}
		s.failedHandshakes.Add(1)
		s.failed(ip)
		s.log.Debug("relay handshake failed", zap.Stringer("remote", c.RemoteAddr()), zap.Error(err))
		return
	}
	if hr != nil {
		s.serveHandshakeRequest(ctx, nc, hr)
		return
	}
	sess, err := transport.MuxServer(nc, s.cfg.Mux)
	if err != nil {
		return
	}
	defer sess.Close()
	go func() {
		select {
		case <-ctx.Done():
			sess.Close()
		case <-sess.CloseChan():
		}
	}()
	// The first request must arrive within the handshake timeout too: an
	// authenticated peer that says nothing must not keep a slot.
	idle := time.AfterFunc(s.cfg.HandshakeTimeout, func() { sess.Close() })
	ctl, err := sess.AcceptStream()
	if err != nil {
		idle.Stop()
		return
	}
	// Hang up politely: the peer closes first once it has read our last
	// reply. Closing the session at once races that reply — the peer's
	// mux may report "session shutdown" to a write it already made
	// and never read the error we sent. The wait is bounded by
	// replyLinger, and connections are bounded by MaxConnections.
	defer func() {
		ctl.Close()
		t := time.NewTimer(replyLinger)
		defer t.Stop()
		select {
		case <-sess.CloseChan():
		case <-t.C:
		case <-ctx.Done():
		}
	}()
	mc := transport.NewMsgpackConn(ctl, maxControlFrame)
	m, err := mc.ReadMessage(ctx)
	idle.Stop()
	var malformed *transport.MalformedError
	switch {
	case errors.As(err, &malformed):
		mc.WriteError(ctx, transport.MalformedID, protocol.KindErrorf(malformedKind(err), protocol.CodeInvalidRequest, "relay: %v", err))
		return
	case err != nil:
		return
	case m.Kind != transport.KindRequest:
		mc.WriteError(ctx, transport.MalformedID, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidRequest, "relay: the first message must be a request"))
		return
	}
	var peer [32]byte
	copy(peer[:], nc.PeerStatic())
	switch m.Method {
	case protocol.MethodRelayJoin:
		s.join(ctx, sess, ctl, mc, m, peer, c.RemoteAddr().String())
	case protocol.MethodRelayConnect:
		s.connect(ctx, ctl, mc, m, peer, c.RemoteAddr().String())
	case protocol.MethodRelayExecutors:
		// The answer is not a control request: maxControlFrame is no bound for it.
		s.list(ctx, transport.NewMsgpackConn(ctl, protocol.MaxMessageBytes), m, fingerprint(peer))
	case protocol.MethodRelayPeer:
		if !s.isClusterKey(peer) {
			mc.WriteError(ctx, m.ID, protocol.KindErrorf(protocol.KindRefused, protocol.CodeInvalidRequest, "relay/peer: only a relay of this cluster may open a peer link"))
			return
		}
		s.servePeer(ctx, sess, mc, m, c.RemoteAddr().String())
	default:
		mc.WriteError(ctx, m.ID, protocol.KindErrorf(protocol.KindUnsupported, protocol.CodeMethodNotFound, "relay: unknown method %q", m.Method))
	}
}

func (s *Server) join(ctx context.Context, sess *transport.MuxSession, ctl net.Conn, mc *transport.MsgpackConn, m *transport.Message, peer [32]byte, remote string) {
	p, perr := parseJoin(m)
	if perr == nil {
		if err := s.detached(); err != nil {
			perr = protocol.KindErrorf(protocol.KindUnavailable, protocol.CodeInvalidRequest, "relay/join: %v; join another relay", err)
		}
	}
	if perr != nil {
		mc.WriteError(ctx, m.ID, perr)
		return
	}
	seq, err := s.authorizeJoin(p, peer)
	if errors.Is(err, ErrKeyRevoked) {
		s.revokedJoins.Add(1)
		s.log.Warn("executor join refused: its key is revoked", zap.String("executor", p.ExecutorID), zap.String("remote", remote), zap.String("fingerprint", fingerprint(peer)),
			zap.String("outcome", "refused"), zap.String("kind", string(protocol.KindRefused)))
		mc.WriteError(ctx, m.ID, protocol.KindErrorf(protocol.KindRefused, protocol.CodeRelayKeyRevoked,
			"relay/join: executor key %s has been revoked on this relay and can never join again; make a new key (remove executor.key) and join with a new join token", fingerprint(peer)))
		return
	}
	if err != nil {
		s.log.Info("executor join refused", zap.String("executor", p.ExecutorID), zap.String("remote", remote), zap.String("fingerprint", fingerprint(peer)),
			zap.String("outcome", "refused"), zap.String("kind", string(refusalKind(err))), zap.Error(err))
		mc.WriteError(ctx, m.ID, protocol.KindErrorf(refusalKind(err), protocol.CodeInvalidRequest, "relay/join: %v", err))
		return
	}
	j := &joined{id: p.ExecutorID, key: peer, labels: p.Labels, version: p.Version, since: time.Now(), sess: sess, ctl: ctl, mc: mc, remote: remote, checkedSeq: seq}
	holder, err := s.admit(ctx, j)
	switch {
	case err == nil:
	case errors.Is(err, errDraining), ctx.Err() != nil:
		// No reply: an executor that predates error kinds reads any error
		// as a refusal, and would give up instead of retrying against our
		// successor.
		return
	case errors.Is(err, errRelayFull):
		s.log.Info("executor join refused: the relay is full", zap.String("executor", j.id), zap.String("remote", remote), zap.String("fingerprint", fingerprint(peer)),
			zap.String("outcome", "refused"), zap.String("kind", string(protocol.KindExhausted)))
		mc.WriteError(ctx, m.ID, protocol.KindErrorf(protocol.KindExhausted, protocol.CodeInvalidRequest, "relay/join: this relay is full (%d executors)", s.cfg.MaxExecutors))
		return
	case errors.Is(err, ErrAlreadyJoined):
		s.duplicateJoins.Add(1)
		s.log.Warn("duplicate executor join refused: the id is joined, and answering, on another connection with the same key; if the executor is not reconnecting from there, its key is stolen: revoke it with `outpost executors revoke`",
			zap.String("executor", j.id), zap.String("remote", remote), zap.String("fingerprint", fingerprint(peer)), zap.String("joined_from", holder), zap.String("outcome", "refused"), zap.String("kind", string(protocol.KindRefused)))
		mc.WriteError(ctx, m.ID, protocol.KindErrorf(protocol.KindRefused, protocol.CodeRelayAlreadyJoined, "relay/join: executor id %s is already joined from another connection with this key", j.id))
		return
	default:
		return
	}
	s.log.Info("executor joined", zap.String("executor", j.id), zap.String("remote", remote), zap.String("fingerprint", fingerprint(peer)), zap.String("outcome", "joined"))
	var res protocol.RelayJoinResult
	if s.cluster != nil {
		res.Cluster = s.cluster.info()
	}
	if err := mc.WriteResult(ctx, m.ID, res); err != nil {
		s.leave(j)
		return
	}
	<-sess.CloseChan()
	s.leave(j)
}

// maxAdmitRounds bounds admit's rounds: a round ends with j admitted, j
// refused, or a dead holder removed (then j tries again).
const maxAdmitRounds = 3

// admit makes j the joined session of its id, following the rule in the
// package comment. When it refuses j with ErrAlreadyJoined it returns the
// remote address of the session that holds the id.
func (s *Server) admit(ctx context.Context, j *joined) (holder string, err error) {
	for range maxAdmitRounds {
		s.mu.Lock()
		if s.draining {
			s.mu.Unlock()
			return "", errDraining
		}
		old := s.executors[j.id]
		if old == nil {
			if len(s.executors) >= s.cfg.MaxExecutors {
				s.mu.Unlock()
				return "", errRelayFull
			}
			s.executors[j.id] = j
			if s.cluster != nil {
				s.cluster.joined(j.id, j.presence())
			}
			s.startWatchLocked()
			s.mu.Unlock()
			return "", nil
		}
		if old.key != j.key {
			// The id was bound to j's key after old joined (old's key was
			// revoked and the id rebound): old is stale.
			s.dropLocked(old)
			s.mu.Unlock()
			old.sess.Close()
			continue
		}
		pr := s.probeLocked(old)
		s.mu.Unlock()
		select {
		case <-pr.done:
		case <-ctx.Done():
			return "", ctx.Err()
		}
		if pr.alive {
			return old.remote, ErrAlreadyJoined
		}
		// The probe closed old and removed it: try again.
	}
	return "", ErrAlreadyJoined
}

// probeLocked pings j's session, or joins the ping already in flight. If j
// does not answer within Config.LivenessTimeout it is removed and closed.
// Call with s.mu held.
func (s *Server) probeLocked(j *joined) *liveness {
	if j.probe != nil {
		return j.probe
	}
	pr := &liveness{done: make(chan struct{})}
	j.probe = pr
	go func() {
		alive := ping(j.sess, s.cfg.LivenessTimeout)
		s.mu.Lock()
		j.probe = nil
		pr.alive = alive
		if !alive {
			s.dropLocked(j)
		}
		s.mu.Unlock()
		if !alive {
			s.log.Info("joined executor did not answer a ping; a new join with its key replaces it", zap.String("executor", j.id), zap.String("remote", j.remote))
			j.sess.Close()
		}
		close(pr.done)
	}()
	return pr
}

// ping reports whether sess answers a mux ping within timeout. The
// pinging goroutine outlives a timeout only until the session is closed
// (which the caller does) or mux gives up on its own.
func ping(sess *transport.MuxSession, timeout time.Duration) bool {
	res := make(chan error, 1)
	go func() {
		_, err := sess.Ping()
		res <- err
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err := <-res:
		return err == nil
	case <-t.C:
		return false
	}
}

// authorizeJoin checks the joining key against the id's binding (binding
// it with a join token the first time) and the revoked keys. It returns the
// store's revocation sequence number the check reflects.
func (s *Server) authorizeJoin(p protocol.RelayJoinParams, peer [32]byte) (uint64, error) {
	st, err := s.cfg.Tokens.CheckExecutor(p.ExecutorID, peer)
	if err != nil {
		return 0, err
	}
	if st.KeyRevoked {
		return 0, ErrKeyRevoked
	}
	if st.Bound {
		if st.BoundKey != peer {
			return 0, ErrExecutorKeyMismatch
		}
		return st.Seq, nil // known key: no token needed
	}
	if p.Token == "" {
		return 0, errJoinTokenNeeded
	}
	if _, err := s.redeem(TokenJoin, p.Token, ""); err != nil {
		return 0, err
	}
	// BindExecutor refuses a key revoked since the check; a revocation
	// after it has a later sequence number, which the watcher catches.
	return st.Seq, s.cfg.Tokens.BindExecutor(p.ExecutorID, peer)
}

// watchRevocations runs while any executor is joined: every
// Config.RevocationPoll it reads the store's revocation sequence and
// re-checks the keys of joined executors checked before it moved, closing
// the sessions of revoked ones.
func (s *Server) watchRevocations() {
	t := time.NewTicker(s.cfg.RevocationPoll)
	defer t.Stop()
	for range t.C {
		s.mu.Lock()
		if len(s.executors) == 0 && len(s.live) == 0 {
			s.watching = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		if err := s.checkRevocations(); err != nil {
			s.log.Warn("cannot read revoked keys from the token store", zap.Error(err))
		}
	}
}

// checkRevocations closes the sessions of joined executors whose keys were
// revoked since they were checked.
func (s *Server) checkRevocations() error {
	seq, err := s.cfg.Tokens.RevocationSeq()
	if err != nil {
		return err
	}
	if err := s.checkClientRevocations(seq); err != nil {
		return err
	}
	s.mu.Lock()
	var stale []*joined
	var keys [][32]byte
	seen := map[[32]byte]bool{}
	for _, j := range s.executors {
		if j.checkedSeq < seq {
			stale = append(stale, j)
			if !seen[j.key] {
				seen[j.key] = true
				keys = append(keys, j.key)
			}
		}
	}
	s.mu.Unlock()
	if len(stale) == 0 {
		return nil
	}
	revoked, seq, err := s.cfg.Tokens.RevokedKeys(keys)
	if err != nil {
		return err
	}
	var cut []*joined
	s.mu.Lock()
	for _, j := range stale {
		switch {
		case revoked[j.key]:
			s.dropLocked(j)
			cut = append(cut, j)
		case j.checkedSeq < seq:
			j.checkedSeq = seq
		}
	}
	s.mu.Unlock()
	for _, j := range cut {
		s.revokedSessions.Add(1)
		s.log.Warn("executor key revoked: session closed", zap.String("executor", j.id), zap.String("remote", j.remote), zap.String("fingerprint", fingerprint(j.key)))
		j.sess.Close()
	}
	return nil
}

// dropLocked removes j as the joined session of its id, with its
// presence in the cluster. Call with s.mu held.
func (s *Server) dropLocked(j *joined) {
	if s.executors[j.id] == j {
		delete(s.executors, j.id)
		if s.cluster != nil {
			s.cluster.left(j.id)
		}
	}
}

func (s *Server) leave(j *joined) {
	s.mu.Lock()
	s.dropLocked(j)
	j.gone = true
	data := make([]*dataConn, 0, len(j.data))
	for dc := range j.data {
		data = append(data, dc)
	}
	s.mu.Unlock()
	// Its data connections go with it, idle or spliced, as its streams
	// do with the session.
	for _, dc := range data {
		dc.conn.SetDeadline(time.Unix(1, 0))
		dc.conn.Close()
	}
	s.log.Info("executor left", zap.String("executor", j.id))
}

// notJoined is the refusal for an executor id with no joined executor:
// not_found when no executor has ever been bound to the id (a typo, or
// one never joined — waiting will not help), unavailable when one has and
// is offline now (it may come back; clients retry for a short grace). The
// client's token has been checked and allows the id before this is told.
func (s *Server) notJoined(id string) *protocol.Error {
	_, bound, err := s.cfg.Tokens.ExecutorKey(id)
	if err == nil && !bound {
		return protocol.KindErrorf(protocol.KindNotFound, protocol.CodeNotFound, "relay/connect: %v: %s", ErrUnknownExecutor, id)
	}
	return protocol.KindErrorf(protocol.KindUnavailable, protocol.CodeNotFound, "relay/connect: executor %s is offline", id)
}

// connectRefused logs a refused relay/connect (the audit line: client key,
// executor, reason kind; never the token) and sends the refusal.
func (s *Server) connectRefused(ctx context.Context, mc *transport.MsgpackConn, m *transport.Message, client, remote, executorID string, e *protocol.Error) {
	s.log.Info("client connect refused", zap.String("client", client), zap.String("remote", remote), zap.String("executor", executorID),
		zap.String("outcome", "refused"), zap.String("kind", string(protocol.KindOf(e))), zap.String("reason", e.Message))
	mc.WriteError(ctx, m.ID, e)
}

func (s *Server) connect(ctx context.Context, ctl net.Conn, mc *transport.MsgpackConn, m *transport.Message, peer [32]byte, remote string) {
	client := fingerprint(peer)
	p, perr := parseConnect(m)
	if perr != nil {
		s.connectRefused(ctx, mc, m, client, remote, "", perr)
		return
	}
	tok, t, perr := s.openClient(ctx, p, client)
	if perr != nil {
		s.connectRefused(ctx, mc, m, client, remote, p.ExecutorID, perr)
		return
	}
	defer t.release()
	if err := mc.WriteResult(ctx, m.ID, protocol.RelayConnectResult{ExecutorKey: fingerprint(t.key), Cluster: s.connectMembers()}); err != nil {
		return
	}
	s.log.Info("client connected", zap.String("client", client), zap.String("remote", remote), zap.String("executor", p.ExecutorID),
		zap.String("outcome", "spliced"), zap.String("token_id", tok.ID), zap.Bool("data_conn", t.data), zap.String("via", t.via))
	defer s.trackClient(tok, client, func() { ctl.Close(); t.conn.Close() })()
	start := time.Now()
	n := splice(ctl, t.conn)
	s.splicedBytes.Add(n)
	s.log.Info("client disconnected", zap.String("client", client), zap.String("executor", p.ExecutorID), zap.Uint64("bytes", n), zap.Duration("duration", time.Since(start)))
}

// clientTarget is what an admitted client is spliced to: an executor
// joined here (a data connection or a stream on its session), or a stream
// forwarded to the peer relay holding it (via).
type clientTarget struct {
	conn    net.Conn
	key     [32]byte // the executor's
	data    bool     // a data connection
	via     string   // the peer relay, when forwarded
	release func()   // closes conn and gives back the slot
}

// openClient admits a relay/connect — the token, its ACL, then the
// executor: joined here, or (in a cluster) joined to a peer — and opens
// its target. Release the target when the splice ends. It spends: call
// it only for a connection the client has proven fresh (a full handshake,
// or the first record after a handshake request).
func (s *Server) openClient(ctx context.Context, p protocol.RelayConnectParams, client string) (Token, *clientTarget, *protocol.Error) {
	if err := s.detached(); err != nil {
		return Token{}, nil, protocol.KindErrorf(protocol.KindUnavailable, protocol.CodeInvalidRequest, "relay/connect: %v; connect through another relay", err)
	}
	tok, err := s.redeem(TokenClient, p.Token, client)
	if err != nil {
		return tok, nil, protocol.KindErrorf(refusalKind(err), protocol.CodeInvalidRequest, "relay/connect: %v", err)
	}
	if !tok.AllowsExecutor(p.ExecutorID) {
		return tok, nil, protocol.KindErrorf(protocol.KindRefused, protocol.CodeInvalidRequest, "relay/connect: %v: %s", ErrNotAllowed, p.ExecutorID)
	}
	t, perr := s.clientTarget(ctx, p.ExecutorID, client, tok.ID)
	return tok, t, perr
}

// clientTarget takes a slot for a client admitted on the token with id
// tokID and opens its target: a data connection or a stream of the
// executor joined here, or a forward to the peer relay holding it.
func (s *Server) clientTarget(ctx context.Context, id, client, tokID string) (*clientTarget, *protocol.Error) {
	p := protocol.RelayConnectParams{ExecutorID: id}
	h := slotHolder{client: client, token: tokID}
	j, perr := s.takeSlot(p.ExecutorID, h)
	if perr != nil {
		return nil, perr
	}
	if j != nil {
		up, dc, err := s.openTarget(j)
		if err != nil {
			s.releaseSlot(j, h)
			return nil, protocol.KindErrorf(protocol.KindUnavailable, protocol.CodeNotFound, "relay/connect: executor %s is offline", p.ExecutorID)
		}
		return &clientTarget{conn: up, key: j.key, data: dc != nil, release: func() {
			s.closeTarget(j, up, dc)
			s.releaseSlot(j, h)
		}}, nil
	}
	if s.cluster == nil {
		return nil, s.notJoined(p.ExecutorID)
	}
	if !s.takeSplice() {
		return nil, protocol.KindErrorf(protocol.KindUnavailable, protocol.CodeInvalidRequest, "relay/connect: %v; connect again", ErrShuttingDown)
	}
	st, key, via, found, err := s.cluster.forward(ctx, protocol.RelayForwardParams{ExecutorID: p.ExecutorID, Client: client, TokenID: tokID})
	if err != nil || !found {
		s.releaseSplice()
		if !found {
			return nil, s.notJoined(p.ExecutorID)
		}
		s.log.Info("no peer relay took a forwarded client", zap.String("executor", p.ExecutorID), zap.Error(err))
		if pe, ok := errors.AsType[*protocol.Error](err); ok && pe.Kind() == protocol.KindExhausted {
			return nil, pe // the holder's share or limit: the client should know
		}
		return nil, protocol.KindErrorf(protocol.KindUnavailable, protocol.CodeNotFound, "relay/connect: executor %s is offline", p.ExecutorID)
	}
	return &clientTarget{conn: st, key: key, via: via, release: func() {
		st.Close()
		s.releaseSplice()
	}}, nil
}

// admissible is openClient's judgement without its spending: what the
// relay answers a relay/connect in a handshake's message 1, which anyone
// who recorded it could replay. It returns the executor's key and the
// token as it stands.
func (s *Server) admissible(ctx context.Context, p protocol.RelayConnectParams, client string) ([32]byte, Token, *protocol.Error) {
	if err := s.detached(); err != nil {
		return [32]byte{}, Token{}, protocol.KindErrorf(protocol.KindUnavailable, protocol.CodeInvalidRequest, "relay/connect: %v; connect through another relay", err)
	}
	tok, err := s.cfg.Tokens.Check(TokenClient, p.Token, client)
	if err != nil {
		s.refusedTokens.Add(1)
		return [32]byte{}, tok, protocol.KindErrorf(refusalKind(err), protocol.CodeInvalidRequest, "relay/connect: %v", err)
	}
	if !tok.AllowsExecutor(p.ExecutorID) {
		return [32]byte{}, tok, protocol.KindErrorf(protocol.KindRefused, protocol.CodeInvalidRequest, "relay/connect: %v: %s", ErrNotAllowed, p.ExecutorID)
	}
	j, perr := s.hasSlot(p.ExecutorID, slotHolder{client: client, token: tok.ID})
	switch {
	case perr != nil:
		return [32]byte{}, tok, perr
	case j != nil:
		return j.key, tok, nil
	case s.cluster == nil || len(s.cluster.holders(ctx, p.ExecutorID)) == 0:
		return [32]byte{}, tok, s.notJoined(p.ExecutorID)
	}
	// The key its presence names (the holder's answer to the forward must
	// match it), else the binding.
	if key, ok := s.cluster.presentKey(p.ExecutorID); ok {
		return key, tok, nil
	}
	key, ok, err := s.cfg.Tokens.ExecutorKey(p.ExecutorID)
	if err != nil || !ok {
		return [32]byte{}, tok, s.notJoined(p.ExecutorID)
	}
	return key, tok, nil
}

// takeSplice counts a forwarded splice (Drain waits for it); false while
// draining.
func (s *Server) takeSplice() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		return false
	}
	s.spliced++
	return true
}

func (s *Server) releaseSplice() {
	s.mu.Lock()
	s.spliced--
	if s.draining && s.spliced == 0 {
		close(s.drained)
	}
	s.mu.Unlock()
}

func (s *Server) list(ctx context.Context, mc *transport.MsgpackConn, m *transport.Message, client string) {
	p, perr := parseList(m)
	if perr != nil {
		mc.WriteError(ctx, m.ID, perr)
		return
	}
	tok, err := s.redeem(TokenClient, p.Token, client)
	if err != nil {
		s.log.Info("executor listing refused", zap.String("outcome", "refused"), zap.String("kind", string(refusalKind(err))), zap.Error(err))
		mc.WriteError(ctx, m.ID, protocol.KindErrorf(refusalKind(err), protocol.CodeInvalidRequest, "relay/executors: %v", err))
		return
	}
	// A cluster lists every executor of the cluster (the watched
	// presence), with the relays each is joined to; this relay's own are
	// listed even before their presence comes back from etcd.
	var all map[string]protocol.RelayExecutor
	if s.cluster != nil {
		all = s.cluster.listing()
	}
	s.mu.Lock()
	for _, j := range s.executors {
		e, ok := all[j.id]
		if !ok {
			e = protocol.RelayExecutor{ID: j.id, Labels: j.labels, Fingerprint: fingerprint(j.key), ConnectedSince: j.since.UnixMilli(), Version: j.version}
		}
		if s.cluster != nil && !slices.Contains(e.Relays, s.cluster.cfg.RelayID) {
			e.Relays = append(e.Relays, s.cluster.cfg.RelayID)
			sort.Strings(e.Relays)
		}
		if all == nil {
			all = map[string]protocol.RelayExecutor{}
		}
		all[j.id] = e
	}
	s.mu.Unlock()
	res := protocol.RelayExecutorsResult{Executors: []protocol.RelayExecutor{}}
	for id, e := range all {
		if tok.AllowsExecutor(id) {
			res.Executors = append(res.Executors, e)
		}
	}
	sort.Slice(res.Executors, func(a, b int) bool { return res.Executors[a].ID < res.Executors[b].ID })
	mc.WriteResult(ctx, m.ID, res)
}

// Control requests are the only relay input decoded before a token is
// checked; these parsers are the fuzzed boundary (FuzzControlRequest).

// maxControlFrame bounds a control request (they are a few hundred bytes).
const maxControlFrame = 64 << 10

func parseJoin(m *transport.Message) (protocol.RelayJoinParams, *protocol.Error) {
	var p protocol.RelayJoinParams
	if m.Params == nil || m.Params.Decode(&p) != nil || protocol.CheckExecutorID(p.ExecutorID) != nil {
		return p, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "relay/join: a valid executorId is required (1-%d bytes, no spaces, '/' or control characters)", protocol.MaxExecutorIDLen)
	}
	if len(p.Labels) > maxLabels {
		return p, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "relay/join: at most %d labels", maxLabels)
	}
	return p, nil
}

func parseConnect(m *transport.Message) (protocol.RelayConnectParams, *protocol.Error) {
	var p protocol.RelayConnectParams
	if m.Params == nil || m.Params.Decode(&p) != nil || protocol.CheckExecutorID(p.ExecutorID) != nil {
		return p, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "relay/connect: a valid executorId is required")
	}
	return p, nil
}

func parseList(m *transport.Message) (protocol.RelayExecutorsParams, *protocol.Error) {
	var p protocol.RelayExecutorsParams
	if m.Params == nil || m.Params.Decode(&p) != nil {
		return p, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "relay/executors: params must be {token}")
	}
	return p, nil
}

// maxLabels bounds the labels an executor may register.
const maxLabels = 32

// splice copies both ways until either side ends, then closes both. It
// returns the bytes copied in both directions.
func splice(a, b net.Conn) uint64 {
	done := make(chan uint64, 1)
	go func() { done <- spliceHalf(a, b) }()
	return spliceHalf(b, a) + <-done
}

// spliceHalf copies src to dst until either ends, then closes both (the
// other half then ends too), and returns the bytes it copied.
func spliceHalf(dst, src net.Conn) uint64 {
	var n uint64
	d, dok := dst.(*net.TCPConn)
	sc, sok := src.(*net.TCPConn)
	if dok && sok {
		// Both raw sockets (a client and a data connection): io.Copy
		// moves the bytes with splice(2), never through user space.
		k, _ := io.Copy(d, sc)
		n = uint64(k)
	} else {
		n = copyAdaptive(dst, src)
	}
	// A mux stream's Close only half-closes it: the other direction's
	// Read would wait for a peer that may never close (an executor
	// evicting an idle client's stream; the client then holding the
	// slot). Its deadline ends it once it has drained what is buffered.
	for _, c := range []net.Conn{dst, src} {
		c.SetReadDeadline(time.Unix(1, 0))
		c.Close()
	}
	return n
}

// Splice buffers: a direction starts with spliceSmallBuffer and moves to
// spliceBulkBuffer once a read fills it (a bulk transfer: larger reads and
// writes mean fewer mux frames and Noise records, about 20% more
// throughput). Idle and interactive streams keep the small one.
const (
	spliceSmallBuffer = 32 << 10
	spliceBulkBuffer  = 128 << 10
)

// copyAdaptive copies src to dst until either fails or src ends, and
// returns the bytes copied.
func copyAdaptive(dst, src net.Conn) uint64 {
	buf := make([]byte, spliceSmallBuffer)
	var n uint64
	for {
		k, rerr := src.Read(buf)
		if k > 0 {
			if _, werr := dst.Write(buf[:k]); werr != nil {
				return n
			}
			n += uint64(k)
			if k == len(buf) && len(buf) < spliceBulkBuffer {
				buf = make([]byte, spliceBulkBuffer)
			}
		}
		if rerr != nil {
			return n
		}
	}
}

// redeem redeems a token, counting the outcome.
// A client token's use is spent once per client key (Store.RedeemFor);
// client is "" for a join token.
func (s *Server) redeem(kind TokenKind, token, client string) (Token, error) {
	tok, err := s.cfg.Tokens.RedeemFor(kind, token, client)
	if err != nil {
		s.refusedTokens.Add(1)
	} else {
		s.redeemedTokens.Add(1)
	}
	return tok, err
}

// reconnectNoticeTimeout bounds the write of one reconnect notice, so an
// executor that stopped reading cannot stall a drain.
const reconnectNoticeTimeout = 2 * time.Second

// replyLinger is how long the relay waits, after its last reply on a
// connection, for the peer to hang up before it closes the connection
// itself (long enough for one slow round trip).
const replyLinger = 2 * time.Second

// Drain prepares the relay to stop: it refuses new joins and connects,
// tells every joined executor to reconnect (a relay/reconnect notification
// on its join stream: the executor dials a fresh session, normally to
// this relay's successor, and keeps serving its open client streams on
// the old one), and waits until every spliced client stream has ended or
// ctx is done. Clients cannot be told: their streams are end-to-end
// encrypted and the relay cannot speak in them; they end when their work
// does or when the listeners close after Drain, and the client's resume
// takes them to the successor without losing output. Stop accepting first
// (Listener.StopAccepting) so no new connection arrives meanwhile.
func (s *Server) Drain(ctx context.Context) error {
	s.mu.Lock()
	if !s.draining {
		s.draining = true
		if s.spliced == 0 {
			close(s.drained)
		}
	}
	execs := make([]*joined, 0, len(s.executors))
	for _, j := range s.executors {
		execs = append(execs, j)
	}
	s.mu.Unlock()
	s.log.Info("relay draining", zap.Int("executors", len(execs)))
	// A cluster's member leaves the member list first, so the executors it
	// sends away are pointed at the other members, and peers stop
	// forwarding to it (they refuse while draining, the next holder takes
	// the client).
	if s.cluster != nil {
		s.cluster.leave(ctx)
	}
	var notice protocol.RelayReconnectParams
	if s.cluster != nil {
		notice.Cluster = s.cluster.info()
	}
	var wg sync.WaitGroup
	for _, j := range execs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			j.ctl.SetWriteDeadline(time.Now().Add(reconnectNoticeTimeout))
			if err := j.mc.WriteNotification(ctx, protocol.MethodRelayReconnect, notice); err != nil {
				s.log.Debug("reconnect notice not sent", zap.String("executor", j.id), zap.Error(err))
			}
		}()
	}
	wg.Wait()
	select {
	case <-s.drained:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		n := s.spliced
		s.mu.Unlock()
		return fmt.Errorf("relay drain: %d client streams still open: %w", n, ctx.Err())
	}
}

// Stats is the relay's state at one instant, for metrics.
type Stats struct {
	Executors        int    // joined now
	SplicedStreams   int    // client streams spliced to executors now
	BlockedAddresses int    // source addresses over the failed-handshake limit
	FailedHandshakes uint64 // since start
	SplicedBytes     uint64 // since start, both directions, counted when a stream ends
	RedeemedTokens   uint64 // join and client tokens accepted, since start
	RefusedTokens    uint64 // unknown, expired, used-up or wrong-kind tokens, since start
	DuplicateJoins   uint64 // joins refused because the id is joined, alive, with the same key, since start
	RevokedKeyJoins  uint64 // joins refused because the key is revoked, since start
	RevokedSessions  uint64 // joined sessions closed because their key was revoked, since start
	RevokedClients   uint64 // client connections closed because their token was revoked, since start
	IdleDataConns    int    // data connections waiting for a client now (relay/data)
	DataSplices      uint64 // clients spliced to a data connection (raw, no mux), since start

	// FailureTable is the failed-handshake table: addresses in it and
	// blocked now, failures recorded, refusals and evictions since start.
	FailureTable admission.Stats

	// A cluster's member only:
	Clustered        bool   // a member of a cluster
	Attached         bool   // holding its etcd lease (Ready)
	ClusterMembers   int    // live members, by the watched member list
	ClusterExecutors int    // executors joined anywhere in the cluster
	PeerLinks        int    // links from this relay to peers, up now
	Forwarded        uint64 // clients forwarded to a peer, since start
	ForwardFailures  uint64 // clients no holding peer took, since start
	PresenceWrites   uint64 // presence puts and deletes written to etcd, since start
	PresenceTxns     uint64 // the etcd transactions that wrote them
}

// Stats returns the relay's current state.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{
		Executors:        len(s.executors),
		FailedHandshakes: s.failedHandshakes.Load(),
		SplicedBytes:     s.splicedBytes.Load(),
		RedeemedTokens:   s.redeemedTokens.Load(),
		RefusedTokens:    s.refusedTokens.Load(),
		DuplicateJoins:   s.duplicateJoins.Load(),
		RevokedKeyJoins:  s.revokedJoins.Load(),
		RevokedSessions:  s.revokedSessions.Load(),
		RevokedClients:   s.revokedClients.Load(),
	}
	st.SplicedStreams = s.spliced
	st.DataSplices = s.dataSplices.Load()
	for _, j := range s.executors {
		st.IdleDataConns += len(j.idle)
	}
	if c := s.cluster; c != nil {
		st.Clustered = true
		st.Attached = c.ready() == nil
		st.Forwarded, st.ForwardFailures = c.forwarded.Load(), c.forwardFail.Load()
		st.PresenceWrites, st.PresenceTxns = c.presenceOps.Load(), c.presenceTxn.Load()
		c.mu.Lock()
		st.ClusterMembers, st.ClusterExecutors = len(c.members), len(c.presence)
		for _, l := range c.peers {
			select {
			case <-l.ready:
				if l.err == nil {
					st.PeerLinks++
				}
			default:
			}
		}
		c.mu.Unlock()
	}
	st.FailureTable = s.failures.Stats()
	st.BlockedAddresses = st.FailureTable.Blocked
	return st
}

// Executors returns the ids of the joined executors.
func (s *Server) Executors() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.executors))
	for id := range s.executors {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

func fingerprint(k [32]byte) string { return identity.PublicKey(k).Fingerprint() }
