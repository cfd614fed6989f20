package mux

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// fuzzConn is a session's connection whose peer is a fixed byte string:
// Read returns it and then io.EOF; Write records what the session sends.
// Before each Read (so between frames, and within a body) it runs check
// on the receive loop's goroutine, which holds no lock of the session's
// there.
type fuzzConn struct {
	in    *bytes.Reader
	check func()

	mu     sync.Mutex
	out    []byte
	closed bool
}

func (c *fuzzConn) Read(p []byte) (int, error) {
	c.check()
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return 0, net.ErrClosed
	}
	return c.in.Read(p)
}

func (c *fuzzConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, net.ErrClosed
	}
	c.out = append(c.out, p...)
	return len(p), nil
}

func (c *fuzzConn) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	return nil
}

func (c *fuzzConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *fuzzConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *fuzzConn) SetDeadline(time.Time) error      { return nil }
func (c *fuzzConn) SetReadDeadline(time.Time) error  { return nil }
func (c *fuzzConn) SetWriteDeadline(time.Time) error { return nil }

// fuzzConfig keeps the bounds small, so a fuzzer reaches them.
var fuzzConfig = Config{KeepAlive: -1, MaxStreamWindow: InitialWindow, MaxStreams: 4, AcceptBacklog: 8}

// FuzzMuxRecv feeds arbitrary bytes to a server session as its peer's
// side of the connection. The session must not panic; at every read its
// streams, accept queue, pings and buffers stay within the configured
// bounds; it writes only well-formed frames, at most one per frame it
// read besides its own first ping and a final go-away; and it ends with
// a protocol error, a version error, or the end of the input (cut at a
// frame's boundary or inside one).
func FuzzMuxRecv(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		var s *Session
		var ready sync.WaitGroup
		ready.Add(1)
		conn := &fuzzConn{in: bytes.NewReader(data)}
		conn.check = func() {
			ready.Wait() // s is set
			checkBounds(t, s)
		}
		s, err := Server(conn, fuzzConfig)
		if err != nil {
			t.Fatal(err)
		}
		ready.Done()
		<-s.recvDone
		s.Close()
		checkBounds(t, s)

		err = s.Err()
		var pe *ProtocolError
		switch {
		case errors.As(err, &pe), errors.Is(err, ErrVersion),
			errors.Is(err, ErrSessionShutdown), errors.Is(err, io.ErrUnexpectedEOF):
		default:
			t.Fatalf("session ended with %v", err)
		}
		if at := headerViolation(data); at >= 0 && !errors.As(err, &pe) && !errors.Is(err, ErrVersion) {
			t.Fatalf("header at byte %d breaks SPEC.md section 2, yet the session ended with %v", at, err)
		}

		conn.mu.Lock()
		out := append([]byte(nil), conn.out...)
		conn.mu.Unlock()
		if max := len(data) + 2*HeaderSize; len(out) > max {
			t.Fatalf("wrote %d bytes for %d read", len(out), len(data))
		}
		checkSent(t, out, err)
	})
}

// headerViolation walks data as frames (a data frame's body skipped by
// its length) and returns the offset of the first whole header that
// breaks a rule of SPEC.md section 2 checkable from the header alone, or
// -1: an input with one must end the session with a protocol (or
// version) error, earlier or there. A go-away 1 counts, since it ends the
// session with ErrPeerProtocol.
func headerViolation(data []byte) int {
	for at := 0; at+HeaderSize <= len(data); {
		var h header
		copy(h[:], data[at:])
		typ, fl, id, n := h.typ(), h.flags(), h.stream(), h.length()
		ok := h[0] == Version && h[3] == 0
		switch typ {
		case typeData:
			ok = ok && id != 0 && fl&^(flagSYN|flagFIN|flagRST) == 0 &&
				(fl&flagRST == 0 || fl == flagRST && n == 0)
		case typeWindow:
			ok = ok && id != 0 && fl == 0
		case typePing:
			ok = ok && id == 0 && fl&^flagACK == 0
		case typeGoAway:
			ok = ok && id == 0 && fl == 0 && n == goAwayNormal
		default:
			ok = false
		}
		if !ok {
			return at
		}
		at += HeaderSize
		if typ == typeData {
			if uint64(n) > uint64(len(data)-at) {
				return -1 // cut inside the body
			}
			at += int(n)
		}
	}
	return -1
}

// checkBounds fails t if s holds more than fuzzConfig allows.
func checkBounds(t *testing.T, s *Session) {
	s.mu.Lock()
	inbound, streams, accepted, pings := s.inbound, len(s.streams), len(s.accept), len(s.pings)
	all := make([]*Stream, 0, len(s.streams))
	for _, st := range s.streams {
		all = append(all, st)
	}
	s.mu.Unlock()
	if inbound > fuzzConfig.MaxStreams || streams > fuzzConfig.MaxStreams {
		t.Fatalf("%d streams (%d inbound), MaxStreams %d", streams, inbound, fuzzConfig.MaxStreams)
	}
	if accepted > fuzzConfig.AcceptBacklog {
		t.Fatalf("%d streams awaiting accept, backlog %d", accepted, fuzzConfig.AcceptBacklog)
	}
	if pings > 1 {
		t.Fatalf("%d pings outstanding", pings)
	}
	for _, st := range all {
		st.mu.Lock()
		buf, limit, chunks := st.buffered(), st.rx.limit, len(st.chunks)
		st.mu.Unlock()
		// Nothing reads, so no window grows past the first.
		if limit > InitialWindow || buf > limit {
			t.Fatalf("stream %d buffers %d, limit %d", st.id, buf, limit)
		}
		if chunks > InitialWindow/chunkSize+2 {
			t.Fatalf("stream %d holds %d chunks", st.id, chunks)
		}
	}
}

// checkSent fails t unless out is whole frames SPEC.md allows a server
// to send, a go-away only last, and one with the protocol-error code
// only for a session that found such an error.
func checkSent(t *testing.T, out []byte, end error) {
	if len(out)%HeaderSize != 0 {
		t.Fatalf("wrote %d bytes, not whole headers", len(out))
	}
	for i := 0; i < len(out); i += HeaderSize {
		var h header
		copy(h[:], out[i:])
		last := i+HeaderSize == len(out)
		ok := h[0] == Version && h[3] == 0
		switch h.typ() {
		case typeData: // the session only resets refused streams
			ok = ok && h.flags() == flagRST && h.length() == 0 && h.stream()%2 == 1
		case typePing:
			ok = ok && h.flags()&^flagACK == 0 && h.stream() == 0
		case typeGoAway:
			var pe *ProtocolError
			ok = ok && last && h.flags() == 0 && h.stream() == 0 && h.length() == goAwayProtocol &&
				(errors.As(end, &pe) && end != ErrPeerProtocol || errors.Is(end, ErrVersion))
		default:
			ok = false
		}
		if !ok {
			t.Fatalf("frame %d written is % x (session ended with %v)", i/HeaderSize, h[:], end)
		}
	}
}
