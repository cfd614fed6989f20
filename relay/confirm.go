package relay

// relay/connect in the handshake with early and confirm (PROTOCOL.md
// 9.3): one round trip to the executor, nothing spent on a replay.
//
// The client's message 1 carries its inner handshake (early). A recording
// of it can be replayed, so the relay spends nothing on message 1: it
// checks the token and, speculating, takes a slot, opens the target and
// writes early to it, so the executor answers at once. After message 2
// it passes the executor's bytes to the client raw — they are sealed to
// the client's ephemeral key, useless to anyone else — and waits for the
// client's first Noise record, RelayConnectReady, which only the holder of
// the handshake's keys can send. Then it redeems the token (a use per
// client key) and lets the client's bytes through. A replay never sends
// the record: its speculation ends at the handshake timeout, or when it
// hangs up, and counts as a failed handshake of its address.
//
// Bound: a client key has at most maxSpeculations speculative targets at
// once (a replay flood of one recording holds at most that many, for at
// most Config.HandshakeTimeout each); past it a connect is still served,
// its early written once the confirmation comes, a round trip later.

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/transport"
)

// maxSpeculations bounds the speculative targets of one client key.
const maxSpeculations = 4

var connectReady = []byte(protocol.RelayConnectReady)

// speculate opens hr's target and writes its early there, if the client
// key has a speculation left; otherwise spliceConfirmed does it after the
// confirmation. Any failure here leaves that to spliceConfirmed too.
func (s *Server) speculate(ctx context.Context, hr *handshakeRequest, tokID string) {
	s.mu.Lock()
	if s.speculations[hr.client] >= maxSpeculations {
		s.mu.Unlock()
		return
	}
	if s.speculations == nil {
		s.speculations = map[string]int{}
	}
	s.speculations[hr.client]++
	s.mu.Unlock()
	t, perr := s.clientTarget(ctx, hr.connect.ExecutorID, hr.client, tokID)
	if perr == nil && t.key != hr.execKey {
		t.release()
		perr = protocol.KindErrorf(protocol.KindUnavailable, protocol.CodeNotFound, "the executor's key changed")
	}
	if perr == nil {
		t.conn.SetWriteDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
		_, err := t.conn.Write(hr.connect.Early)
		t.conn.SetWriteDeadline(time.Time{})
		if err == nil {
			hr.speculative = t
			return
		}
		t.release()
	}
	s.endSpeculation(hr.client)
}

// endSpeculation gives back one of client's speculations.
func (s *Server) endSpeculation(client string) {
	s.mu.Lock()
	decrement(s.speculations, client)
	s.mu.Unlock()
}

// spliceConfirmed carries on a relay/connect with early and confirm after
// message 2: the executor's answer goes to the client at once; the
// client's bytes go to the executor once it has confirmed, and its token
// is redeemed.
func (s *Server) spliceConfirmed(nc *transport.NoiseConn, hr *handshakeRequest) {
	p := *hr.connect
	t := hr.speculative
	hr.speculative = nil
	client := nc.RawWriter()
	var down chan uint64
	if t != nil {
		down = make(chan uint64, 1)
		go func() { down <- spliceHalf(client, t.conn) }()
	}
	err := s.awaitConfirmation(nc, connectReady)
	if t != nil {
		s.endSpeculation(hr.client)
	}
	fail := func() {
		if t != nil {
			t.release()
			<-down
		}
	}
	if err != nil {
		s.failedHandshakes.Add(1)
		s.failed(remoteIP(hr.remote))
		s.log.Debug("client did not confirm its connect", zap.String("client", hr.client), zap.String("remote", hr.remote), zap.Error(err))
		fail()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.HandshakeTimeout)
	defer cancel()
	tok, err := s.redeem(TokenClient, p.Token, hr.client)
	if err != nil {
		// Used up or revoked since message 1: the client's session breaks
		// here, and its next connect hears why.
		s.log.Info("client connect refused", zap.String("client", hr.client), zap.String("remote", hr.remote), zap.String("executor", p.ExecutorID),
			zap.String("outcome", "refused"), zap.String("kind", string(refusalKind(err))), zap.String("reason", err.Error()))
		fail()
		return
	}
	if t == nil {
		var perr *protocol.Error
		t, perr = s.clientTarget(ctx, p.ExecutorID, hr.client, tok.ID)
		if perr == nil && t.key != hr.execKey {
			t.release()
			perr = protocol.KindErrorf(protocol.KindUnavailable, protocol.CodeNotFound, "the executor's key changed")
		}
		if perr != nil {
			s.log.Info("client connect refused", zap.String("client", hr.client), zap.String("remote", hr.remote), zap.String("executor", p.ExecutorID),
				zap.String("outcome", "refused"), zap.String("kind", string(protocol.KindOf(perr))), zap.String("reason", perr.Message))
			return
		}
		t.conn.SetWriteDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
		_, err := t.conn.Write(p.Early)
		t.conn.SetWriteDeadline(time.Time{})
		if err != nil {
			t.release()
			return
		}
		down = make(chan uint64, 1)
		go func() { down <- spliceHalf(client, t.conn) }()
	}
	defer t.release()
	raw, err := nc.Detach()
	if err != nil {
		t.conn.Close()
		<-down
		return
	}
	if ahead := raw.TakePrefix(); len(ahead) > 0 {
		if _, err := t.conn.Write(ahead); err != nil {
			raw.Conn.Close()
			t.conn.Close()
			<-down
			return
		}
	}
	s.log.Info("client connected", zap.String("client", hr.client), zap.String("remote", hr.remote), zap.String("executor", p.ExecutorID),
		zap.String("outcome", "spliced"), zap.String("token_id", tok.ID), zap.Bool("data_conn", t.data), zap.Bool("early", true), zap.String("via", t.via))
	defer s.trackClient(tok, hr.client, func() { raw.Conn.Close(); t.conn.Close() })()
	start := time.Now()
	n := spliceHalf(t.conn, raw.Conn) + <-down
	s.splicedBytes.Add(n)
	s.log.Info("client disconnected", zap.String("client", hr.client), zap.String("executor", p.ExecutorID), zap.Uint64("bytes", n), zap.Duration("duration", time.Since(start)))
}
