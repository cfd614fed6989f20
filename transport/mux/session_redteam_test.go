package mux

import (
	"io"
	"net"
	"testing"
	"time"
)

// Redteam: a hostile peer speaking raw frames to a server session. Each
// protocol violation must end the session (promptly, without the server
// buffering beyond its window).
func hostile(t *testing.T) (*Session, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() { c, _ := ln.Accept(); acc <- c }()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := Server(<-acc, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, raw)
	t.Cleanup(func() { raw.Close(); s.Close() })
	return s, raw
}

func frame(typ, flags byte, id, n uint32, body []byte) []byte {
	var h header
	h.encode(typ, flags, id, n)
	return append(h[:], body...)
}

func TestRedteamHostilePeerViolationsEndTheSession(t *testing.T) {
	cases := map[string][][]byte{
		"SYN of the wrong parity": {frame(typeData, flagSYN, 2, 0, nil)},
		"stream id reused":        {frame(typeData, flagSYN, 1, 0, nil), frame(typeData, flagSYN, 1, 0, nil)},
		"stream id going back":    {frame(typeData, flagSYN, 5, 0, nil), frame(typeData, flagSYN, 3, 0, nil)},
		"window past 2^32": {frame(typeData, flagSYN, 1, 0, nil),
			frame(typeWindow, 0, 1, 0xffffffff, nil)},
		"data after FIN": {frame(typeData, flagSYN|flagFIN, 1, 0, nil), frame(typeData, 0, 1, 1, []byte{'x'})},
		"data beyond the window": {frame(typeData, flagSYN, 1, InitialWindow, make([]byte, InitialWindow)),
			frame(typeData, 0, 1, 1, []byte{'x'})},
		"huge length on a stream never opened": {frame(typeData, 0, 7, 0xffffffff, nil)},
		"window for a stream never opened":     {frame(typeWindow, 0, 9, 1, nil)},
		"RST with a body":                      {frame(typeData, flagSYN, 1, 0, nil), frame(typeData, flagRST, 1, 1, []byte{'x'})},
		"unknown frame type":                   {frame(9, 0, 0, 0, nil)},
		"ping on a stream":                     {frame(typePing, 0, 1, 0, nil)},
		"reserved byte":                        {func() []byte { f := frame(typePing, 0, 0, 0, nil); f[3] = 1; return f }()},
	}
	for name, frames := range cases {
		t.Run(name, func(t *testing.T) {
			s, raw := hostile(t)
			go func() {
				for _, f := range frames {
					if _, err := raw.Write(f); err != nil {
						return
					}
				}
			}()
			select {
			case <-s.CloseChan():
			case <-time.After(5 * time.Second):
				t.Fatal("the session survived the violation")
			}
		})
	}
}

// A peer that opens streams without end is held to MaxStreams and the
// accept backlog: refused SYNs are reset, never queued without bound.
func TestRedteamStreamFloodIsBounded(t *testing.T) {
	s, raw := hostile(t)
	cfg := DefaultConfig()
	n := cfg.MaxStreams + cfg.AcceptBacklog + 64
	var b []byte
	for i := range n {
		b = append(b, frame(typeData, flagSYN, uint32(2*i+1), 0, nil)...)
	}
	go raw.Write(b)
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.mu.Lock()
		k, last := len(s.streams), s.lastPeerID
		s.mu.Unlock()
		if k > cfg.MaxStreams || k > cfg.AcceptBacklog {
			t.Fatalf("%d streams held (MaxStreams %d, backlog %d)", k, cfg.MaxStreams, cfg.AcceptBacklog)
		}
		if last == uint32(2*(n-1)+1) || s.IsClosed() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("SYNs not read: last %d", last)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
