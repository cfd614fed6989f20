// Package mux multiplexes byte streams over one reliable, ordered
// connection (in outpost: a Noise channel, or net.Pipe in process).
//
// It replaces hashicorp/yamux, whose per-stream window is fixed and
// refreshed only after half of it is consumed, so on a long fat link a
// stream had half to three quarters of its window in flight and ran at
// about 40% of what the path allows. Here each stream's receive window
// starts small, grows with the measured bandwidth-delay product up to a
// cap, and is refreshed once a quarter of it is consumed; the growth of
// all windows together is bounded per session and (optionally) per
// process. SPEC.md in this directory is the wire specification.
package mux

import "encoding/binary"

// Frame header, 12 bytes, big-endian (SPEC.md section 2):
//
//	offset size field
//	0      1    version   Version (1); yamux sent 0 here
//	1      1    type      typeData, typeWindow, typePing, typeGoAway
//	2      1    flags     flagSYN | flagFIN | flagRST (data), flagACK (ping)
//	3      1    reserved  0
//	4      4    stream    stream id; 0 for ping and go-away
//	8      4    length    data: body bytes that follow; window: credit
//	                      added, in bytes; ping: opaque id; go-away: code
//
// Only data frames have a body.
const (
	Version    = 1
	HeaderSize = 12

	// InitialWindow is every stream's receive window when it opens, in
	// both directions, without any frame saying so: a sender may send
	// this much on a new stream before its first window frame.
	InitialWindow = 256 << 10

	// MaxDataFrame bounds the body a sender puts in one data frame, so
	// one stream's bulk write holds the connection for at most 256 KiB
	// (2 ms at 1 Gbit/s) before another stream's frame can go. Receivers
	// do not rely on it: the window is what bounds their buffering.
	MaxDataFrame = 256 << 10
)

const (
	typeData   byte = 0
	typeWindow byte = 1
	typePing   byte = 2
	typeGoAway byte = 3
)

const (
	flagSYN byte = 1 << 0 // data: first frame of a stream
	flagFIN byte = 1 << 1 // data: the sender will send no more on this stream
	flagRST byte = 1 << 2 // data: the stream is abandoned in both directions
	flagACK byte = 1 << 3 // ping: a reply
)

// Go-away codes.
const (
	goAwayNormal   = 0
	goAwayProtocol = 1
)

type header [HeaderSize]byte

func (h *header) encode(typ, flags byte, id, length uint32) {
	h[0] = Version
	h[1] = typ
	h[2] = flags
	h[3] = 0
	binary.BigEndian.PutUint32(h[4:8], id)
	binary.BigEndian.PutUint32(h[8:12], length)
}

func (h *header) typ() byte      { return h[1] }
func (h *header) flags() byte    { return h[2] }
func (h *header) stream() uint32 { return binary.BigEndian.Uint32(h[4:8]) }
func (h *header) length() uint32 { return binary.BigEndian.Uint32(h[8:12]) }
