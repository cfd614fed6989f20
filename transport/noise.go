package transport

// Noise: every outpost link (client↔executor, executor↔relay, client↔relay,
// and client↔executor again inside a relayed stream) is a Noise channel.
//
// Suite: Noise_{IK,XX}_25519_AESGCM_SHA256. One fixed suite, so there is
// nothing to negotiate or downgrade. AES-GCM runs at several GB/s per core
// with AES-NI (see BenchmarkNoiseCipher for ChaChaPoly beside it).
//
// Patterns: IK when the initiator knows the responder's static key (a pin
// or a fingerprint in the URL); XX for first contact (trust on first use),
// where the initiator checks the responder's key before revealing its own.
//
// Wire layout:
//
//	preamble   initiator → responder, cleartext, once:
//	           'O' 'P' version(1) pattern(1 = IK, 2 = XX)
//	record     length:uint16 big-endian, bytes[length]   (1 ≤ length ≤ 65535)
//
//	IK  → record(msg1: e, es, s, ss, payload)   ← record(msg2: e, ee, se)
//	XX  → record(msg1: e)   ← record(msg2: e, ee, s, es)   → record(msg3: s, se, payload)
//	then records of ciphertext: AES-256-GCM(plaintext ≤ 65519) with a 16-byte tag.
//
// The prologue binds the protocol name and version, the link's purpose and
// the pattern (length-prefixed, uint16 big-endian each):
//
//	"outpost-noise/1", purpose (e.g. "exec"), "IK" | "XX"
//
// so a handshake cannot be replayed onto another kind of link, and a
// tampered preamble fails the handshake.
//
// The initiator's payload (its token or identity claim, ≤ 4096 bytes) is
// handed with its static key to the responder's Authorize callback before
// the responder sends anything that depends on it: with IK the responder
// does not answer at all when Authorize fails, so an unauthorised initiator
// learns nothing, not even whether it reached the right responder.
//
// Nonces are implicit counters, so a replayed, dropped, reordered or
// tampered record fails authentication and the connection is closed. Both
// sides rekey every RekeyInterval records per direction (counted, so no
// message is needed); a nonce can never come near exhaustion.

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/flynn/noise"
)

// Noise constants.
const (
	NoiseProtocolName   = "outpost-noise"
	NoiseVersion        = 1
	MaxRecordBytes      = 65535
	noiseTagBytes       = 16
	MaxRecordPlaintext  = MaxRecordBytes - noiseTagBytes
	MaxHandshakePayload = 4096

	DefaultHandshakeTimeout = 10 * time.Second
	// DefaultRekeyInterval rekeys every 2^20 records (64 GiB of full
	// records) per direction.
	DefaultRekeyInterval = 1 << 20

	patternIK byte = 1
	patternXX byte = 2
)

// Purposes of outpost's links, bound into the Noise prologue
// (PROTOCOL.md section 2.1).
const (
	// PurposeExec: client ↔ executor, direct (tcp://, unix://) or inside
	// a stream a relay splices.
	PurposeExec = "exec"
	// PurposeRelay: client or executor ↔ relay.
	PurposeRelay = "relay"
)

// NoiseSuite is the one cipher suite outpost uses.
var NoiseSuite = noise.NewCipherSuite(noise.DH25519, noise.CipherAESGCM, noise.HashSHA256)

// Errors of the Noise layer.
var (
	ErrHandshakeRefused  = errors.New("noise handshake refused by the responder (wrong responder key, or this key is not authorised)")
	ErrBadPreamble       = errors.New("noise: not an outpost Noise connection (bad preamble)")
	ErrRecordAuth        = errors.New("noise: record failed authentication (tampered, replayed or out of order)")
	ErrPatternNotAllowed = errors.New("noise: handshake pattern not allowed by this responder")
)

// NoiseConfig configures one side of a handshake.
type NoiseConfig struct {
	// Static is this party's long-term key pair.
	Static noise.DHKey
	// Purpose names the kind of link (PurposeExec, PurposeRelay); both
	// sides must agree. It is bound into the prologue.
	Purpose string

	// Initiator: PeerStatic is the responder's pinned public key; nil
	// selects XX (first contact), and VerifyPeer then decides whether to
	// trust the key the responder presents before the initiator reveals
	// its identity. Payload is the initiator's token or identity claim.
	PeerStatic []byte
	VerifyPeer func(peerStatic []byte) error
	Payload    []byte

	// Responder: Authorize sees the initiator's static key and payload
	// before the handshake completes; an error refuses the initiator. AllowXX
	// lets initiators that do not know this responder's key connect.
	Authorize func(peerStatic, payload []byte) error
	AllowXX   bool
	// Reply (responder, IK only), if set, is called once Authorize has
	// accepted message 1; what it returns (at most MaxHandshakePayload
	// bytes) is message 2's payload, which the initiator reads from
	// NoiseConn.HandshakeReply. The executor answers early data with it.
	Reply func() []byte

	// HandshakeTimeout bounds the whole handshake (default 10 s).
	HandshakeTimeout time.Duration
	// RekeyInterval is the number of records between rekeys (default 2^20).
	RekeyInterval uint64

	// random replaces crypto/rand for the golden-vector test.
	random io.Reader
}

// NoisePrologue returns the prologue for a purpose and pattern.
func NoisePrologue(purpose string, pattern byte) []byte {
	name := "IK"
	if pattern == patternXX {
		name = "XX"
	}
	var b []byte
	for _, part := range []string{fmt.Sprintf("%s/%d", NoiseProtocolName, NoiseVersion), purpose, name} {
		b = binary.BigEndian.AppendUint16(b, uint16(len(part)))
		b = append(b, part...)
	}
	return b
}

// NoiseConn is an established Noise channel; it implements net.Conn.
type NoiseConn struct {
	conn  net.Conn
	br    *bufio.Reader
	peer  []byte
	rekey uint64
	reply []byte // initiator, IK: message 2's payload

	rmu    sync.Mutex
	recv   *noise.CipherState
	rcount uint64
	rraw   []byte
	rplain []byte // decrypted, not yet returned (a suffix of rbuf)
	rbuf   []byte
	rerr   error
	wmu    sync.Mutex
	send   *noise.CipherState
	wcount uint64
	wbuf   []byte
	werr   error
}

func (c NoiseConfig) timeout() time.Duration {
	if c.HandshakeTimeout > 0 {
		return c.HandshakeTimeout
	}
	return DefaultHandshakeTimeout
}

func (c NoiseConfig) rekeyInterval() uint64 {
	if c.RekeyInterval > 0 {
		return c.RekeyInterval
	}
	return DefaultRekeyInterval
}

func (c NoiseConfig) rng() io.Reader {
	if c.random != nil {
		return c.random
	}
	return rand.Reader
}

// withDeadline applies the handshake deadline (and ctx) to conn.
func withDeadline(ctx context.Context, conn net.Conn, d time.Duration) func() {
	deadline := time.Now().Add(d)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	return func() {
		stop()
		conn.SetDeadline(time.Time{})
	}
}

func writeRecord(w io.Writer, b []byte) error {
	if len(b) > MaxRecordBytes {
		return fmt.Errorf("noise: record of %d bytes exceeds %d", len(b), MaxRecordBytes)
	}
	buf := make([]byte, 2+len(b))
	binary.BigEndian.PutUint16(buf, uint16(len(b)))
	copy(buf[2:], b)
	_, err := w.Write(buf)
	return err
}

func readRecord(r io.Reader, buf []byte) ([]byte, error) {
	var hdr [2]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint16(hdr[:]))
	if n == 0 {
		return nil, errors.New("noise: empty record")
	}
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return buf, nil
}

// NoiseInitiator runs the initiator's handshake over conn.
func NoiseInitiator(ctx context.Context, conn net.Conn, cfg NoiseConfig) (*NoiseConn, error) {
	if len(cfg.Payload) > MaxHandshakePayload {
		return nil, fmt.Errorf("noise: handshake payload of %d bytes exceeds %d", len(cfg.Payload), MaxHandshakePayload)
	}
	done := withDeadline(ctx, conn, cfg.timeout())
	defer done()
	pattern, hp := patternXX, noise.HandshakeXX
	if cfg.PeerStatic != nil {
		pattern, hp = patternIK, noise.HandshakeIK
	}
	hs, err := noise.NewHandshakeState(noise.Config{
		CipherSuite: NoiseSuite, Random: cfg.rng(), Pattern: hp, Initiator: true,
		Prologue: NoisePrologue(cfg.Purpose, pattern), StaticKeypair: cfg.Static, PeerStatic: cfg.PeerStatic,
	})
	if err != nil {
		return nil, fmt.Errorf("noise: %w", err)
	}
	br := bufio.NewReaderSize(conn, readBuffer)
	if _, err := conn.Write([]byte{'O', 'P', NoiseVersion, pattern}); err != nil {
		return nil, fmt.Errorf("noise handshake: %w", err)
	}
	var send, recv *noise.CipherState
	var reply []byte
	if pattern == patternIK {
		msg, _, _, err := hs.WriteMessage(nil, cfg.Payload)
		if err != nil {
			return nil, fmt.Errorf("noise handshake: %w", err)
		}
		if err := writeRecord(conn, msg); err != nil {
			return nil, fmt.Errorf("noise handshake: %w", err)
		}
		in, err := readRecord(br, nil)
		if err != nil {
			return nil, handshakeReadErr(err)
		}
		if reply, send, recv, err = hs.ReadMessage(nil, in); err != nil {
			return nil, fmt.Errorf("noise handshake: responder's reply did not authenticate: %w", err)
		}
	} else {
		msg, _, _, err := hs.WriteMessage(nil, nil)
		if err != nil {
			return nil, fmt.Errorf("noise handshake: %w", err)
		}
		if err := writeRecord(conn, msg); err != nil {
			return nil, fmt.Errorf("noise handshake: %w", err)
		}
		in, err := readRecord(br, nil)
		if err != nil {
			return nil, handshakeReadErr(err)
		}
		if _, _, _, err = hs.ReadMessage(nil, in); err != nil {
			return nil, fmt.Errorf("noise handshake: %w", err)
		}
		if cfg.VerifyPeer != nil {
			if err := cfg.VerifyPeer(hs.PeerStatic()); err != nil {
				return nil, err
			}
		}
		msg, send, recv, err = hs.WriteMessage(nil, cfg.Payload)
		if err != nil {
			return nil, fmt.Errorf("noise handshake: %w", err)
		}
		if err := writeRecord(conn, msg); err != nil {
			return nil, fmt.Errorf("noise handshake: %w", err)
		}
	}
	nc := newNoiseConn(conn, br, hs.PeerStatic(), send, recv, cfg.rekeyInterval())
	nc.reply = reply
	return nc, nil
}

func handshakeReadErr(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
		return ErrHandshakeRefused
	}
	return fmt.Errorf("noise handshake: %w", err)
}

// NoiseResponder runs the responder's handshake over conn. On any failure
// — including a refusal by Authorize — it returns an error and sends
// nothing more; the caller closes conn.
func NoiseResponder(ctx context.Context, conn net.Conn, cfg NoiseConfig) (*NoiseConn, error) {
	done := withDeadline(ctx, conn, cfg.timeout())
	defer done()
	br := bufio.NewReaderSize(conn, readBuffer)
	var pre [4]byte
	if _, err := io.ReadFull(br, pre[:]); err != nil {
		return nil, fmt.Errorf("noise handshake: reading preamble: %w", err)
	}
	if pre[0] != 'O' || pre[1] != 'P' || pre[2] != NoiseVersion || (pre[3] != patternIK && pre[3] != patternXX) {
		return nil, ErrBadPreamble
	}
	pattern, hp := pre[3], noise.HandshakeIK
	if pattern == patternXX {
		if !cfg.AllowXX {
			return nil, ErrPatternNotAllowed
		}
		hp = noise.HandshakeXX
	}
	hs, err := noise.NewHandshakeState(noise.Config{
		CipherSuite: NoiseSuite, Random: cfg.rng(), Pattern: hp, Initiator: false,
		Prologue: NoisePrologue(cfg.Purpose, pattern), StaticKeypair: cfg.Static,
	})
	if err != nil {
		return nil, fmt.Errorf("noise: %w", err)
	}
	authorize := func(payload []byte) error {
		if len(payload) > MaxHandshakePayload {
			return fmt.Errorf("noise handshake: payload of %d bytes exceeds %d", len(payload), MaxHandshakePayload)
		}
		if cfg.Authorize == nil {
			return nil
		}
		return cfg.Authorize(hs.PeerStatic(), payload)
	}
	var send, recv *noise.CipherState
	in, err := readRecord(br, nil)
	if err != nil {
		return nil, fmt.Errorf("noise handshake: %w", err)
	}
	if pattern == patternIK {
		payload, _, _, err := hs.ReadMessage(nil, in)
		if err != nil {
			return nil, fmt.Errorf("noise handshake: initiator's message did not authenticate (wrong responder key?): %w", err)
		}
		if err := authorize(payload); err != nil {
			return nil, err
		}
		var reply []byte
		if cfg.Reply != nil {
			if reply = cfg.Reply(); len(reply) > MaxHandshakePayload {
				return nil, fmt.Errorf("noise handshake: reply payload of %d bytes exceeds %d", len(reply), MaxHandshakePayload)
			}
		}
		msg, cs1, cs2, err := hs.WriteMessage(nil, reply)
		if err != nil {
			return nil, fmt.Errorf("noise handshake: %w", err)
		}
		if err := writeRecord(conn, msg); err != nil {
			return nil, fmt.Errorf("noise handshake: %w", err)
		}
		recv, send = cs1, cs2
	} else {
		if _, _, _, err := hs.ReadMessage(nil, in); err != nil {
			return nil, fmt.Errorf("noise handshake: %w", err)
		}
		msg, _, _, err := hs.WriteMessage(nil, nil)
		if err != nil {
			return nil, fmt.Errorf("noise handshake: %w", err)
		}
		if err := writeRecord(conn, msg); err != nil {
			return nil, fmt.Errorf("noise handshake: %w", err)
		}
		in, err := readRecord(br, nil)
		if err != nil {
			return nil, fmt.Errorf("noise handshake: %w", err)
		}
		payload, cs1, cs2, err := hs.ReadMessage(nil, in)
		if err != nil {
			return nil, fmt.Errorf("noise handshake: %w", err)
		}
		if err := authorize(payload); err != nil {
			return nil, err
		}
		recv, send = cs1, cs2
	}
	return newNoiseConn(conn, br, hs.PeerStatic(), send, recv, cfg.rekeyInterval()), nil
}

func newNoiseConn(conn net.Conn, br *bufio.Reader, peer []byte, send, recv *noise.CipherState, rekey uint64) *NoiseConn {
	return &NoiseConn{conn: conn, br: br, peer: append([]byte(nil), peer...), send: send, recv: recv, rekey: rekey}
}

// PeerStatic returns the peer's authenticated static public key.
func (c *NoiseConn) PeerStatic() []byte { return c.peer }

// HandshakeReply is, on an IK initiator's channel, the payload of the
// responder's message 2 (NoiseConfig.Reply); nil otherwise.
func (c *NoiseConn) HandshakeReply() []byte { return c.reply }

// Read returns decrypted bytes.
func (c *NoiseConn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	for len(c.rplain) == 0 {
		if c.rerr != nil {
			return 0, c.rerr
		}
		ct, err := readRecord(c.br, c.rraw)
		if err != nil {
			c.rerr = err
			return 0, err
		}
		c.rraw = ct[:0]
		if len(ct) < noiseTagBytes {
			c.rerr = ErrRecordAuth
			c.conn.Close()
			return 0, c.rerr
		}
		// Decrypt straight into p when the record fits.
		if n := len(ct) - noiseTagBytes; n <= len(p) {
			out, err := c.recv.Decrypt(p[:0], nil, ct)
			if err != nil {
				return 0, c.authFailed()
			}
			c.countRecv()
			if len(out) > 0 {
				return len(out), nil
			}
			continue
		}
		out, err := c.recv.Decrypt(c.rplainBuf(), nil, ct)
		if err != nil {
			return 0, c.authFailed()
		}
		c.countRecv()
		c.rplain = out
	}
	n := copy(p, c.rplain)
	c.rplain = c.rplain[n:]
	return n, nil
}

func (c *NoiseConn) rplainBuf() []byte {
	if c.rbuf == nil {
		c.rbuf = make([]byte, 0, MaxRecordPlaintext)
	}
	return c.rbuf[:0]
}

func (c *NoiseConn) authFailed() error {
	c.rerr = ErrRecordAuth
	c.conn.Close()
	return c.rerr
}

func (c *NoiseConn) countRecv() {
	c.rcount++
	if c.rcount%c.rekey == 0 {
		c.recv.Rekey()
	}
}

// writeBatch is how many bytes of records Write gathers per system call.
// readBuffer is the buffered reader in front of the connection (large
// records bypass it). Both stay small on idle connections: a relay holds
// thousands of them.
const (
	writeBatch = 4 * (MaxRecordBytes + 2)
	readBuffer = 16 << 10
)

// Write encrypts p into records.
func (c *NoiseConn) Write(p []byte) (int, error) {
	return c.WriteBuffers(p)
}

// WriteBuffers encrypts each buffer into records of its own and sends them
// together, in as few system calls as the batch size allows: a small
// header and its body cost one write, without joining them in memory.
func (c *NoiseConn) WriteBuffers(bufs ...[]byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr != nil {
		return 0, c.werr
	}
	need := 0
	for _, p := range bufs {
		need += len(p) + (len(p)/MaxRecordPlaintext+1)*(2+noiseTagBytes)
	}
	if need = min(need, writeBatch); cap(c.wbuf) < need {
		c.wbuf = make([]byte, 0, max(need, 4096))
	}
	total := 0
	buf := c.wbuf[:0]
	for _, p := range bufs {
		for off := 0; off < len(p); {
			n := min(len(p)-off, MaxRecordPlaintext)
			if len(buf) > 0 && len(buf)+2+n+noiseTagBytes > cap(buf) {
				if _, err := c.conn.Write(buf); err != nil {
					c.werr = err
					return total, err
				}
				buf = c.wbuf[:0]
			}
			hdr := len(buf)
			out, err := c.send.Encrypt(append(buf, 0, 0), nil, p[off:off+n])
			if err != nil {
				c.werr = fmt.Errorf("noise: %w", err)
				return total, c.werr
			}
			binary.BigEndian.PutUint16(out[hdr:], uint16(len(out)-hdr-2))
			buf = out
			off += n
			total += n
			c.wcount++
			if c.wcount%c.rekey == 0 {
				c.send.Rekey()
			}
		}
	}
	if len(buf) > 0 {
		if _, err := c.conn.Write(buf); err != nil {
			c.werr = err
			return total, err
		}
	}
	return total, nil
}

// Close closes the underlying connection.
func (c *NoiseConn) Close() error { return c.conn.Close() }

// LocalAddr, RemoteAddr and the deadlines are the underlying connection's.
func (c *NoiseConn) LocalAddr() net.Addr                { return c.conn.LocalAddr() }
func (c *NoiseConn) RemoteAddr() net.Addr               { return c.conn.RemoteAddr() }
func (c *NoiseConn) SetDeadline(t time.Time) error      { return c.conn.SetDeadline(t) }
func (c *NoiseConn) SetReadDeadline(t time.Time) error  { return c.conn.SetReadDeadline(t) }
func (c *NoiseConn) SetWriteDeadline(t time.Time) error { return c.conn.SetWriteDeadline(t) }
