package transport

// Multiplexing: a session of package transport/mux (SPEC.md there) runs
// over each Noise channel. On an executor link the client opens one
// control stream (msgpack RPC) and the executor opens one stream per
// followed process for its events, so per-stream flow control keeps one
// process's output from delaying another's, and a client that stops
// reading one stream slows only that process.
//
// Memory: a stream buffers at most its receive window unread (plus
// 128 KiB of chunk slack). Windows start at mux.InitialWindow (256 KiB)
// and grow with the measured bandwidth-delay product up to StreamWindow;
// their growth is bounded per connection by SessionWindow and per process
// by ProcessWindowBudget. So one connection's receive buffers are bounded
// by peer streams (≤ MaxStreams, default 1024) × 384 KiB + SessionWindow,
// and a whole executor's growth by ProcessWindowBudget. Streams the peer
// opened that nobody has accepted yet hold at most AcceptBacklogBytes
// (4 MiB) together, in at most AcceptBacklog (256) streams.

import (
	"errors"
	"net"
	"time"

	"github.com/outpost-exec/outpost/transport/mux"
)

// MuxSession and MuxStream are the multiplexer's session and stream.
type (
	MuxSession = mux.Session
	MuxStream  = mux.Stream
)

// ProcessWindowBudget bounds the window growth of every session in this
// process together: 256 MiB, eight streams at the 16 MiB cap with room to
// spare, so a busy executor or relay cannot be talked into unbounded
// receive buffers by many connections.
var ProcessWindowBudget = mux.NewBudget(256 << 20)

// MuxConfig configures a multiplexed session.
type MuxConfig struct {
	// StreamWindow caps each stream's receive window, the most one stream
	// buffers unread. A window starts at 256 KiB and doubles while the
	// reader keeps up and the window, not the reader, limits the rate
	// (measured against the round trip), so a bulk stream reaches 2–4×
	// the path's bandwidth-delay product: 16 MiB keeps one stream at full
	// speed to 80 MB/s at 100 ms, or 800 Mbit/s at 80 ms of round trip.
	StreamWindow uint32
	// SessionWindow bounds how far all of a connection's stream windows
	// may grow beyond 256 KiB, together (default 32 MiB; 0 selects it).
	SessionWindow int64
	// KeepAlive is the ping interval; a peer that does not answer within
	// ConnectionWriteTimeout is dropped. ConnectionWriteTimeout also
	// bounds a frame's write to the connection.
	KeepAlive              time.Duration
	ConnectionWriteTimeout time.Duration
	// MaxInboundStreams bounds the client-opened control streams the
	// executor serves at once (enforced by the executor, above the mux).
	MaxInboundStreams int
	// AcceptBacklog bounds streams the peer opened that are not yet
	// accepted; one more is reset (mux Config.AcceptBacklog).
	AcceptBacklog int
	// AcceptBacklogBytes bounds what those streams buffer, together; data
	// past it resets its stream (mux Config.AcceptBacklogBytes). 0
	// selects the mux default, 4 MiB, so a MuxConfig written before this
	// field keeps working; otherwise at least 256 KiB.
	AcceptBacklogBytes int64
	// MaxStreams bounds the streams the peer may have open at once in the
	// mux itself; one more is reset (mux Config.MaxStreams). It bounds the
	// session's receive buffers (see above). 0 selects the mux default,
	// 1024, so a MuxConfig written before this field keeps its behaviour.
	MaxStreams int
}

// DefaultMuxConfig returns the defaults documented on MuxConfig.
func DefaultMuxConfig() MuxConfig {
	return MuxConfig{
		StreamWindow:           16 << 20,
		SessionWindow:          32 << 20,
		KeepAlive:              30 * time.Second,
		ConnectionWriteTimeout: 10 * time.Second,
		MaxInboundStreams:      64,
		AcceptBacklog:          256,
		AcceptBacklogBytes:     mux.DefaultConfig().AcceptBacklogBytes,
		MaxStreams:             mux.DefaultConfig().MaxStreams,
	}
}

// Validate reports the first invalid setting.
func (c MuxConfig) Validate() error {
	switch {
	case c.StreamWindow < mux.InitialWindow || c.StreamWindow > 1<<30:
		return errors.New("mux: StreamWindow must be between 256 KiB and 1 GiB")
	case c.SessionWindow < 0:
		return errors.New("mux: SessionWindow must not be negative")
	case c.KeepAlive <= 0 || c.ConnectionWriteTimeout <= 0:
		return errors.New("mux: KeepAlive and ConnectionWriteTimeout must be positive")
	case c.MaxInboundStreams < 1 || c.AcceptBacklog < 1:
		return errors.New("mux: MaxInboundStreams and AcceptBacklog must be at least 1")
	case c.MaxStreams < 0:
		return errors.New("mux: MaxStreams must not be negative (0 selects 1024)")
	case c.AcceptBacklogBytes < 0 || c.AcceptBacklogBytes > 0 && c.AcceptBacklogBytes < mux.InitialWindow:
		return errors.New("mux: AcceptBacklogBytes must be at least 256 KiB (0 selects 4 MiB)")
	}
	return nil
}

func (c MuxConfig) mux() mux.Config {
	return mux.Config{
		MaxStreamWindow:    c.StreamWindow,
		SessionBudget:      c.SessionWindow,
		Shared:             ProcessWindowBudget,
		KeepAlive:          c.KeepAlive,
		WriteTimeout:       c.ConnectionWriteTimeout,
		AcceptBacklog:      c.AcceptBacklog,
		AcceptBacklogBytes: c.AcceptBacklogBytes,
		MaxStreams:         c.MaxStreams,
	}
}

// MuxServer runs the accepting side of a session over conn.
func MuxServer(conn net.Conn, cfg MuxConfig) (*mux.Session, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return mux.Server(conn, cfg.mux())
}

// MuxClient runs the dialling side of a session over conn.
func MuxClient(conn net.Conn, cfg MuxConfig) (*mux.Session, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return mux.Client(conn, cfg.mux())
}
