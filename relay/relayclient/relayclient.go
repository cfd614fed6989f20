// Package relayclient is the one client of an outpost relay, for both of
// its kinds of peers: clients (relay/connect, relay/executors; package
// client and `outpost executors ls`) and executors (relay/join; `outpost
// executor join`).
//
// Dial opens a control connection (PROTOCOL.md section 9.1): the byte pipe
// to the relay's URL (outpost:// over TCP, outpost+ws:// over WebSocket),
// Noise as initiator with purpose transport.PurposeRelay and the relay's
// key pinned by the URL's fingerprint (IK: a relay is always pinned), the multiplexer,
// and the control stream, which carries one request (Call) and its reply.
// After relay/connect the control stream is spliced to the executor
// (Connect); after relay/join it stays open for relay/reconnect notices
// (AwaitNotification), and the relay opens a stream on the session for
// each client it brings (Streams).
//
// ConnectEarly and DialData take the raw path instead (PROTOCOL.md
// sections 9.3 and 9.6): the request travels in the Noise handshake's
// first message, the answer in the second, and the connection then carries
// raw bytes — a client's end-to-end channel, or an executor's idle data
// connection (AwaitClient).
//
// A refusal comes back as the relay's *protocol.Error itself, unwrapped:
// callers decide by protocol.KindOf and its code, never by its text.
//
// A relay of a cluster uses it too: Dial for its peer links (health),
// Forward for each client it forwards to a peer.
//
// The package depends on transport, protocol and identity only.
package relayclient

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"

	"github.com/flynn/noise"

	"github.com/outpost-exec/outpost/identity"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/transport"
)

// Purpose is the Noise purpose of every link to a relay.
const Purpose = transport.PurposeRelay

// Options configure Dial. The zero value is usable.
type Options struct {
	// Mux configures the multiplexer with the relay (default
	// transport.DefaultMuxConfig()).
	Mux transport.MuxConfig
	// HandshakeTimeout bounds the Noise handshake with the relay (default
	// transport.DefaultHandshakeTimeout); ctx bounds it too.
	HandshakeTimeout time.Duration
	// DialTimeout, when positive, bounds the connection to the relay's
	// address (TCP connect, or the WebSocket upgrade) within ctx: for a
	// caller with other relays to try, so that a host that drops packets
	// costs it this long, not the operating system's SYN retries. 0: ctx
	// alone. A URL listing several addresses gives each but the last
	// transport.AddrDialTimeout as well.
	DialTimeout time.Duration
	// OnConnect, when set, is called with the relay's whole answer to
	// relay/connect (ConnectEarly, and Connect on a Conn dialled with
	// these options) once it is decoded, before the call returns: a client
	// learns the cluster's members from its Cluster.
	OnConnect func(protocol.RelayConnectResult)
}

// Conn is an authenticated connection to a relay with its control stream
// open.
type Conn struct {
	url       transport.URL
	sess      *transport.MuxSession
	ctl       net.Conn
	mc        *transport.MsgpackConn
	ids       atomic.Int64
	onConnect func(protocol.RelayConnectResult) // Options.OnConnect
}

// Dial connects to the relay named by url (outpost://HOST:PORT#<fp> or
// outpost+ws://HOST:PORT#<fp>) with the static key key. Its errors name
// the relay's address; a refused handshake wraps
// transport.ErrHandshakeRefused.
func Dial(ctx context.Context, url string, key noise.DHKey, opts Options) (*Conn, error) {
	u, err := transport.ParseURL(url, transport.SchemeRelay, transport.SchemeRelayWS)
	if err != nil {
		return nil, err
	}
	mux := opts.Mux
	if mux == (transport.MuxConfig{}) {
		mux = transport.DefaultMuxConfig()
	}
	nc, err := handshake(ctx, &u, key, opts, nil)
	if err != nil {
		return nil, err
	}
	sess, err := transport.MuxClient(nc, mux)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("relay %s: %w", u.Addr, err)
	}
	ctl, err := sess.OpenStream()
	if err != nil {
		sess.Close()
		return nil, fmt.Errorf("relay %s: opening the control stream: %w", u.Addr, err)
	}
	return &Conn{url: u, sess: sess, ctl: ctl, mc: transport.NewMsgpackConn(ctl, protocol.MaxMessageBytes), onConnect: opts.OnConnect}, nil
}

// KeyMismatchError: the relay at Addr holds another key than the one its
// URL names. Nothing was sent to it but a handshake it could not answer.
type KeyMismatchError struct {
	Addr      string
	Named     identity.PublicKey // the URL's #fingerprint
	Presented identity.PublicKey // the key the relay presented
}

func (e *KeyMismatchError) Error() string {
	return fmt.Sprintf("relay %s presents key %s, not %s named by the relay URL; check the URL's #fingerprint (the relay prints its URL when it starts, and `outpost relay init` prints its fingerprint)",
		e.Addr, e.Presented.Fingerprint(), e.Named.Fingerprint())
}

var errProbeDone = errors.New("probe done")

// probeKey learns the key the relay presents, without revealing ours: an
// XX handshake abandoned after the relay's message, before the one that
// would carry our static key.
func probeKey(ctx context.Context, u transport.URL, opts Options) (identity.PublicKey, error) {
	raw, err := u.Dial(ctx)
	if err != nil {
		return identity.PublicKey{}, err
	}
	defer raw.Close()
	eph, err := identity.Generate()
	if err != nil {
		return identity.PublicKey{}, err
	}
	var presented identity.PublicKey
	_, err = transport.NoiseInitiator(ctx, raw, transport.NoiseConfig{Static: eph.Keypair(), Purpose: Purpose, HandshakeTimeout: opts.HandshakeTimeout,
		VerifyPeer: func(peer []byte) error {
			copy(presented[:], peer)
			return errProbeDone
		}})
	if errors.Is(err, errProbeDone) {
		return presented, nil
	}
	return identity.PublicKey{}, err
}

// Addr is the relay's HOST:PORT (of a URL listing several, the one
// reached).
func (c *Conn) Addr() string { return c.url.Addr }

// URL is the relay's URL (of one listing several, naming the address
// reached).
func (c *Conn) URL() transport.URL { return c.url }

// Close closes the connection: the session and every stream on it.
func (c *Conn) Close() error { return c.sess.Close() }

// Done is closed once the connection has ended.
func (c *Conn) Done() <-chan struct{} { return c.sess.CloseChan() }

// Call sends a request on the control stream and reads its reply into
// result (nil: the reply's result is not decoded). The relay's refusal is
// returned as its *protocol.Error itself; a failure of the connection is
// wrapped with the method's name. When ctx ends first, the call is cut
// short and fails.
func (c *Conn) Call(ctx context.Context, method string, params, result any) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	stop := context.AfterFunc(ctx, func() { c.ctl.SetDeadline(time.Unix(1, 0)) })
	m, err := c.mc.Call(ctx, transport.IntID(c.ids.Add(1)), method, params)
	if !stop() {
		// ctx ended meanwhile: the stream's deadline is spent, so is the
		// connection.
		return fmt.Errorf("%s: %w", method, ctx.Err())
	}
	switch {
	case err != nil:
		return fmt.Errorf("%s: %w", method, err)
	case m.Kind != transport.KindResponse:
		return fmt.Errorf("%s: the relay sent another message (kind %d) instead of a reply", method, m.Kind)
	case m.Error != nil:
		return m.Error
	case result == nil:
		return nil
	case m.Result == nil:
		return fmt.Errorf("%s: the reply has no result", method)
	}
	if err := m.Result.Decode(result); err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	return nil
}

// Connect asks the relay for a stream to executorID with a client token
// (relay/connect). On success the control stream is spliced to a stream on
// the executor's session: it is returned to carry the client's own Noise
// handshake with the executor (transport.PurposeExec), with the
// executor's key from the relay's directory (a client that has pinned none
// pins this one). The stream lives as long as c.
func (c *Conn) Connect(ctx context.Context, executorID, token string) (net.Conn, identity.PublicKey, error) {
	var res protocol.RelayConnectResult
	if err := c.Call(ctx, protocol.MethodRelayConnect, protocol.RelayConnectParams{ExecutorID: executorID, Token: token}, &res); err != nil {
		return nil, identity.PublicKey{}, err
	}
	if c.onConnect != nil {
		c.onConnect(res)
	}
	k, err := identity.ParsePublicKey(res.ExecutorKey)
	if err != nil {
		return nil, identity.PublicKey{}, fmt.Errorf("%s: executor key: %w", protocol.MethodRelayConnect, err)
	}
	return c.ctl, k, nil
}

// Forward asks a peer relay of the cluster (url; key is the cluster's
// key, which the peer holds too) for a connection to executorID, joined
// there (relay/forward in the handshake, PROTOCOL.md section 9.8). The
// returned connection carries raw bytes from then on: the caller splices
// it to the client's own connection.
func Forward(ctx context.Context, url string, key noise.DHKey, opts Options, p protocol.RelayForwardParams) (net.Conn, protocol.RelayConnectResult, error) {
	var res protocol.RelayConnectResult
	nc, err := handshakeCall(ctx, url, key, opts, protocol.MethodRelayForward, p, &res)
	if err != nil {
		return nil, res, err
	}
	nc.SetWriteDeadline(time.Now().Add(cmpOr(opts.HandshakeTimeout, transport.DefaultHandshakeTimeout)))
	_, err = nc.Write([]byte(protocol.RelayForwardReady))
	nc.SetWriteDeadline(time.Time{})
	if err != nil {
		nc.Close()
		return nil, res, fmt.Errorf("%s: %w", protocol.MethodRelayForward, err)
	}
	raw, err := nc.Detach()
	if err != nil {
		nc.Close()
		return nil, res, err
	}
	return raw, res, nil
}

// Executors lists the joined executors that a client token may reach
// (relay/executors).
func (c *Conn) Executors(ctx context.Context, token string) ([]protocol.RelayExecutor, error) {
	var res protocol.RelayExecutorsResult
	if err := c.Call(ctx, protocol.MethodRelayExecutors, protocol.RelayExecutorsParams{Token: token}, &res); err != nil {
		return nil, err
	}
	return res.Executors, nil
}

// Join registers an executor (relay/join). The control stream then stays
// open: the relay may send relay/reconnect on it (AwaitNotification), and
// it opens a stream on the session for each client it splices to the
// executor (Streams).
func (c *Conn) Join(ctx context.Context, p protocol.RelayJoinParams) (protocol.RelayJoinResult, error) {
	var res protocol.RelayJoinResult
	err := c.Call(ctx, protocol.MethodRelayJoin, p, &res)
	return res, err
}

// AwaitNotification reads the control stream until the relay sends a
// notification named method (its message), skipping other messages and
// malformed frames, or the stream ends (its error). Call it after Join,
// from one goroutine.
func (c *Conn) AwaitNotification(ctx context.Context, method string) (*transport.Message, error) {
	for {
		m, err := c.mc.ReadMessage(ctx)
		if err != nil {
			var malformed *transport.MalformedError
			if errors.As(err, &malformed) {
				continue
			}
			return nil, err
		}
		if m.Kind == transport.KindNotification && m.Method == method {
			return m, nil
		}
	}
}

// Streams is a listener of the streams the relay opens on the session:
// after Join, one per client it splices to the executor. Its Accept
// reports net.ErrClosed once the connection has ended; closing it closes
// the connection.
func (c *Conn) Streams() net.Listener { return streams{c.sess} }

type streams struct{ sess *transport.MuxSession }

func (s streams) Accept() (net.Conn, error) {
	st, err := s.sess.AcceptStream()
	if err != nil {
		if s.sess.IsClosed() {
			return nil, fmt.Errorf("%w: %w", net.ErrClosed, err)
		}
		return nil, err
	}
	return st, nil
}

func (s streams) Close() error   { return s.sess.Close() }
func (s streams) Addr() net.Addr { return s.sess.Addr() }

// ErrNoHandshakeRequests: the relay answered a request in the handshake
// with an empty payload — it predates them (PROTOCOL.md section 9.3) and
// took the connection for a mux one. Use Dial, and Connect or the join
// session's streams, instead.
var ErrNoHandshakeRequests = errors.New("the relay does not take requests in its handshake (an older relay)")

// handshake dials the relay at u and runs the IK handshake to its key,
// with payload in message 1. A refused handshake to a relay that holds
// another key is a *KeyMismatchError. Of a URL listing several addresses,
// *u is left naming the one reached.
func handshake(ctx context.Context, up *transport.URL, key noise.DHKey, opts Options, payload []byte) (*transport.NoiseConn, error) {
	dctx, cancel := ctx, context.CancelFunc(func() {})
	if opts.DialTimeout > 0 {
		dctx, cancel = context.WithTimeout(ctx, opts.DialTimeout)
	}
	raw, reached, err := up.DialAny(dctx)
	cancel()
	if err != nil {
		return nil, err
	}
	*up = reached
	u := reached
	nc, err := transport.NoiseInitiator(ctx, raw, transport.NoiseConfig{Static: key, Purpose: Purpose, PeerStatic: u.Key[:], Payload: payload, HandshakeTimeout: opts.HandshakeTimeout})
	if err != nil {
		raw.Close()
		if errors.Is(err, transport.ErrHandshakeRefused) {
			// A relay refuses an IK handshake made to a key it does not
			// hold; so that the user learns which it is (a stale or
			// mistyped fingerprint), ask the relay for its key.
			if presented, perr := probeKey(ctx, u, opts); perr == nil && presented != u.Key {
				return nil, &KeyMismatchError{Addr: u.Addr, Named: u.Key, Presented: presented}
			}
		}
		return nil, fmt.Errorf("relay %s: %w", u.Addr, err)
	}
	return nc, nil
}

// handshakeCall dials the relay with a request in the payload of Noise
// IK message 1 and decodes the answer in message 2's payload into result.
// It returns the channel, still in Noise, for the caller to finish with.
func handshakeCall(ctx context.Context, url string, key noise.DHKey, opts Options, method string, params, result any) (*transport.NoiseConn, error) {
	u, err := transport.ParseURL(url, transport.SchemeRelay, transport.SchemeRelayWS)
	if err != nil {
		return nil, err
	}
	payload, err := transport.PayloadRequest(transport.IntID(1), method, params)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	nc, err := handshake(ctx, &u, key, opts, payload)
	if err != nil {
		return nil, err
	}
	reply := nc.HandshakeReply()
	if len(reply) == 0 {
		nc.Close()
		return nil, fmt.Errorf("relay %s: %w", u.Addr, ErrNoHandshakeRequests)
	}
	err = decodeReply(method, reply, result)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return nc, nil
}

// decodeReply decodes a reply encoded as a handshake's payload into
// result; a refusal is the relay's *protocol.Error.
func decodeReply(method string, reply []byte, result any) error {
	m, err := transport.ParsePayload(reply)
	switch {
	case err != nil:
		return fmt.Errorf("%s: the relay's answer: %w", method, err)
	case m.Kind != transport.KindResponse:
		return fmt.Errorf("%s: the relay sent another message (kind %d) instead of a reply", method, m.Kind)
	case m.Error != nil:
		return m.Error
	case m.Result == nil:
		return fmt.Errorf("%s: the reply has no result", method)
	case result != nil:
		if derr := m.Result.Decode(result); derr != nil {
			return fmt.Errorf("%s: %w", method, derr)
		}
	}
	return nil
}

// ConnectEarly reaches executorID through the relay in one handshake
// (PROTOCOL.md section 9.3): relay/connect travels in the payload of Noise
// IK message 1 and the relay's answer in message 2.
//
// With early — the client's own handshake with the executor,
// transport.NoiseIKOffer.Bytes, made with the executor's key the client
// already knows — the request carries it and Confirm; the client's first
// record after message 2 is the confirmation (RelayConnectReady), which
// proves to the relay that the connection is not a replay of a recorded
// message 1: only then does the relay spend the token's use and pass the
// client's bytes on. The executor's answer comes meanwhile: one round
// trip to the executor.
//
// Without early (first contact), first is called with the key from the
// relay's directory and returns the handshake's start, sent in the first
// record; the relay then spends the use, opens the target and answers
// with its verdict (a refusal here too is the relay's error).
//
// The returned connection then carries the executor's bytes as they come,
// starting with its answer to the handshake (transport.NoiseIKOffer.Finish
// reads it), without the relay's Noise or mux: closing it ends
// everything. Also returned is the executor's key from the relay's
// directory.
//
// A refusal is the relay's *protocol.Error itself; a relay that predates
// requests in the handshake answers ErrNoHandshakeRequests (use Dial and
// Connect).
func ConnectEarly(ctx context.Context, url string, key noise.DHKey, opts Options, executorID, token string, early []byte, first func(executorKey identity.PublicKey) ([]byte, error)) (net.Conn, identity.PublicKey, error) {
	if len(early) == 0 && first == nil {
		return nil, identity.PublicKey{}, errors.New("relayclient: ConnectEarly needs early or first")
	}
	params := protocol.RelayConnectParams{ExecutorID: executorID, Token: token, Early: early, Confirm: len(early) > 0}
	if len(early) > 0 {
		params.Fresh = freshStamp(time.Now())
	}
	var res protocol.RelayConnectResult
	nc, err := handshakeCall(ctx, url, key, opts, protocol.MethodRelayConnect, params, &res)
	if err != nil {
		return nil, identity.PublicKey{}, err
	}
	if opts.OnConnect != nil {
		opts.OnConnect(res)
	}
	fail := func(err error) (net.Conn, identity.PublicKey, error) {
		nc.Close()
		return nil, identity.PublicKey{}, err
	}
	k, err := identity.ParsePublicKey(res.ExecutorKey)
	if err != nil {
		return fail(fmt.Errorf("%s: executor key: %w", protocol.MethodRelayConnect, err))
	}
	record := []byte(protocol.RelayConnectReady)
	if len(early) == 0 {
		if record, err = first(k); err != nil {
			return fail(err)
		}
	}
	timeout := cmpOr(opts.HandshakeTimeout, transport.DefaultHandshakeTimeout)
	nc.SetWriteDeadline(time.Now().Add(timeout))
	_, err = nc.Write(record)
	nc.SetWriteDeadline(time.Time{})
	if err != nil {
		return fail(fmt.Errorf("%s: %w", protocol.MethodRelayConnect, err))
	}
	if len(early) == 0 && res.Verdict {
		if err := readVerdict(nc, timeout); err != nil {
			return fail(err)
		}
	}
	raw, err := nc.Detach()
	if err != nil {
		return fail(err)
	}
	return raw, k, nil
}

// freshStamp is a relay/connect's freshness stamp: the clock in Unix
// milliseconds and a random nonce (RelayConnectParams.Fresh).
func freshStamp(now time.Time) []byte {
	b := make([]byte, 24)
	binary.BigEndian.PutUint64(b, uint64(now.UnixMilli()))
	if _, err := rand.Read(b[8:]); err != nil {
		return nil // no stamp: the relay admits after the confirmation
	}
	return b
}

// readVerdict reads the relay's verdict on a relay/connect made in the
// handshake (a 2-byte length and a reply): nil, or its refusal.
func readVerdict(nc *transport.NoiseConn, timeout time.Duration) error {
	nc.SetReadDeadline(time.Now().Add(timeout))
	defer nc.SetReadDeadline(time.Time{})
	var n [2]byte
	if _, err := io.ReadFull(nc, n[:]); err != nil {
		return fmt.Errorf("%s: the relay's verdict: %w", protocol.MethodRelayConnect, err)
	}
	b := make([]byte, binary.BigEndian.Uint16(n[:]))
	if _, err := io.ReadFull(nc, b); err != nil {
		return fmt.Errorf("%s: the relay's verdict: %w", protocol.MethodRelayConnect, err)
	}
	return decodeReply(protocol.MethodRelayConnect, b, nil)
}

// DialData opens a data connection for the joined executor executorID
// (relay/data, PROTOCOL.md section 9.6) with the executor's key, and
// confirms it. The returned connection is raw and idle: AwaitClient waits
// on it for the relay to bring a client.
func DialData(ctx context.Context, url string, key noise.DHKey, opts Options, executorID string) (net.Conn, error) {
	nc, err := handshakeCall(ctx, url, key, opts, protocol.MethodRelayData, protocol.RelayDataParams{ExecutorID: executorID}, nil)
	if err != nil {
		return nil, err
	}
	nc.SetWriteDeadline(time.Now().Add(cmpOr(opts.HandshakeTimeout, transport.DefaultHandshakeTimeout)))
	_, err = nc.Write([]byte(protocol.RelayDataReady))
	nc.SetWriteDeadline(time.Time{})
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("%s: %w", protocol.MethodRelayData, err)
	}
	raw, err := nc.Detach()
	if err != nil {
		nc.Close()
		return nil, err
	}
	return raw, nil
}

func cmpOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// ErrBadDataHeader: the relay sent something else than a client header on
// a data connection.
var ErrBadDataHeader = errors.New("relay/data: the relay sent an unknown header")

// AwaitClient waits on an idle data connection until the relay brings a
// client (nil: the client's bytes follow on c) or the connection ends
// (its error). Read nothing else from c meanwhile.
func AwaitClient(c net.Conn) error {
	var b [1]byte
	for {
		n, err := c.Read(b[:])
		if n == 1 {
			if b[0] != protocol.RelayDataClient {
				return ErrBadDataHeader
			}
			return nil
		}
		if err != nil {
			return err
		}
	}
}
