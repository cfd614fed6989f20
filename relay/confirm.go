package relay

// relay/connect in the handshake with early and confirm (PROTOCOL.md
// 9.3): one round trip to the executor when the connect is fresh,
// nothing spent on a replay.
//
// The client's message 1 carries its inner handshake (early) and a
// freshness stamp (fresh.go). A fresh message 1 is admitted at once: the
// token redeemed (a use per client key), a slot taken, the target opened
// and early written, so the executor answers — and, with the inner early
// data, starts the command — while message 2 travels. Any other (a
// replay, a skewed clock) is only checked; the relay then waits for the
// client's first record, the confirmation, which only the holder of the
// handshake's keys can send, and admits it then. Either way the
// executor's bytes go to the client raw from message 2 on, and the
// client's bytes pass once it has confirmed. A replay never confirms: it
// spends nothing, holds nothing, and counts as a failed handshake of its
// address.

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/transport"
)

var connectReady = []byte(protocol.RelayConnectReady)

// admitFresh admits hr at message 1 if its stamp is fresh: it redeems
// the token, opens the target and writes early there. Otherwise (or on
// any failure here) spliceConfirmed does it after the confirmation.
func (s *Server) admitFresh(ctx context.Context, hr *handshakeRequest) {
	if !s.fresh.take(hr.connect.Fresh) {
		return
	}
	tok, t, perr := s.openClient(ctx, *hr.connect, hr.client)
	if perr == nil && t.key != hr.execKey {
		t.release()
		perr = protocol.KindErrorf(protocol.KindUnavailable, protocol.CodeNotFound, "the executor's key changed")
	}
	if perr != nil {
		return
	}
	t.conn.SetWriteDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
	_, err := t.conn.Write(hr.connect.Early)
	t.conn.SetWriteDeadline(time.Time{})
	if err != nil {
		t.release()
		return
	}
	hr.admitted, hr.admittedTok = t, tok
}

// spliceConfirmed carries on a relay/connect with early and confirm after
// message 2: the executor's answer goes to the client at once; the
// client's bytes go to the executor once it has confirmed, and its token
// is redeemed.
func (s *Server) spliceConfirmed(nc *transport.NoiseConn, hr *handshakeRequest) {
	p := *hr.connect
	t, tok := hr.admitted, hr.admittedTok
	hr.admitted = nil
	atOnce := t != nil
	client := nc.RawWriter()
	var down chan uint64
	if atOnce {
		// Admitted at message 1: revocable from now on.
		defer s.trackClient(tok, hr.client, func() { client.Close(); t.conn.Close() })()
		down = make(chan uint64, 1)
		go func() { down <- spliceHalf(client, t.conn) }()
	}
	err := s.awaitConfirmation(nc, connectReady)
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
	if t == nil {
		// Admitted now. Used up or revoked since message 1: the client's
		// session breaks here, and its next connect hears why.
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.HandshakeTimeout)
		defer cancel()
		var perr *protocol.Error
		tok, t, perr = s.openClient(ctx, p, hr.client)
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
	if !atOnce {
		defer s.trackClient(tok, hr.client, func() { raw.Conn.Close(); t.conn.Close() })()
	}
	start := time.Now()
	n := spliceHalf(t.conn, raw.Conn) + <-down
	s.splicedBytes.Add(n)
	s.log.Info("client disconnected", zap.String("client", hr.client), zap.String("executor", p.ExecutorID), zap.Uint64("bytes", n), zap.Duration("duration", time.Since(start)))
}
