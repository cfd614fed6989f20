package executor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/flynn/noise"
	"github.com/hashicorp/yamux"
	"go.uber.org/zap"

	"github.com/outpost-exec/outpost/identity"
	"github.com/outpost-exec/outpost/internal/backoff"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/transport"
)

// JoinOptions configure Join.
type JoinOptions struct {
	RelayURL string // outpost://HOST:PORT#<relay fingerprint>
	Key      noise.DHKey
	ID       string
	// Token is needed the first time this executor joins the relay.
	Token   string
	Labels  map[string]string
	Version string
	// Authorize applies the executor's own client allow-list to every
	// client the relay brings, so a compromised relay cannot run commands.
	Authorize func(clientKey []byte) error
	Mux       transport.MuxConfig
	// Joined, if set, is called after each successful join.
	Joined func()
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
// internal one is no refusal: it is retried too.
//
// When a draining relay says relay/reconnect, Join dials a new session at
// once (after up to 250 ms of jitter, so a relay's executors do not all
// arrive in the same instant) and keeps serving the client streams already
// open on the old one until the relay closes it. At most one such old
// session is kept: a second notice closes the first.
func (s *Server) Join(ctx context.Context, opts JoinOptions) error {
	addr, fp, err := transport.ParseRelayURL(opts.RelayURL)
	if err != nil {
		return err
	}
	relayKey, err := identity.ParsePublicKey(fp)
	if err != nil {
		return fmt.Errorf("relay URL: %w", err)
	}
	if opts.Mux == (transport.MuxConfig{}) {
		opts.Mux = transport.DefaultMuxConfig()
	}
	bo := backoff.Backoff{Initial: 100 * time.Millisecond, Max: 30 * time.Second}
	var draining *yamux.Session // the old session of the last reconnect notice
	defer func() {
		if draining != nil {
			draining.Close()
		}
	}()
	for {
		joinedAt, old, err := s.joinOnce(ctx, addr, relayKey, opts)
		if errors.Is(err, ErrJoinRefused) {
			if errors.Is(err, ErrKeyRevoked) {
				s.log.Error("the relay has revoked this executor's key: it can never join again; remove executor.key (a new key is made) and join with a new join token",
					zap.String("executor", opts.ID), zap.String("relay", addr), zap.Error(err))
			}
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if old != nil {
			if draining != nil {
				draining.Close()
			}
			draining = old
			bo.Reset()
			s.log.Info("relay asked to reconnect; open client connections stay on the old session", zap.String("relay", addr))
			// Up to 250 ms, so a relay's executors do not all arrive at once.
			spread := backoff.Backoff{Initial: 250 * time.Millisecond, Max: 250 * time.Millisecond}
			if err := spread.Wait(ctx); err != nil {
				return err
			}
			continue
		}
		if !joinedAt.IsZero() && time.Since(joinedAt) > time.Minute {
			bo.Reset() // it was a healthy connection
		}
		switch {
		case errors.Is(err, ErrAlreadyJoined):
			s.log.Warn(fmt.Sprintf("executor id %s is already joined from another connection with this key — if this is not you, your executor.key is stolen: run `outpost executors revoke %s` on the relay", opts.ID, opts.ID),
				zap.String("executor", opts.ID), zap.String("relay", addr), zap.Duration("backoff", bo.Ceiling()))
		case protocol.KindOf(err) != "":
			s.log.Warn("the relay cannot take this executor now; retrying", zap.String("relay", addr), zap.Error(err), zap.Duration("backoff", bo.Ceiling()))
		default:
			s.log.Info("relay connection ended; reconnecting", zap.Error(err), zap.Duration("backoff", bo.Ceiling()))
		}
		if err := bo.Wait(ctx); err != nil {
			return err
		}
	}
}

// joinOnce joins once and serves until the session ends. When the relay
// asks for a reconnect it returns at once with the still-serving session
// (old), whose clients keep running until the relay or the caller closes it.
func (s *Server) joinOnce(ctx context.Context, addr string, relayKey identity.PublicKey, opts JoinOptions) (joinedAt time.Time, old *yamux.Session, err error) {
	raw, err := transport.DialRelay(ctx, opts.RelayURL)
	if err != nil {
		return time.Time{}, nil, err
	}
	nc, err := transport.NoiseInitiator(ctx, raw, transport.NoiseConfig{Static: opts.Key, Purpose: "relay", PeerStatic: relayKey[:]})
	if err != nil {
		raw.Close()
		return time.Time{}, nil, fmt.Errorf("relay handshake: %w", err)
	}
	sess, err := transport.MuxClient(nc, opts.Mux)
	if err != nil {
		raw.Close()
		return time.Time{}, nil, err
	}
	stop := context.AfterFunc(ctx, func() { sess.Close() })
	handedOff := false
	defer func() {
		if !handedOff {
			stop()
			sess.Close()
		}
	}()
	ctl, err := sess.OpenStream()
	if err != nil {
		return time.Time{}, nil, err
	}
	mc := transport.NewMsgpackConn(ctl, 64<<10)
	m, err := mc.Call(ctx, transport.IntID(1), protocol.MethodRelayJoin, protocol.RelayJoinParams{ExecutorID: opts.ID, Token: opts.Token, Labels: opts.Labels, Version: opts.Version})
	if err != nil {
		return time.Time{}, nil, fmt.Errorf("relay/join: %w", err)
	}
	if m.Error != nil {
		return time.Time{}, nil, joinError(m.Error)
	}
	joinedAt = time.Now()
	s.log.Info("joined the relay", zap.String("relay", addr), zap.String("executor", opts.ID))
	if opts.Joined != nil {
		opts.Joined()
	}
	// The join stream stays open; the relay may say relay/reconnect on it.
	reconnect := make(chan struct{})
	go func() {
		for {
			m, err := mc.ReadMessage(ctx)
			if err != nil {
				var malformed *transport.MalformedError
				if errors.As(err, &malformed) {
					continue
				}
				return // the session ended
			}
			if m.Kind == transport.KindNotification && m.Method == protocol.MethodRelayReconnect {
				close(reconnect)
				return
			}
		}
	}()
	served := make(chan struct{})
	go func() {
		defer close(served)
		s.serveRelayed(ctx, sess, opts)
	}()
	select {
	case <-served:
		return joinedAt, nil, errors.New("relay session closed")
	case <-reconnect:
		handedOff = true
		go func() {
			<-served
			stop()
			sess.Close()
		}()
		return joinedAt, sess, errRelayDraining
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

// serveRelayed serves every client stream the relay opens: each is a
// native connection (Noise as responder, with the executor's allow-list,
// then yamux and the method table).
func (s *Server) serveRelayed(ctx context.Context, sess *yamux.Session, opts JoinOptions) {
	for {
		st, err := sess.AcceptStream()
		if err != nil {
			return
		}
		go func() {
			defer st.Close()
			cfg := transport.NoiseConfig{Static: opts.Key, Purpose: NativePurpose, AllowXX: true}
			if opts.Authorize != nil {
				cfg.Authorize = func(peer, _ []byte) error { return opts.Authorize(peer) }
			}
			start := time.Now()
			nc, err := transport.NoiseResponder(ctx, st, cfg)
			if err != nil {
				s.log.Info("relayed client refused", zap.Error(err))
				return
			}
			ctx := withHandshake(ctx, handshakeInfo{start: start, end: time.Now(), via: "relay"})
			inner, err := transport.MuxServer(nc, opts.Mux)
			if err != nil {
				return
			}
			defer inner.Close()
			s.ServeMux(ctx, inner, opts.Mux.MaxInboundStreams)
		}()
	}
}
