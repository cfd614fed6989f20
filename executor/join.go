package executor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/flynn/noise"
	"go.uber.org/zap"

	"github.com/outpost-exec/outpost/internal/backoff"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/relay/relayclient"
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

	// Handshake limits of relayed clients, as in NativeOptions (and with
	// its defaults): every stream the relay splices to the executor is
	// admitted and served like a native connection, each relay session
	// counting as one address (see responder).
	MaxHandshakes           int
	MaxHandshakesPerAddress int
	HandshakeTimeout        time.Duration
	FirstByteTimeout        time.Duration
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
	u, err := transport.ParseURL(opts.RelayURL, transport.SchemeRelay, transport.SchemeRelayWS)
	if err != nil {
		return err
	}
	addr := u.Addr
	if opts.Mux == (transport.MuxConfig{}) {
		opts.Mux = transport.DefaultMuxConfig()
	}
	// One responder for every session: relayed clients take the native
	// path, each session one address that is never refused.
	resp, err := s.newResponder(NativeOptions{Key: opts.Key, Authorize: opts.Authorize, Mux: opts.Mux,
		MaxHandshakes: opts.MaxHandshakes, MaxHandshakesPerAddress: opts.MaxHandshakesPerAddress,
		HandshakeTimeout: opts.HandshakeTimeout, FirstByteTimeout: opts.FirstByteTimeout}, false)
	if err != nil {
		return err
	}
	bo := backoff.Backoff{Initial: 100 * time.Millisecond, Max: 30 * time.Second}
	var draining *relayclient.Conn // the old session of the last reconnect notice
	defer func() {
		if draining != nil {
			draining.Close()
		}
	}()
	for session := 1; ; session++ {
		joinedAt, old, err := s.joinOnce(ctx, resp, fmt.Sprintf("relay %s session %d", addr, session), opts)
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

// joinOnce joins once (a relayclient connection and relay/join) and
// serves until the session ends; bucket is the address its clients count
// against in resp's gate. When the relay asks for a reconnect it returns
// at once with the still-serving session (old), whose clients keep
// running until the relay or the caller closes it.
func (s *Server) joinOnce(ctx context.Context, resp *responder, bucket string, opts JoinOptions) (joinedAt time.Time, old *relayclient.Conn, err error) {
	rc, err := relayclient.Dial(ctx, opts.RelayURL, opts.Key, relayclient.Options{Mux: opts.Mux})
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
	err = rc.Join(ctx, protocol.RelayJoinParams{ExecutorID: opts.ID, Token: opts.Token, Labels: opts.Labels, Version: opts.Version})
	if refusal := (*protocol.Error)(nil); errors.As(err, &refusal) {
		return time.Time{}, nil, joinError(refusal)
	}
	if err != nil {
		return time.Time{}, nil, err
	}
	joinedAt = time.Now()
	s.log.Info("joined the relay", zap.String("relay", rc.Addr()), zap.String("executor", opts.ID))
	if opts.Joined != nil {
		opts.Joined()
	}
	// The join stream stays open; the relay may say relay/reconnect on it.
	reconnect := make(chan struct{})
	go func() {
		if rc.AwaitNotification(ctx, protocol.MethodRelayReconnect) == nil {
			close(reconnect)
		}
	}()
	served := make(chan struct{})
	go func() {
		defer close(served)
		s.serveRelayed(resp, rc, bucket)
	}()
	select {
	case <-served:
		return joinedAt, nil, errors.New("relay session closed")
	case <-reconnect:
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

// serveRelayed serves every client stream the relay opens on rc, until
// rc ends, as the native listener serves its connections: through resp
// (its admission gate, the Noise responder with the executor's
// allow-list, yamux, the method table), every stream counted against the
// address bucket.
func (s *Server) serveRelayed(resp *responder, rc *relayclient.Conn, bucket string) {
	acc := resp.accept(rc.Streams(), func(net.Conn) string { return bucket }, "relay")
	<-rc.Done()
	acc.Close()
}
