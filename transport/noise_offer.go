package transport

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/flynn/noise"
)

// NoiseIKOffer is the first half of an IK initiator's handshake, made
// before there is a connection to send it on: Bytes (the preamble and
// message 1, cfg.Payload inside) travel ahead — a relayed client puts them
// in its relay/connect, inside its own handshake with the relay, so they
// reach the executor without waiting for the relay's answer (PROTOCOL.md
// section 9.3) — and Finish reads message 2 from the connection that
// carries the answer. The bytes are what NoiseInitiator sends for the same
// cfg. An offer is used once.
type NoiseIKOffer struct {
	hs  *noise.HandshakeState
	cfg NoiseConfig
	msg []byte // preamble + record(msg1)
}

// NewNoiseIKOffer makes message 1 of an IK handshake to cfg.PeerStatic
// (required).
func NewNoiseIKOffer(cfg NoiseConfig) (*NoiseIKOffer, error) {
	if cfg.PeerStatic == nil {
		return nil, errors.New("noise: an IK offer needs the responder's key (NoiseConfig.PeerStatic)")
	}
	if len(cfg.Payload) > MaxHandshakePayload {
		return nil, fmt.Errorf("noise: handshake payload of %d bytes exceeds %d", len(cfg.Payload), MaxHandshakePayload)
	}
	hs, err := noise.NewHandshakeState(noise.Config{
		CipherSuite: NoiseSuite, Random: cfg.rng(), Pattern: noise.HandshakeIK, Initiator: true,
		Prologue: NoisePrologue(cfg.Purpose, patternIK), StaticKeypair: cfg.Static, PeerStatic: cfg.PeerStatic,
	})
	if err != nil {
		return nil, fmt.Errorf("noise: %w", err)
	}
	msg, _, _, err := hs.WriteMessage(nil, cfg.Payload)
	if err != nil {
		return nil, fmt.Errorf("noise handshake: %w", err)
	}
	b := append([]byte{'O', 'P', NoiseVersion, patternIK}, byte(len(msg)>>8), byte(len(msg)))
	return &NoiseIKOffer{hs: hs, cfg: cfg, msg: append(b, msg...)}, nil
}

// Bytes are the preamble and message 1, as they go on the wire.
func (o *NoiseIKOffer) Bytes() []byte { return o.msg }

// Finish reads message 2 from conn, which carries the responder's answer
// to Bytes, within the handshake timeout (and ctx).
func (o *NoiseIKOffer) Finish(ctx context.Context, conn net.Conn) (*NoiseConn, error) {
	done := withDeadline(ctx, conn, o.cfg.timeout())
	defer done()
	br := bufio.NewReaderSize(conn, readBuffer)
	in, err := readRecord(br, nil)
	if err != nil {
		return nil, handshakeReadErr(err)
	}
	reply, send, recv, err := o.hs.ReadMessage(nil, in)
	if err != nil {
		return nil, fmt.Errorf("noise handshake: responder's reply did not authenticate: %w", err)
	}
	nc := newNoiseConn(conn, br, o.hs.PeerStatic(), send, recv, o.cfg.rekeyInterval())
	nc.reply = reply
	return nc, nil
}

// ErrDetachPending: Detach was called with decrypted bytes not yet read.
var ErrDetachPending = errors.New("noise: detach with decrypted bytes not yet read")

// Detach ends the Noise layer of c, on a link whose two ends agree to
// carry raw bytes from here on (a relay's spliced connections, PROTOCOL.md
// section 9): it returns the underlying connection, which first yields the
// bytes c had already read ahead from it, so none is lost at the switch.
// Call it with no Read or Write in progress, and use c no more.
func (c *NoiseConn) Detach() (*PrefixConn, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if len(c.rplain) > 0 {
		return nil, ErrDetachPending
	}
	var ahead []byte
	if n := c.br.Buffered(); n > 0 {
		b, _ := c.br.Peek(n)
		ahead = append([]byte(nil), b...)
		c.br.Discard(n)
	}
	return &PrefixConn{Conn: c.conn, prefix: ahead}, nil
}

// RawWriter is c's underlying connection, for a link whose responder
// starts sending raw bytes before it has read the initiator's last Noise
// record (a relay passing an executor's answer to a client while it waits
// for the client's confirmation, PROTOCOL.md 9.3). Write to it only, and
// never call c.Write again; go on reading c, then Detach.
func (c *NoiseConn) RawWriter() net.Conn { return c.conn }

// PrefixConn is a connection whose first bytes were read ahead: Read
// returns them before reading the connection.
type PrefixConn struct {
	net.Conn
	prefix []byte
}

// NewPrefixConn returns c with prefix to be read first.
func NewPrefixConn(c net.Conn, prefix []byte) *PrefixConn {
	return &PrefixConn{Conn: c, prefix: prefix}
}

func (c *PrefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// WriteBuffers writes bufs as one write where the connection can (a
// NoiseConn: one record batch), so a multiplexer's header and body stay
// together behind the prefix.
func (c *PrefixConn) WriteBuffers(bufs ...[]byte) (int, error) {
	if w, ok := c.Conn.(interface {
		WriteBuffers(...[]byte) (int, error)
	}); ok {
		return w.WriteBuffers(bufs...)
	}
	n := 0
	for _, b := range bufs {
		m, err := c.Conn.Write(b)
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// TakePrefix returns the bytes read ahead and not yet read, and forgets
// them: a caller that copies the connection itself (splice(2) on the
// underlying TCP socket) sends them first.
func (c *PrefixConn) TakePrefix() []byte {
	p := c.prefix
	c.prefix = nil
	return p
}
