package transport

// Multiplexing: a yamux session runs over each Noise channel. On an
// executor link the client opens one control stream (msgpack RPC) and the
// executor opens one stream per followed process for its events, so
// yamux's per-stream flow control keeps one process's output from
// delaying another's, and a client that stops reading one stream slows
// only that process.

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
)

// MuxConfig configures a yamux session.
type MuxConfig struct {
	// StreamWindow is each stream's receive window. 4 MiB keeps a stream
	// at full speed up to 40 ms of round trip at 800 Mbit/s; it is also
	// the most one stream can buffer unread on the receiving side, so a
	// session's receive memory is bounded by streams × StreamWindow.
	StreamWindow uint32
	// KeepAlive is the ping interval; a peer that stops answering is
	// dropped after ConnectionWriteTimeout.
	KeepAlive              time.Duration
	ConnectionWriteTimeout time.Duration
	// MaxInboundStreams bounds the streams the peer may have open at once.
	MaxInboundStreams int
	// AcceptBacklog bounds streams opened but not yet accepted.
	AcceptBacklog int
}

// DefaultMuxConfig returns the defaults documented on MuxConfig.
func DefaultMuxConfig() MuxConfig {
	return MuxConfig{
		StreamWindow:           4 << 20,
		KeepAlive:              30 * time.Second,
		ConnectionWriteTimeout: 10 * time.Second,
		MaxInboundStreams:      64,
		AcceptBacklog:          256,
	}
}

// Validate reports the first invalid setting.
func (c MuxConfig) Validate() error {
	switch {
	case c.StreamWindow < 256<<10:
		return errors.New("mux: StreamWindow must be at least 256 KiB")
	case c.KeepAlive <= 0 || c.ConnectionWriteTimeout <= 0:
		return errors.New("mux: KeepAlive and ConnectionWriteTimeout must be positive")
	case c.MaxInboundStreams < 1 || c.AcceptBacklog < 1:
		return errors.New("mux: MaxInboundStreams and AcceptBacklog must be at least 1")
	}
	return nil
}

func (c MuxConfig) yamux() *yamux.Config {
	y := yamux.DefaultConfig()
	y.MaxStreamWindowSize = c.StreamWindow
	y.EnableKeepAlive = true
	y.KeepAliveInterval = c.KeepAlive
	y.ConnectionWriteTimeout = c.ConnectionWriteTimeout
	y.AcceptBacklog = c.AcceptBacklog
	y.StreamOpenTimeout = c.ConnectionWriteTimeout
	y.LogOutput = io.Discard
	return y
}

// MuxServer runs the accepting side of a yamux session over conn.
func MuxServer(conn net.Conn, cfg MuxConfig) (*yamux.Session, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return yamux.Server(&coalescer{Conn: conn}, cfg.yamux())
}

// MuxClient runs the dialling side of a yamux session over conn.
func MuxClient(conn net.Conn, cfg MuxConfig) (*yamux.Session, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return yamux.Client(&coalescer{Conn: conn}, cfg.yamux())
}

// yamux's header layout: version(1) type(1) flags(2) stream(4) length(4).
const (
	yamuxHeaderSize = 12
	yamuxTypeData   = 0
)

// coalescer joins each yamux data header with the body yamux writes right
// after it, so a frame costs one system call instead of two (and, over a
// NoiseConn, no extra copy). Headers of frames without a body pass
// straight through.
type coalescer struct {
	net.Conn
	mu  sync.Mutex
	hdr []byte
	buf []byte
}

type buffersWriter interface {
	WriteBuffers(bufs ...[]byte) (int, error)
}

func (c *coalescer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hdr == nil && len(p) == yamuxHeaderSize && p[1] == yamuxTypeData && binary.BigEndian.Uint32(p[8:12]) > 0 {
		c.hdr = append(c.hdr[:0:0], p...)
		return len(p), nil
	}
	if c.hdr == nil {
		return c.Conn.Write(p)
	}
	hdr := c.hdr
	c.hdr = nil
	if bw, ok := c.Conn.(buffersWriter); ok {
		n, err := bw.WriteBuffers(hdr, p)
		return max(n-len(hdr), 0), err
	}
	c.buf = append(append(c.buf[:0], hdr...), p...)
	n, err := c.Conn.Write(c.buf)
	if cap(c.buf) > 4<<20 {
		c.buf = nil
	}
	return max(n-len(hdr), 0), err
}
