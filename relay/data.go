package relay

// Requests in the handshake, and data connections (PROTOCOL.md sections
// 9.3 and 9.6).
//
// A peer may put one request in the payload of its Noise IK message 1
// instead of opening the multiplexer afterwards; the relay answers it in message 2's
// payload, and the connection then carries raw bytes — no multiplexer, no relay
// Noise records:
//
//	relay/data    {executorId}                          → {}                     executor: a data connection
//	relay/connect {executorId, token, early?, confirm?} → {executorKey, verdict?} client: spliced
//
// A data connection is an executor's offer of a connection for its next
// client. After message 2 the executor sends one Noise record, dataReady,
// proving it holds the session keys (message 1 alone could be a replay of
// an old one: only the holder of the executor's key and of the ephemeral
// key behind this message 1 can encrypt that record); then the relay
// registers the connection, raw from then on, among the idle ones of the
// joined session of that id, whose key must be the one the connection
// authenticated with. For a client, the relay takes the newest idle
// one, writes dataClientHeader, and splices; the executor serves what
// follows as a native connection. A spliced pair of TCP sockets is copied
// with splice(2): the relay neither decrypts nor re-encrypts a byte.
//
// A client's relay/connect in message 1 spends nothing unless the relay
// can tell it from a replay of a recording: the relay checks the token
// and answers, and redeems it on the client's first Noise record, which a
// replayer cannot encrypt — or at once for a message 1 stamped fresh
// (fresh.go). A client that knows the executor's key sends its inner
// handshake in message 1 (early, with confirm and fresh) and a
// confirmation as its first record (confirm.go). One that does not (first contact) takes the key from the
// answer and sends its inner handshake as its first record
// (readInnerHello), and the relay answers with its verdict (spliceEarly).
//
// Bounds: Config.MaxDataConns idle data connections per joined executor,
// each one goroutine (its connection's own); spliced ones count against
// Config.MaxStreamsPerExecutor like streams; early is within the 4 KiB
// handshake payload; every connection counts against
// Config.MaxConnections.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"time"

	"go.uber.org/zap"

	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/transport"
)

// dataReady is the plaintext of the record an executor sends on a data
// connection after the handshake; dataClientHeader is the byte the relay
// sends on it, raw, before a client's bytes.
var dataReady = []byte(protocol.RelayDataReady)

const dataClientHeader = protocol.RelayDataClient

// handshakeRequest is a request read from a handshake's payload.
type handshakeRequest struct {
	reply    []byte // message 2's payload
	answered bool   // message 2 carried reply (false: an XX handshake)

	// relay/connect, admissible (nothing spent yet): the request, its id
	// and the executor key the answer names.
	connect *protocol.RelayConnectParams
	reqID   transport.ID
	execKey [32]byte
	client  string
	remote  string
	// admitted: a fresh message 1's target, opened and early written at
	// once (admitFresh; its token redeemed as admittedTok).
	admitted    *clientTarget
	admittedTok Token

	// relay/data, admitted so far.
	dataFor *joined
	peer    [32]byte

	// relay/forward from a peer relay, admitted: its executor (and slot).
	forward *joined
	fwd     protocol.RelayForwardParams
}

// handshakeRequest answers the request in a handshake's message 1. It
// runs inside the handshake, before message 2.
func (s *Server) handshakeRequest(peer [32]byte, remote string, payload []byte) *handshakeRequest {
	hr := &handshakeRequest{peer: peer, remote: remote, client: fingerprint(peer)}
	fail := func(id transport.ID, e *protocol.Error) *handshakeRequest {
		hr.reply, _ = transport.PayloadError(id, e)
		return hr
	}
	m, err := transport.ParsePayload(payload)
	var malformed *transport.MalformedError
	switch {
	case errors.As(err, &malformed), err != nil:
		return fail(transport.MalformedID, protocol.KindErrorf(malformedKind(err), protocol.CodeInvalidRequest, "relay: %v", err))
	case m.Kind != transport.KindRequest:
		return fail(transport.MalformedID, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidRequest, "relay: the handshake's payload must be a request"))
	}
	switch m.Method {
	case protocol.MethodRelayConnect:
		p, perr := parseConnect(m)
		if perr != nil {
			s.log.Info("client connect refused", zap.String("client", hr.client), zap.String("remote", remote), zap.String("outcome", "refused"), zap.String("kind", string(protocol.KindOf(perr))), zap.String("reason", perr.Message))
			return fail(m.ID, perr)
		}
		if len(p.Early) > 0 && !p.Confirm {
			// Early without Confirm is what clients before the
			// confirmation sent, and what a replayer of their recordings
			// has. An empty message 2 says "an older relay": such a client
			// takes the mux path (a full handshake), a replay gets nothing.
			s.log.Info("client connect refused", zap.String("client", hr.client), zap.String("remote", remote), zap.String("executor", p.ExecutorID),
				zap.String("outcome", "refused"), zap.String("reason", "early data without confirmation (an older client, or a replay); answered as an older relay"))
			s.failed(remoteIP(remote))
			return hr
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.HandshakeTimeout)
		defer cancel()
		key, _, perr := s.admissible(ctx, p, hr.client)
		if perr != nil {
			s.log.Info("client connect refused", zap.String("client", hr.client), zap.String("remote", remote), zap.String("executor", p.ExecutorID),
				zap.String("outcome", "refused"), zap.String("kind", string(protocol.KindOf(perr))), zap.String("reason", perr.Message))
			return fail(m.ID, perr)
		}
		hr.connect, hr.reqID, hr.execKey = &p, m.ID, key
		if len(p.Early) == 0 {
			// First contact: the inner handshake comes in the first
			// record, and the verdict follows it.
			hr.reply, _ = transport.PayloadResult(m.ID, protocol.RelayConnectResult{ExecutorKey: fingerprint(key), Verdict: true, Cluster: s.connectMembers()})
			return hr
		}
		s.admitFresh(ctx, hr)
		hr.reply, _ = transport.PayloadResult(m.ID, protocol.RelayConnectResult{ExecutorKey: fingerprint(key), Cluster: s.connectMembers()})
		return hr
	case protocol.MethodRelayForward:
		var p protocol.RelayForwardParams
		if m.Params == nil || m.Params.Decode(&p) != nil || protocol.CheckExecutorID(p.ExecutorID) != nil {
			return fail(m.ID, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "relay/forward: a valid executorId is required"))
		}
		j, perr := s.forwardAllowed(peer, p, remote)
		if perr != nil {
			return fail(m.ID, perr)
		}
		hr.forward, hr.fwd = j, p
		hr.reply, _ = transport.PayloadResult(m.ID, protocol.RelayConnectResult{ExecutorKey: fingerprint(j.key)})
		return hr
	case protocol.MethodRelayData:
		var p protocol.RelayDataParams
		if m.Params == nil || m.Params.Decode(&p) != nil || protocol.CheckExecutorID(p.ExecutorID) != nil {
			return fail(m.ID, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "relay/data: a valid executorId is required"))
		}
		j, perr := s.dataAllowed(p.ExecutorID, peer)
		if perr != nil {
			return fail(m.ID, perr)
		}
		hr.dataFor = j
		hr.reply, _ = transport.PayloadResult(m.ID, protocol.Empty{})
		return hr
	}
	return fail(m.ID, protocol.KindErrorf(protocol.KindUnsupported, protocol.CodeMethodNotFound, "relay: method %q cannot travel in the handshake", m.Method))
}

// dataAllowed says whether peer may offer a data connection for id: the
// id must be joined, by peer's key, and have room for another idle one.
func (s *Server) dataAllowed(id string, peer [32]byte) (*joined, *protocol.Error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.executors[id]
	switch {
	case s.draining:
		return nil, protocol.KindErrorf(protocol.KindUnavailable, protocol.CodeInvalidRequest, "relay/data: %v", ErrShuttingDown)
	case j == nil || j.gone:
		return nil, protocol.KindErrorf(protocol.KindUnavailable, protocol.CodeNotFound, "relay/data: executor %s is not joined (join first)", id)
	case j.key != peer:
		return nil, protocol.KindErrorf(protocol.KindRefused, protocol.CodeInvalidRequest, "relay/data: %v", ErrExecutorKeyMismatch)
	case len(j.idle) >= s.cfg.MaxDataConns:
		return nil, protocol.KindErrorf(protocol.KindExhausted, protocol.CodeInvalidRequest, "relay/data: executor %s has %d idle data connections, the most this relay allows", id, s.cfg.MaxDataConns)
	}
	return j, nil
}

// abandon gives back what admitFresh took when the handshake failed.
func (hr *handshakeRequest) abandon(s *Server) {
	if t := hr.admitted; t != nil {
		hr.admitted = nil
		t.release()
	}
}

// serveHandshakeRequest carries on after a handshake whose message 1
// held a request: the client's splice, the executor's data connection,
// or (after a refusal) nothing.
func (s *Server) serveHandshakeRequest(ctx context.Context, nc *transport.NoiseConn, hr *handshakeRequest) {
	if !hr.answered {
		// XX: the request came in message 3 and no answer could be sent.
		hr.abandon(s)
		return
	}
	switch {
	case hr.connect != nil && len(hr.connect.Early) > 0:
		s.spliceConfirmed(nc, hr)
	case hr.connect != nil:
		s.spliceEarly(nc, hr)
	case hr.forward != nil:
		s.serveForward(nc, hr)
	case hr.dataFor != nil:
		s.serveData(ctx, nc, hr)
	default:
		// Refused in message 2: let the peer read it and hang up first.
		nc.SetReadDeadline(time.Now().Add(replyLinger))
		io.Copy(io.Discard, io.LimitReader(nc, 1<<16))
	}
}

// spliceEarly splices a client whose relay/connect came in its handshake.
// Its first record, the start of its handshake with the executor, proves
// the connection fresh (a replayed message 1 cannot supply it); only then
// does the relay spend a token use and take a slot, and it says how that
// went in one record (the verdict) before the connection goes raw.
func (s *Server) spliceEarly(nc *transport.NoiseConn, hr *handshakeRequest) {
	first, err := readInnerHello(nc, s.cfg.HandshakeTimeout)
	if err != nil {
		// A replay ends here: counted as a failed handshake, it gets the
		// replayer's address refused like any other failed handshake.
		s.failedHandshakes.Add(1)
		s.failed(remoteIP(hr.remote))
		s.log.Debug("client sent no handshake for the executor", zap.String("client", hr.client), zap.String("remote", hr.remote), zap.Error(err))
		return
	}
	p := *hr.connect
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.HandshakeTimeout)
	tok, t, perr := s.openClient(ctx, p, hr.client)
	cancel()
	if perr == nil && t.key != hr.execKey {
		t.release()
		perr = protocol.KindErrorf(protocol.KindUnavailable, protocol.CodeNotFound, "relay/connect: executor %s changed key since the answer; connect again", p.ExecutorID)
	}
	if perr != nil {
		s.log.Info("client connect refused", zap.String("client", hr.client), zap.String("remote", hr.remote), zap.String("executor", p.ExecutorID),
			zap.String("outcome", "refused"), zap.String("kind", string(protocol.KindOf(perr))), zap.String("reason", perr.Message))
		verdict, _ := transport.PayloadError(hr.reqID, perr)
		if writeVerdict(nc, verdict, s.cfg.HandshakeTimeout) == nil {
			nc.SetReadDeadline(time.Now().Add(replyLinger))
			io.Copy(io.Discard, io.LimitReader(nc, 1<<16))
		}
		return
	}
	defer t.release()
	verdict, _ := transport.PayloadResult(hr.reqID, protocol.Empty{})
	if err := writeVerdict(nc, verdict, s.cfg.HandshakeTimeout); err != nil {
		return
	}
	t.conn.SetWriteDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
	_, err = t.conn.Write(first)
	t.conn.SetWriteDeadline(time.Time{})
	if err != nil {
		return
	}
	raw, err := nc.Detach()
	if err != nil {
		return
	}
	if ahead := raw.TakePrefix(); len(ahead) > 0 {
		if _, err := t.conn.Write(ahead); err != nil {
			return
		}
	}
	// The executor answers the handshake at once; a target that does not
	// (a wedged executor, a data connection that died unseen) gives the
	// slot back within the bound rather than holding it for the client.
	if err := relayFirstReply(t.conn, raw.Conn, s.cfg.HandshakeTimeout); err != nil {
		s.log.Info("client not spliced: the executor did not answer its handshake", zap.String("client", hr.client), zap.String("executor", p.ExecutorID), zap.Error(err))
		return
	}
	s.log.Info("client connected", zap.String("client", hr.client), zap.String("remote", hr.remote), zap.String("executor", p.ExecutorID),
		zap.String("outcome", "spliced"), zap.String("token_id", tok.ID), zap.Bool("data_conn", t.data), zap.Bool("early", true), zap.String("via", t.via))
	defer s.trackClient(tok, hr.client, func() { raw.Conn.Close(); t.conn.Close() })()
	start := time.Now()
	n := splice(raw.Conn, t.conn)
	s.splicedBytes.Add(n)
	s.log.Info("client disconnected", zap.String("client", hr.client), zap.String("executor", p.ExecutorID), zap.Uint64("bytes", n), zap.Duration("duration", time.Since(start)))
}

// relayFirstReply waits up to timeout for the executor's first bytes on
// target and passes them to the client: a splice starts only once the
// executor has answered.
func relayFirstReply(target, client net.Conn, timeout time.Duration) error {
	target.SetReadDeadline(time.Now().Add(timeout))
	buf := make([]byte, 512)
	n, err := target.Read(buf)
	target.SetReadDeadline(time.Time{})
	if n == 0 {
		if err == nil {
			err = io.ErrNoProgress
		}
		return err
	}
	client.SetWriteDeadline(time.Now().Add(timeout))
	_, werr := client.Write(buf[:n])
	client.SetWriteDeadline(time.Time{})
	return werr
}

// writeVerdict sends the relay's verdict on a relay/connect made in the
// handshake: one record, a 2-byte big-endian length and the reply as a
// handshake payload is encoded (a result, or the refusal).
func writeVerdict(nc *transport.NoiseConn, reply []byte, timeout time.Duration) error {
	b := make([]byte, 2, 2+len(reply))
	binary.BigEndian.PutUint16(b, uint16(len(reply)))
	nc.SetWriteDeadline(time.Now().Add(timeout))
	defer nc.SetWriteDeadline(time.Time{})
	_, err := nc.Write(append(b, reply...))
	return err
}

// remoteIP is the address part of a remote "host:port".
func remoteIP(remote string) string {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		return remote
	}
	return host
}

// errNotInnerHello: a client's first record is not the preamble and
// message 1 of an IK handshake.
var errNotInnerHello = errors.New("the first record is not an IK handshake's start")

// readInnerHello reads the client's first Noise record, which holds the
// preamble and IK message 1 of its handshake with the executor (and
// nothing else: the client sends no more until the executor answers).
// Coming in a record of the channel with the relay, it proves the sender
// holds that channel's keys: a replayed message 1 cannot supply it.
func readInnerHello(nc *transport.NoiseConn, timeout time.Duration) ([]byte, error) {
	nc.SetReadDeadline(time.Now().Add(timeout))
	defer nc.SetReadDeadline(time.Time{})
	b := make([]byte, 6, 64)
	if _, err := io.ReadFull(nc, b); err != nil {
		return nil, err
	}
	if b[0] != 'O' || b[1] != 'P' || b[3] != 1 {
		return nil, errNotInnerHello
	}
	n := int(b[4])<<8 | int(b[5])
	b = append(b, make([]byte, n)...)
	if _, err := io.ReadFull(nc, b[6:]); err != nil {
		return nil, err
	}
	return b, nil
}

// dataConn is an executor's data connection, registered with its joined
// session.
type dataConn struct {
	conn net.Conn // raw
	// Set under Server.mu by the claimer; the connection's goroutine then
	// says on released whether it is still usable (its idle read ended by
	// the claimer's deadline, nothing read) and waits for done.
	claimed  bool
	released chan bool
	done     chan struct{}
}

// serveData registers a data connection once the executor has confirmed
// it, and holds it until a client is spliced to it and done, or it ends.
func (s *Server) serveData(ctx context.Context, nc *transport.NoiseConn, hr *handshakeRequest) {
	if err := s.awaitConfirmation(nc, dataReady); err != nil {
		s.log.Debug("data connection not confirmed", zap.String("executor", hr.dataFor.id), zap.String("remote", hr.remote), zap.Error(err))
		return
	}
	raw, err := nc.Detach()
	if err != nil || len(raw.TakePrefix()) > 0 {
		return // the executor sends nothing more before a client's bytes
	}
	dc := &dataConn{conn: raw.Conn, released: make(chan bool, 1), done: make(chan struct{})}
	j := hr.dataFor
	s.mu.Lock()
	if _, perr := s.dataAllowedLocked(j, hr.peer); perr != nil {
		s.mu.Unlock()
		return
	}
	j.idle = append(j.idle, dc)
	if j.data == nil {
		j.data = map[*dataConn]struct{}{}
	}
	j.data[dc] = struct{}{}
	s.mu.Unlock()
	// Idle: the executor sends nothing until a client comes, so a read
	// ends only when it hangs up (or breaks the rule), or when a claimer
	// interrupts it with a deadline.
	var one [1]byte
	n, err := dc.conn.Read(one[:])
	s.mu.Lock()
	claimed := dc.claimed
	if !claimed {
		removeIdle(j, dc)
		delete(j.data, dc)
	}
	s.mu.Unlock()
	if !claimed {
		return
	}
	var ne net.Error
	dc.released <- n == 0 && errors.As(err, &ne) && ne.Timeout()
	select {
	case <-dc.done:
	case <-ctx.Done():
	}
}

// errNotConfirmed: a connection's first record after a handshake request
// was not the confirmation it had to be.
var errNotConfirmed = errors.New("the first record is not the confirmation")

// awaitConfirmation reads the first record of a connection whose request
// came in the handshake (relay/data, relay/forward), which must be want:
// only the holder of the handshake's keys can send it, so a replayed
// message 1 is answered but never goes further.
func (s *Server) awaitConfirmation(nc *transport.NoiseConn, want []byte) error {
	nc.SetReadDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
	defer nc.SetReadDeadline(time.Time{})
	got := make([]byte, len(want))
	if _, err := io.ReadFull(nc, got); err != nil {
		return err
	}
	if !bytes.Equal(got, want) {
		return errNotConfirmed
	}
	return nil
}

// dataAllowedLocked re-checks, at registration, that j still holds the
// id with peer's key and has room. Call with s.mu held.
func (s *Server) dataAllowedLocked(j *joined, peer [32]byte) (*joined, *protocol.Error) {
	if s.draining || j.gone || s.executors[j.id] != j || j.key != peer || len(j.idle) >= s.cfg.MaxDataConns {
		return nil, protocol.KindErrorf(protocol.KindUnavailable, protocol.CodeInvalidRequest, "relay/data: no longer allowed")
	}
	return j, nil
}

func removeIdle(j *joined, dc *dataConn) {
	for i, c := range j.idle {
		if c == dc {
			j.idle = append(j.idle[:i], j.idle[i+1:]...)
			return
		}
	}
}

// claimData takes j's newest idle data connection that is still usable
// and writes the client header on it; nil when there is none. It tries
// at most the connections idle when it starts.
func (s *Server) claimData(j *joined) *dataConn {
	for {
		s.mu.Lock()
		if len(j.idle) == 0 {
			s.mu.Unlock()
			return nil
		}
		dc := j.idle[len(j.idle)-1]
		j.idle = j.idle[:len(j.idle)-1]
		dc.claimed = true
		s.mu.Unlock()
		dc.conn.SetReadDeadline(time.Unix(1, 0))
		ok := <-dc.released // promptly: the deadline has passed
		if ok {
			dc.conn.SetReadDeadline(time.Time{})
			dc.conn.SetWriteDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
			_, err := dc.conn.Write([]byte{dataClientHeader})
			dc.conn.SetWriteDeadline(time.Time{})
			if err == nil {
				s.dataSplices.Add(1)
				return dc
			}
		}
		s.dropData(j, dc)
	}
}

// dropData closes a claimed data connection and lets its goroutine end.
func (s *Server) dropData(j *joined, dc *dataConn) {
	dc.conn.SetDeadline(time.Unix(1, 0))
	dc.conn.Close()
	s.mu.Lock()
	delete(j.data, dc)
	s.mu.Unlock()
	close(dc.done)
}

// openTarget is where a client of j is spliced: a data connection if j
// has one idle, else a new stream on j's session (an executor that offers
// none, or has none left).
func (s *Server) openTarget(j *joined) (net.Conn, *dataConn, error) {
	if dc := s.claimData(j); dc != nil {
		return dc.conn, dc, nil
	}
	st, err := j.sess.OpenStream()
	if err != nil {
		return nil, nil, err
	}
	return st, nil, nil
}

// closeTarget closes what openTarget returned.
func (s *Server) closeTarget(j *joined, target net.Conn, dc *dataConn) {
	if dc != nil {
		s.dropData(j, dc)
		return
	}
	target.Close()
}
