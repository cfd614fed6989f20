package executor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/flynn/noise"
	"go.uber.org/zap"

	"github.com/outpost-exec/outpost/internal/backoff"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/relay/relayclient"
	"github.com/outpost-exec/outpost/transport"
)

// JoinConfig configures Join. Start from DefaultJoinConfig and set
// RelayURL, Key and ID; Join fills any other field left zero from
// DefaultJoinConfig.
type JoinConfig struct {
	// RelayURL is the relay, outpost://HOST:PORT#<relay fingerprint> or
	// outpost+ws://HOST:PORT#<relay fingerprint> (required).
	RelayURL string
	// Key is the executor's static key (required).
	Key noise.DHKey
	// ID is the executor's id at the relay (required).
	ID string
	// Token is needed the first time this executor joins the relay.
	Token   string
	Labels  map[string]string
	Version string
	// Authorize applies the executor's own client allow-list to every
	// client the relay brings, so a compromised relay cannot run commands
	// (default nil: any client the relay brings).
	Authorize func(clientKey []byte) error
	// Mux configures the multiplexer with the relay and inside every relayed client
	// stream (default transport.DefaultMuxConfig()).
	Mux transport.MuxConfig
	// Joined, if set, is called after each successful join — of every
	// session, so concurrently when several relays of a cluster are
	// joined (RelayConnections).
	Joined func()

	// Handshake limits of relayed clients, as in NativeConfig and with its
	// defaults (256, 16, 10 s and 3 s): every stream the relay splices to
	// the executor is admitted and served like a native connection, each
	// relay session counting as one address (see responder) of at most
	// DefaultMaxNativeConnections connections, so MaxHandshakes must stay
	// below that.
	MaxHandshakes           int
	MaxHandshakesPerAddress int
	HandshakeTimeout        time.Duration
	FirstByteTimeout        time.Duration

	// DataConns is how many data connections the executor keeps open to
	// the relay, idle, for its next clients (relay/data, PROTOCOL.md
	// section 9.6; default DefaultDataConns, 2; at most MaxDataConns;
	// negative: none). A client spliced to one reaches the executor on a
	// raw connection the relay copies with splice(2), instead of a stream
	// on the joined session that the relay re-encrypts; each one taken is
	// replaced in the background. With none idle, or a relay that predates
	// them, clients come on streams as before.
	DataConns int

	// RelayConnections is how many sessions the executor keeps, each on
	// another relay of a cluster (0..MaxRelayConnections, 8; 0:
	// automatic — one with a single relay, DefaultClusterRelayConnections,
	// 2, once the relay's join answer names a cluster). A relay takes one
	// session per executor id, so they go to distinct relays, at most one
	// per member the cluster names; a single relay gets one whatever the
	// count. Members are dialled at their outpost:// addresses: with an
	// outpost+ws:// RelayURL the automatic count stays one session, on
	// that URL.
	RelayConnections int
}

// Bounds of JoinConfig.DataConns.
const (
	DefaultDataConns = 2
	MaxDataConns     = 16
)

// DefaultJoinConfig returns the default configuration of Join, without
// the RelayURL, Key and ID it needs.
func DefaultJoinConfig() JoinConfig {
	d := DefaultNativeConfig()
	return JoinConfig{
		Mux:                     d.Mux,
		MaxHandshakes:           d.MaxHandshakes,
		MaxHandshakesPerAddress: d.MaxHandshakesPerAddress,
		HandshakeTimeout:        d.HandshakeTimeout,
		FirstByteTimeout:        d.FirstByteTimeout,
		DataConns:               DefaultDataConns,
	}
}

// withDefaults fills every zero field that has a default from
// DefaultJoinConfig; the rest is left to Validate.
func (c JoinConfig) withDefaults() JoinConfig {
	d := DefaultJoinConfig()
	if c.Mux == (transport.MuxConfig{}) {
		c.Mux = d.Mux
	}
	c.MaxHandshakes = cmp.Or(c.MaxHandshakes, d.MaxHandshakes)
	c.MaxHandshakesPerAddress = cmp.Or(c.MaxHandshakesPerAddress, d.MaxHandshakesPerAddress)
	c.HandshakeTimeout = cmp.Or(c.HandshakeTimeout, d.HandshakeTimeout)
	c.FirstByteTimeout = cmp.Or(c.FirstByteTimeout, d.FirstByteTimeout)
	c.DataConns = cmp.Or(c.DataConns, d.DataConns)
	return c
}

// Validate reports the first invalid field. It takes the configuration
// as it is: a zero field is invalid here, though Join would fill it.
func (c JoinConfig) Validate() error {
	if _, err := transport.ParseURL(c.RelayURL, transport.SchemeRelay, transport.SchemeRelayWS); err != nil {
		return fmt.Errorf("executor: JoinConfig.RelayURL: %w", err)
	}
	switch {
	case !validKey(c.Key):
		return errors.New("executor: JoinConfig.Key is required (an X25519 key pair)")
	}
	if err := protocol.CheckExecutorID(c.ID); err != nil {
		return fmt.Errorf("executor: JoinConfig.ID: %w", err)
	}
	if err := c.Mux.Validate(); err != nil {
		return fmt.Errorf("executor: JoinConfig.Mux: %w", err)
	}
	switch {
	case c.MaxHandshakes < 1:
		return errors.New("executor: JoinConfig.MaxHandshakes must be at least 1")
	case c.MaxHandshakes >= DefaultMaxNativeConnections:
		return fmt.Errorf("executor: JoinConfig.MaxHandshakes (%d) must be below %d, the connections of a relay session", c.MaxHandshakes, DefaultMaxNativeConnections)
	case c.MaxHandshakesPerAddress < 1:
		return errors.New("executor: JoinConfig.MaxHandshakesPerAddress must be at least 1")
	case c.HandshakeTimeout <= 0:
		return errors.New("executor: JoinConfig.HandshakeTimeout must be positive")
	case c.FirstByteTimeout <= 0:
		return errors.New("executor: JoinConfig.FirstByteTimeout must be positive")
	case c.DataConns > MaxDataConns:
		return fmt.Errorf("executor: JoinConfig.DataConns must be at most %d", MaxDataConns)
	case c.RelayConnections < 0 || c.RelayConnections > MaxRelayConnections:
		return fmt.Errorf("executor: JoinConfig.RelayConnections must be 0 (automatic) to %d", MaxRelayConnections)
	}
	return nil
}

// native is the configuration of the responder that serves the relayed
// clients (the native listener's defaults for the rest).
func (c JoinConfig) native() NativeConfig {
	return NativeConfig{Key: c.Key, Authorize: c.Authorize, Mux: c.Mux,
		MaxHandshakes: c.MaxHandshakes, MaxHandshakesPerAddress: c.MaxHandshakesPerAddress,
		HandshakeTimeout: c.HandshakeTimeout, FirstByteTimeout: c.FirstByteTimeout}
}

// ErrJoinRefused wraps a relay's refusal (bad token, another key owns the
// id, a revoked key): retrying does not help. A relay that answers with a
// temporary kind (exhausted: it is full; unavailable) or internal is not
// refusing: Join retries.
var ErrJoinRefused = errors.New("the relay refused this executor")

// ErrKeyRevoked wraps the relay's refusal of a key revoked there (`outpost
// executors revoke`); it comes wrapped in ErrJoinRefused too. Only a new
// key, joining with a new join token, can join again.
var ErrKeyRevoked = errors.New("the relay has revoked this executor's key")

// ErrAlreadyJoined wraps the relay's refusal of a join for an id that is
// joined, with this same key, on another connection that still answers the
// relay. It is not a final refusal: Join retries with backoff, since the
// other connection may be this executor's own, dead without the relay
// having noticed yet. If it persists, another host holds this key.
var ErrAlreadyJoined = errors.New("the executor id is already joined from another connection with this key")

// errRelayDraining: the relay sent relay/reconnect.
var errRelayDraining = errors.New("the relay is draining")

// Join keeps the executor joined to a relay until ctx ends: it dials out,
// registers, serves every client the relay splices to it, and reconnects
// with jittered exponential backoff (100 ms to 30 s) when the connection
// drops. A refusal by the relay ends it with ErrJoinRefused, except
// ErrAlreadyJoined (the id is live on another connection with this key),
// which it logs at warn level and retries with the same backoff. An error
// of a temporary kind (a full relay, one that is unavailable) or an
// internal one is no refusal: it is retried too. A relay that presents
// another key than its URL names ends it with a
// *relayclient.KeyMismatchError, logged at error level.
//
// When a draining relay says relay/reconnect, Join dials a new session at
// once (after up to 250 ms of jitter, so a relay's executors do not all
// arrive in the same instant) and keeps serving the client streams already
// open on the old one until the relay closes it. At most one such old
// session is kept: a second notice closes the first.
//
// When the relay's answer names a cluster, Join keeps up to
// cfg.RelayConnections sessions ("slots"; automatic: 2), each on a
// distinct member and each as above — its own backoff, drain handling and
// data connections, all to its own member. Once members are known every
// slot dials a member's address (with the configured URL's fingerprint),
// not the configured URL, which a load balancer could land on a relay
// another slot holds; a slot whose session ends, or whose relay drains,
// moves to a member no other slot holds, another than the one it left
// when there is a choice. The members are refreshed from every answer;
// with fewer members than slots, the surplus slots end. Only when no slot
// is joined and every known member failed does a slot try the configured
// URL again (the cluster may have moved to new addresses). A refusal that
// ends Join on one slot ends every slot.
//
// cfg is validated first, its zero fields filled from DefaultJoinConfig.
func (s *Server) Join(ctx context.Context, cfg JoinConfig) error {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	u, err := transport.ParseURL(cfg.RelayURL, transport.SchemeRelay, transport.SchemeRelayWS)
	if err != nil {
		return err
	}
	// One responder for every session: relayed clients take the native
	// path, each session one address that is never refused.
	resp, err := s.newResponder(cfg.native(), false)
	if err != nil {
		return err
	}
	return newRoster(s, resp, cfg, u).run(ctx)
}

// joinOnce joins once (a relayclient connection and relay/join) and
// serves until the session ends; bucket is the address its clients count
// against in resp's gate. onJoin, called with the relay's answer once
// joined, returns log fields naming the session (none for a single
// relay). When the relay asks for a reconnect it returns at once with the
// still-serving session (old), whose clients keep running until the relay
// or the caller closes it.
func (s *Server) joinOnce(ctx context.Context, resp *responder, bucket string, cfg JoinConfig, onJoin func(protocol.RelayJoinResult) []zap.Field, onReconnect func(protocol.RelayReconnectParams)) (joinedAt time.Time, old *relayclient.Conn, err error) {
	rc, err := relayclient.Dial(ctx, cfg.RelayURL, cfg.Key, relayclient.Options{Mux: cfg.Mux})
	if err != nil {
		return time.Time{}, nil, err
	}
	stop := context.AfterFunc(ctx, func() { rc.Close() })
	handedOff := false
	defer func() {
		if !handedOff {
			stop()
			rc.Close()
		}
	}()
	res, err := rc.Join(ctx, protocol.RelayJoinParams{ExecutorID: cfg.ID, Token: cfg.Token, Labels: cfg.Labels, Version: cfg.Version})
	if refusal := (*protocol.Error)(nil); errors.As(err, &refusal) {
		return time.Time{}, nil, joinError(refusal)
	}
	if err != nil {
		return time.Time{}, nil, err
	}
	joinedAt = time.Now()
	s.log.Info("joined the relay", append([]zap.Field{zap.String("relay", rc.Addr()), zap.String("executor", cfg.ID)}, onJoin(res)...)...)
	if cfg.Joined != nil {
		cfg.Joined()
	}
	// The join stream stays open; the relay may say relay/reconnect on it.
	reconnect := make(chan struct{})
	go func() {
		m, err := rc.AwaitNotification(ctx, protocol.MethodRelayReconnect)
		if err != nil {
			return
		}
		// A cluster's draining member names the members left: where
		// this session goes next.
		var p protocol.RelayReconnectParams
		if m.Params != nil && m.Params.Decode(&p) == nil && onReconnect != nil {
			onReconnect(p)
		}
		close(reconnect)
	}()
	links := newRelayLinks(rc.Streams())
	poolCtx, stopPool := context.WithCancel(ctx)
	pool := make(chan struct{})
	go func() {
		defer close(pool)
		s.runDataPool(poolCtx, cfg, links)
	}()
	served := make(chan struct{})
	go func() {
		defer close(served)
		s.serveRelayed(resp, rc, links, bucket)
	}()
	select {
	case <-served:
		stopPool()
		<-pool
		return joinedAt, nil, errors.New("relay session closed")
	case <-reconnect:
		// A draining relay brings no more clients: its idle data
		// connections go; the clients on the old session stay.
		stopPool()
		<-pool
		handedOff = true
		go func() {
			<-served
			stop()
			rc.Close()
		}()
		return joinedAt, rc, errRelayDraining
	}
}

// joinError is what a relay's answer to relay/join means for Join: the id
// live elsewhere (ErrAlreadyJoined, retried), a revoked key (refused for
// good), a temporary or internal trouble of the relay's (retried: the
// *protocol.Error itself), or a refusal (ErrJoinRefused). A relay that
// sends no kinds is refused, as before kinds.
func joinError(e *protocol.Error) error {
	switch e.Code {
	case protocol.CodeRelayAlreadyJoined:
		return fmt.Errorf("%w: %s", ErrAlreadyJoined, e.Message)
	case protocol.CodeRelayKeyRevoked:
		return fmt.Errorf("%w: %w: %w", ErrJoinRefused, ErrKeyRevoked, e)
	}
	switch e.Kind() {
	case protocol.KindExhausted, protocol.KindUnavailable, protocol.KindInternal:
		return fmt.Errorf("relay/join: %w", e)
	}
	return fmt.Errorf("%w: %w", ErrJoinRefused, e)
}

// serveRelayed serves every client link of rc's session — a stream the
// relay opens on rc, or a data connection it brings a client on — until
// rc ends, as the native listener serves its connections: through resp
// (its admission gate, the Noise responder with the executor's
// allow-list, the multiplexer, the method table), every link counted against the
// address bucket. Closing ends the data connections in use too, as it
// does the streams.
func (s *Server) serveRelayed(resp *responder, rc *relayclient.Conn, links *relayLinks, bucket string) {
	acc := resp.accept(links, func(net.Conn) string { return bucket }, "relay")
	<-rc.Done()
	acc.Close()
}

// relayLinks is the listener of one relay session's client links: the
// streams the relay opens on the session and the data connections the
// pool hands over once the relay brings a client on them. conns is
// unbuffered: a link waits for Accept, which the responder's connection
// limit paces.
type relayLinks struct {
	streams net.Listener
	conns   chan net.Conn
	done    chan struct{}
	once    sync.Once
}

func newRelayLinks(streams net.Listener) *relayLinks {
	l := &relayLinks{streams: streams, conns: make(chan net.Conn), done: make(chan struct{})}
	go func() {
		for {
			c, err := streams.Accept()
			if err != nil {
				l.Close()
				return
			}
			if !l.deliver(context.Background(), c) {
				c.Close()
				return
			}
		}
	}()
	return l
}

// deliver hands c to Accept; false if the listener or ctx ended first.
func (l *relayLinks) deliver(ctx context.Context, c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		return false
	case <-ctx.Done():
		return false
	}
}

func (l *relayLinks) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close closes the listener and the session.
func (l *relayLinks) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.streams.Close()
	})
	return nil
}

func (l *relayLinks) Addr() net.Addr { return l.streams.Addr() }

// runDataPool keeps cfg.DataConns data connections idle at the relay for
// links' session until ctx ends, each on a goroutine of its own that
// hands its connection to links once the relay brings a client, and
// dials the next.
func (s *Server) runDataPool(ctx context.Context, cfg JoinConfig, links *relayLinks) {
	var wg sync.WaitGroup
	for range max(cfg.DataConns, 0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.dataWorker(ctx, cfg, links)
		}()
	}
	wg.Wait()
}

// dataWorker keeps one data connection idle at the relay. It gives up for
// the session when the relay predates data connections or refuses them
// for good; otherwise it retries with backoff (100 ms to 10 s).
func (s *Server) dataWorker(ctx context.Context, cfg JoinConfig, links *relayLinks) {
	bo := backoff.Backoff{Initial: 100 * time.Millisecond, Max: 10 * time.Second}
	for ctx.Err() == nil {
		c, err := relayclient.DialData(ctx, cfg.RelayURL, cfg.Key, relayclient.Options{HandshakeTimeout: cfg.HandshakeTimeout}, cfg.ID)
		if err != nil {
			switch protocol.KindOf(err) {
			case protocol.KindRefused, protocol.KindInvalid, protocol.KindUnsupported, protocol.KindExhausted:
				s.log.Info("the relay takes no (more) data connections; its clients come on the joined session", zap.String("executor", cfg.ID), zap.Error(err))
				return
			}
			if errors.Is(err, relayclient.ErrNoHandshakeRequests) {
				s.log.Debug("the relay predates data connections; its clients come on the joined session", zap.String("executor", cfg.ID))
				return
			}
			if ctx.Err() == nil {
				s.log.Debug("data connection failed; retrying", zap.String("executor", cfg.ID), zap.Error(err))
			}
			if bo.Wait(ctx) != nil {
				return
			}
			continue
		}
		stop := context.AfterFunc(ctx, func() { c.Close() })
		err = relayclient.AwaitClient(c)
		if !stop() {
			c.Close()
			return
		}
		if err != nil {
			c.Close()
			if bo.Wait(ctx) != nil {
				return
			}
			continue
		}
		bo.Reset()
		if !links.deliver(ctx, c) {
			c.Close()
			return
		}
	}
}
