package mux

import (
	"errors"
	"io"
	"net"
	"testing"
	"testing/synctest"
)

// sentFrame is a frame the session under test wrote.
type sentFrame struct {
	typ, flags byte
	id, length uint32
}

// readFrames reads the session's frames from the peer's end until the
// connection ends or stop reports true, skipping data bodies.
func readFrames(t *testing.T, c net.Conn, stop func(sentFrame) bool) []sentFrame {
	t.Helper()
	var out []sentFrame
	for {
		var h header
		if _, err := io.ReadFull(c, h[:]); err != nil {
			return out
		}
		f := sentFrame{h.typ(), h.flags(), h.stream(), h.length()}
		out = append(out, f)
		if f.typ == typeData && f.length > 0 {
			if _, err := io.CopyN(io.Discard, c, int64(f.length)); err != nil {
				return out
			}
		}
		if stop != nil && stop(f) {
			return out
		}
	}
}

// probePing is the id of the ping a test sends after the frames under
// test: an answer to it means the session accepted them.
const probePing = 0xC0FFEE

// expectRefused sends frames as a client's raw peer of a server session
// and requires the session to refuse them as SPEC.md section 2.5 says:
// a go-away with the protocol-error code, then the connection closed,
// Err a *ProtocolError, and no answer to a ping sent after them.
func expectRefused(t *testing.T, frames ...[]byte) {
	t.Helper()
	expectRefusedAfter(t, nil, frames...)
}

// expectRefusedAfter is expectRefused with the session's state set up by
// setup first (under the session's lock).
func expectRefusedAfter(t *testing.T, setup func(*Session), frames ...[]byte) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		a, b := net.Pipe()
		s, err := Server(b, Config{KeepAlive: -1})
		if err != nil {
			t.Fatal(err)
		}
		if setup != nil {
			s.mu.Lock()
			setup(s)
			s.mu.Unlock()
		}
		defer s.Close()
		defer a.Close()
		// The session's first frame is its RTT ping; once it is read and
		// every goroutine is idle, the connection is free for the
		// go-away (the session sends it only if no other write holds it).
		if got := readFrames(t, a, func(sentFrame) bool { return true }); len(got) != 1 || got[0].typ != typePing {
			t.Fatalf("first frame %+v, want the session's ping", got)
		}
		synctest.Wait()
		go func() {
			for _, f := range append(frames, frame(typePing, 0, 0, probePing, nil)) {
				if _, err := a.Write(f); err != nil {
					return
				}
			}
		}()
		got := readFrames(t, a, func(f sentFrame) bool {
			return f.typ == typePing && f.flags == flagACK && f.length == probePing
		})
		if n := len(got); n > 0 && got[n-1].typ == typePing && got[n-1].length == probePing {
			t.Fatalf("the session accepted the frames and answered the next ping (sent %+v)", got)
		}
		<-s.CloseChan()
		var pe *ProtocolError
		if !errors.As(s.Err(), &pe) {
			t.Fatalf("session ended with %v, want a *ProtocolError", s.Err())
		}
		want := sentFrame{typ: typeGoAway, length: goAwayProtocol}
		if n := len(got); n == 0 || got[n-1] != want {
			t.Fatalf("frames sent %+v, want the last to be go-away %d", got, goAwayProtocol)
		}
	})
}

// Every constrained header field of SPEC.md section 2 is checked on
// receive. Before these checks, the cases marked "was accepted" were
// taken as valid frames.
func TestStrictHeaderFields(t *testing.T) {
	syn1 := frame(typeData, flagSYN, 1, 0, nil)
	cases := map[string][][]byte{
		// Unknown flag bits, per type (all were accepted).
		"data flag 0x80 on a SYN":    {frame(typeData, flagSYN|0x80, 1, 0, nil)},
		"data flag 0x08 (ACK)":       {syn1, frame(typeData, flagACK, 1, 0, nil)},
		"data flag 0x40 with a body": {syn1, frame(typeData, 0x40, 1, 1, []byte{'x'})},
		"ping flag 0x10":             {frame(typePing, 0x10, 0, 7, nil)},
		"ping flag SYN":              {frame(typePing, flagSYN, 0, 7, nil)},
		"ping ACK with 0x80":         {frame(typePing, flagACK|0x80, 0, 7, nil)},
		"go-away flag 1":             {frame(typeGoAway, 1, 0, goAwayNormal, nil)},
		"go-away flag ACK":           {frame(typeGoAway, flagACK, 0, goAwayNormal, nil)},
		"window flag 0x80":           {syn1, frame(typeWindow, 0x80, 1, 1, nil)},
		// Unknown go-away codes (were accepted as "no new streams").
		"go-away code 2":          {frame(typeGoAway, 0, 0, 2, nil)},
		"go-away code 7":          {frame(typeGoAway, 0, 0, 7, nil)},
		"go-away code 0xffffffff": {frame(typeGoAway, 0, 0, 0xffffffff, nil)},
		// Stream 0 is the only id of ping and go-away (go-away was
		// accepted on any stream).
		"go-away on stream 1":  {frame(typeGoAway, 0, 1, goAwayNormal, nil)},
		"ping ACK on stream 3": {frame(typePing, flagACK, 3, 1, nil)},
		// Unknown types and the reserved byte.
		"type 4":             {frame(4, 0, 0, 0, nil)},
		"type 0xff":          {frame(0xff, 0, 0, 0, nil)},
		"reserved byte 0x80": {func() []byte { f := frame(typeData, flagSYN, 1, 0, nil); f[3] = 0x80; return f }()},
		// Stream ids: data and window on stream 0, ids never opened.
		"data on stream 0":   {frame(typeData, 0, 0, 0, nil)},
		"SYN on stream 0":    {frame(typeData, flagSYN, 0, 0, nil)},
		"window on stream 0": {frame(typeWindow, 0, 0, 1, nil)},
		// A skipped id was never opened: frames for it were discarded as
		// if for an ended stream (was accepted).
		"SYN skipping an id":         {frame(typeData, flagSYN, 3, 0, nil)},
		"data for a skipped id":      {syn1, frame(typeData, flagSYN, 5, 0, nil), frame(typeData, 0, 3, 1, []byte{'x'})},
		"first SYN above the lowest": {frame(typeData, flagSYN, 7, 0, nil)},
		// Data after FIN, also without a body (an empty frame or a second
		// FIN was accepted).
		"empty data after FIN": {frame(typeData, flagSYN|flagFIN, 1, 0, nil), frame(typeData, 0, 1, 0, nil)},
		"second FIN":           {frame(typeData, flagSYN|flagFIN, 1, 0, nil), frame(typeData, flagFIN, 1, 0, nil)},
		// RST carries no other flag and no body.
		"RST with SYN": {frame(typeData, flagSYN|flagRST, 1, 0, nil)},
		"RST with FIN": {syn1, frame(typeData, flagRST|flagFIN, 1, 0, nil)},
	}
	for name, frames := range cases {
		t.Run(name, func(t *testing.T) { expectRefused(t, frames...) })
	}
}

// Frames at the edges of what SPEC.md allows are accepted: the checks
// above refuse nothing a correct peer sends.
func TestStrictAcceptsValidEdges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := net.Pipe()
		s, err := Server(b, Config{KeepAlive: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		defer a.Close()
		go func() {
			for st, err := s.AcceptStream(); err == nil; st, err = s.AcceptStream() {
				go io.Copy(io.Discard, st)
			}
		}()
		frames := [][]byte{
			frame(typeData, flagSYN|flagFIN, 1, 1, []byte{'x'}), // opened and finished at once
			frame(typeWindow, 0, 1, 0, nil),                     // empty credit
			frame(typeData, flagSYN, 3, 0, nil),
			frame(typeData, flagRST, 3, 0, nil),
			frame(typeData, 0, 3, 1, []byte{'y'}), // in flight behind its RST: discarded
			frame(typeWindow, 0, 3, 5, nil),       // for an ended stream: ignored
			frame(typeData, flagSYN, 5, 0, nil),
			frame(typeData, flagFIN, 5, 0, nil),
			frame(typeData, flagRST, 5, 0, nil),     // reset after FIN
			frame(typePing, flagACK, 0, 12345, nil), // a reply nobody asked for
			frame(typeGoAway, 0, 0, goAwayNormal, nil),
			frame(typePing, 0, 0, probePing, nil),
		}
		go func() {
			for _, f := range frames {
				if _, err := a.Write(f); err != nil {
					return
				}
			}
		}()
		got := readFrames(t, a, func(f sentFrame) bool {
			return f.typ == typePing && f.flags == flagACK && f.length == probePing
		})
		if n := len(got); n == 0 || got[n-1].length != probePing {
			t.Fatalf("session ended (%v) after frames %+v", s.Err(), got)
		}
		if s.IsClosed() {
			t.Fatalf("session closed: %v", s.Err())
		}
		if _, err := s.OpenStream(); !errors.Is(err, ErrRemoteGoAway) {
			t.Fatalf("OpenStream after the peer's go-away: %v", err)
		}
	})
}

// A go-away with the protocol-error code is the peer's report that it
// is closing: the session ends, and does not answer it with a go-away of
// its own (it found no error in the peer's frames).
func TestPeerProtocolGoAwayNotEchoed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := net.Pipe()
		s, err := Server(b, Config{KeepAlive: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		defer a.Close()
		readFrames(t, a, func(sentFrame) bool { return true })
		synctest.Wait()
		go a.Write(frame(typeGoAway, 0, 0, goAwayProtocol, nil))
		got := readFrames(t, a, nil)
		<-s.CloseChan()
		if !errors.Is(s.Err(), ErrPeerProtocol) {
			t.Fatalf("session ended with %v, want ErrPeerProtocol", s.Err())
		}
		if len(got) != 0 {
			t.Fatalf("the session answered the peer's go-away with %+v", got)
		}
	})
}

// The peer's last id does not wrap round to a first one: after a client
// has used 0xffffffff, stream 1 is not opened again.
func TestPeerIDsDoNotWrap(t *testing.T) {
	expectRefusedAfter(t, func(s *Session) { s.lastPeerID = 0xffffffff },
		frame(typeData, flagSYN, 1, 0, nil))
	expectRefusedAfter(t, func(s *Session) { s.lastPeerID = 0xfffffffd },
		frame(typeData, flagSYN, 0xffffffff, 0, nil), frame(typeData, flagSYN, 1, 0, nil))
}
