package mux

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Config configures a session. The zero value of a field selects its
// default (DefaultConfig).
type Config struct {
	// MaxStreamWindow caps one stream's receive window, hence what one
	// stream buffers unread (plus at most 2 × chunkSize of slack).
	// Default 16 MiB: 2 × the bandwidth-delay product of 100 MB/s at
	// 80 ms, or 25 MB/s at 320 ms. At least InitialWindow, at most 1 GiB.
	MaxStreamWindow uint32
	// SessionBudget bounds the growth of all this session's stream
	// windows beyond InitialWindow, together. Default 32 MiB.
	SessionBudget int64
	// Shared, if set, is a further budget drawn on by this and other
	// sessions (outpost: one per process).
	Shared *Budget
	// KeepAlive is the ping interval; a ping not answered within
	// WriteTimeout closes the session. Default 30 s; negative disables.
	KeepAlive time.Duration
	// WriteTimeout bounds a frame's write to the connection (applied as
	// a deadline renewed when less than half of it is left, so a write
	// that makes no progress fails after WriteTimeout/2 to WriteTimeout)
	// and a ping's answer. Default 10 s.
	WriteTimeout time.Duration
	// AcceptBacklog bounds streams the peer opened that AcceptStream has
	// not returned yet; one more is reset. Default 256.
	AcceptBacklog int
	// AcceptBacklogBytes bounds the receive buffers of those streams
	// together, counted as allocated (a stream's first chunk is 4 KiB when
	// its data fits, then 64 KiB chunks): data that would take them past
	// it resets its stream, so the backlog holds at most this much however
	// the peer spreads its initial windows (256 streams × 256 KiB would be
	// 64 MiB). Default 4 MiB, sixteen streams' full initial windows; at
	// least InitialWindow.
	AcceptBacklogBytes int64
	// MaxStreams bounds the streams the peer may have open at once; one
	// more is reset. Default 1024.
	MaxStreams int
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{
		MaxStreamWindow:    16 << 20,
		SessionBudget:      32 << 20,
		KeepAlive:          30 * time.Second,
		WriteTimeout:       10 * time.Second,
		AcceptBacklog:      256,
		AcceptBacklogBytes: 4 << 20,
		MaxStreams:         1024,
	}
}

func (c Config) withDefaults() (Config, error) {
	d := DefaultConfig()
	if c.MaxStreamWindow == 0 {
		c.MaxStreamWindow = d.MaxStreamWindow
	}
	if c.SessionBudget == 0 {
		c.SessionBudget = d.SessionBudget
	}
	if c.KeepAlive == 0 {
		c.KeepAlive = d.KeepAlive
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = d.WriteTimeout
	}
	if c.AcceptBacklog == 0 {
		c.AcceptBacklog = d.AcceptBacklog
	}
	if c.MaxStreams == 0 {
		c.MaxStreams = d.MaxStreams
	}
	if c.AcceptBacklogBytes == 0 {
		c.AcceptBacklogBytes = d.AcceptBacklogBytes
	}
	switch {
	case c.MaxStreamWindow < InitialWindow || c.MaxStreamWindow > 1<<30:
		return c, errors.New("mux: MaxStreamWindow must be between 256 KiB and 1 GiB")
	case c.SessionBudget < 0 || c.WriteTimeout < 0 || c.AcceptBacklog < 0 || c.MaxStreams < 0:
		return c, errors.New("mux: SessionBudget, WriteTimeout, AcceptBacklog and MaxStreams must not be negative")
	case c.AcceptBacklogBytes < InitialWindow:
		return c, errors.New("mux: AcceptBacklogBytes must be at least InitialWindow (256 KiB)")
	}
	return c, nil
}

// Errors.
var (
	ErrSessionShutdown  = errors.New("mux: session shutdown")
	ErrStreamClosed     = errors.New("mux: stream closed for writing")
	ErrStreamReset      = errors.New("mux: stream reset")
	ErrRemoteGoAway     = errors.New("mux: the peer is not accepting streams")
	ErrKeepAliveTimeout = errors.New("mux: keepalive timeout")
	ErrTimeout          = errors.New("mux: ping timeout")
	ErrVersion          = errors.New("mux: the peer speaks another multiplexer version (an outpost from before mux 1 speaks yamux)")
	// ErrPeerProtocol: the peer sent go-away 1, its report of a protocol
	// error of ours, and is closing the connection.
	ErrPeerProtocol = &ProtocolError{Msg: "the peer reports a protocol error of ours"}
)

// ProtocolError is a peer's violation of SPEC.md; the session is closed.
type ProtocolError struct{ Msg string }

func (e *ProtocolError) Error() string { return "mux: protocol error: " + e.Msg }

func protoErr(format string, a ...any) error {
	return &ProtocolError{Msg: fmt.Sprintf(format, a...)}
}

type buffersWriter interface {
	WriteBuffers(bufs ...[]byte) (int, error)
}

type ctrlFrame struct {
	typ, flags byte
	id, length uint32
}

// smallFrame: on a connection without WriteBuffers, a frame whose body
// is at most this is joined with its header in a buffer of the session's
// (so bounded by it); a larger one goes as two writes.
const smallFrame = 16 << 10

// ctrlQueue bounds control frames the receive loop has queued for the
// writer (ping replies, resets of refused streams): a peer that sends
// them faster than the connection takes our replies is misbehaving.
const ctrlQueue = 64

// Session is one end of a multiplexed connection.
type Session struct {
	conn   net.Conn
	client bool
	cfg    Config
	own    *Budget

	// wmu serialises frames onto conn; hdr, bufs, small and wdl are its.
	wmu   sync.Mutex
	bw    buffersWriter
	hdr   header
	bufs  [2][]byte
	small []byte // header + body of a small frame, ≤ HeaderSize + smallFrame
	wdl   time.Time

	ctrl chan ctrlFrame

	openMu  sync.Mutex
	mu      sync.Mutex
	streams map[uint32]*Stream
	inbound int // peer-opened streams in streams
	// backlogBytes is what the streams in accept (not yet returned by
	// AcceptStream) have allocated, ≤ cfg.AcceptBacklogBytes; each
	// stream's share is its queuedCharge.
	backlogBytes int64
	nextID       uint32 // ours: odd for the client, even for the server
	lastPeerID   uint32
	goAwaySent   bool
	pings        map[uint32]*pending
	pingID       uint32
	lastRTTAt    time.Time
	pingPending  bool

	remoteGoAway atomic.Bool
	rtt          atomic.Int64 // smoothed, nanoseconds; 0 before the first sample
	minRTT       atomic.Int64 // the least sample, nanoseconds; 0 before the first

	accept    chan *Stream
	closed    chan struct{}
	recvDone  chan struct{} // closed when recvLoop returns
	closeOnce sync.Once
	err       error // why closed; set before closed is closed
}

type pending struct {
	sent time.Time
	done chan struct{} // nil for a ping nobody waits for
}

// Client starts the dialling side of a session over conn (odd stream ids).
func Client(conn net.Conn, cfg Config) (*Session, error) { return newSession(conn, cfg, true) }

// Server starts the accepting side of a session over conn (even ids).
func Server(conn net.Conn, cfg Config) (*Session, error) { return newSession(conn, cfg, false) }

func newSession(conn net.Conn, cfg Config, client bool) (*Session, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Session{
		conn:     conn,
		client:   client,
		cfg:      cfg,
		own:      NewBudget(cfg.SessionBudget),
		ctrl:     make(chan ctrlFrame, ctrlQueue),
		streams:  make(map[uint32]*Stream),
		pings:    make(map[uint32]*pending),
		accept:   make(chan *Stream, cfg.AcceptBacklog),
		closed:   make(chan struct{}),
		recvDone: make(chan struct{}),
	}
	s.bw, _ = conn.(buffersWriter)
	if client {
		s.nextID = 1
	} else {
		s.nextID = 2
	}
	go s.recvLoop()
	go s.sendLoop()
	if cfg.KeepAlive > 0 {
		go s.keepalive()
	}
	// A first RTT sample for the window tuner, before any stream needs it.
	s.pingAsync()
	return s, nil
}

// OpenStream opens a stream; its SYN goes out at once, so the peer's
// AcceptStream returns without waiting for data.
func (s *Session) OpenStream() (*Stream, error) {
	if s.remoteGoAway.Load() {
		return nil, ErrRemoteGoAway
	}
	// SYNs must reach the peer in id order (it only remembers the
	// highest id it has seen), so ids are taken and SYNs sent in turn.
	s.openMu.Lock()
	defer s.openMu.Unlock()
	s.mu.Lock()
	if s.IsClosed() {
		s.mu.Unlock()
		return nil, ErrSessionShutdown
	}
	id := s.nextID
	if id > ^uint32(0)-2 {
		s.mu.Unlock()
		return nil, errors.New("mux: stream ids exhausted")
	}
	s.nextID += 2
	st := newStream(s, id)
	s.streams[id] = st
	s.mu.Unlock()
	if err := st.sendFlags(flagSYN); err != nil {
		s.forget(st)
		return nil, err
	}
	return st, nil
}

// AcceptStream returns the next stream the peer opened (skipping those
// reset while they waited for their backlog's bytes).
func (s *Session) AcceptStream() (*Stream, error) {
	for {
		select {
		case st := <-s.accept:
			s.mu.Lock()
			s.unqueue(st)
			refused := st.refused
			s.mu.Unlock()
			if refused {
				continue
			}
			return st, nil
		case <-s.closed:
			// Streams already queued are dropped with the session.
			return nil, ErrSessionShutdown
		}
	}
}

// unqueue takes st out of the backlog's accounting; s.mu is held.
func (s *Session) unqueue(st *Stream) {
	if st.queued {
		st.queued = false
		s.backlogBytes -= st.queuedCharge
		st.queuedCharge = 0
	}
}

// admitQueued charges the backlog for the chunks an n-byte frame will
// allocate on st; false when st waits in the backlog and the charge does
// not fit, and st is then marked refused (to be reset).
func (s *Session) admitQueued(st *Stream, n uint32) bool {
	st.mu.Lock()
	cost := st.chunkCost(n)
	st.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case !st.queued:
		return true
	case s.backlogBytes+cost > s.cfg.AcceptBacklogBytes:
		s.unqueue(st)
		st.refused = true
		return false
	}
	s.backlogBytes += cost
	st.queuedCharge += cost
	return true
}

// Accept is AcceptStream as a net.Listener's.
func (s *Session) Accept() (net.Conn, error) {
	st, err := s.AcceptStream()
	if err != nil {
		return nil, err
	}
	return st, nil
}

// Open is OpenStream returning a net.Conn.
func (s *Session) Open() (net.Conn, error) {
	st, err := s.OpenStream()
	if err != nil {
		return nil, err
	}
	return st, nil
}

// GoAway tells the peer to open no more streams; streams it opens later
// are reset. Open streams carry on.
func (s *Session) GoAway() error {
	s.mu.Lock()
	s.goAwaySent = true
	s.mu.Unlock()
	return s.writeHeader(typeGoAway, 0, 0, goAwayNormal)
}

// Close closes the connection at once: every stream's pending and later
// calls fail with ErrSessionShutdown (after reads drain what is buffered).
//
// It returns once the receive loop has stopped, so nothing of the session
// reads the connection any more and every stream has been woken.
func (s *Session) Close() error {
	s.closeWith(ErrSessionShutdown)
	<-s.recvDone
	return nil
}

// CloseChan is closed when the session ends.
func (s *Session) CloseChan() <-chan struct{} { return s.closed }

// IsClosed reports whether the session has ended.
func (s *Session) IsClosed() bool {
	select {
	case <-s.closed:
		return true
	default:
		return false
	}
}

// Err returns why the session ended (nil while it runs).
func (s *Session) Err() error {
	if !s.IsClosed() {
		return nil
	}
	return s.err
}

// NumStreams returns the streams open in either direction.
func (s *Session) NumStreams() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.streams)
}

// Addr, LocalAddr and RemoteAddr are the connection's.
func (s *Session) Addr() net.Addr       { return s.conn.LocalAddr() }
func (s *Session) LocalAddr() net.Addr  { return s.conn.LocalAddr() }
func (s *Session) RemoteAddr() net.Addr { return s.conn.RemoteAddr() }

// RTT returns the smoothed round trip measured by pings (0 before the
// first answer). The window tuner uses it rather than MinRTT: a ping's
// answer waits behind the data queued in the sender's socket buffer, and
// the window has to cover that data as well as the wire's (a relay hop of
// 20 ms with a 4 MiB socket buffer needs far more than 2 × its own BDP).
// The kernel bounds that queue, so the estimate cannot grow the window
// without end; the window's cap and the budgets bound it in any case.
func (s *Session) RTT() time.Duration { return time.Duration(s.rtt.Load()) }

// MinRTT returns the least round trip measured by pings (0 before the
// first answer): the path's own, without the queues data builds.
func (s *Session) MinRTT() time.Duration { return time.Duration(s.minRTT.Load()) }

// Ping sends a ping and waits for its answer, at most WriteTimeout.
func (s *Session) Ping() (time.Duration, error) {
	done := make(chan struct{})
	s.mu.Lock()
	s.pingID++
	id := s.pingID
	start := time.Now()
	s.pings[id] = &pending{sent: start, done: done}
	s.mu.Unlock()
	if err := s.writeHeader(typePing, 0, 0, id); err != nil {
		s.dropPing(id)
		return 0, err
	}
	t := time.NewTimer(s.cfg.WriteTimeout)
	defer t.Stop()
	select {
	case <-done:
		return time.Since(start), nil
	case <-t.C:
		s.dropPing(id)
		return 0, ErrTimeout
	case <-s.closed:
		return 0, ErrSessionShutdown
	}
}

func (s *Session) dropPing(id uint32) {
	s.mu.Lock()
	delete(s.pings, id)
	s.mu.Unlock()
}

// pingAsync sends a ping whose answer only updates the RTT; at most one
// is outstanding, so the pings map stays bounded by waiting callers + 1.
func (s *Session) pingAsync() {
	s.mu.Lock()
	if s.pingPending {
		s.mu.Unlock()
		return
	}
	s.pingPending = true
	s.pingID++
	id := s.pingID
	s.pings[id] = &pending{sent: time.Now()}
	s.mu.Unlock()
	select {
	case s.ctrl <- ctrlFrame{typ: typePing, id: 0, length: id}:
	default:
		s.mu.Lock()
		s.pingPending = false
		delete(s.pings, id)
		s.mu.Unlock()
	}
}

// rttFresh reports whether the last RTT sample is recent enough for the
// tuner (see rttMaxAge).
func (s *Session) rttFresh(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.lastRTTAt.IsZero() && now.Sub(s.lastRTTAt) < rttMaxAge
}

func (s *Session) pong(id uint32) {
	s.mu.Lock()
	p := s.pings[id]
	delete(s.pings, id)
	if p != nil && p.done == nil {
		s.pingPending = false
	}
	now := time.Now()
	if p != nil {
		s.lastRTTAt = now
	}
	s.mu.Unlock()
	if p == nil {
		return // unsolicited or timed out: ignored
	}
	sample := int64(now.Sub(p.sent))
	if m := s.minRTT.Load(); m == 0 || sample < m {
		s.minRTT.Store(sample)
	}
	if old := s.rtt.Load(); old == 0 {
		s.rtt.Store(sample)
	} else {
		s.rtt.Store(old - old/8 + sample/8) // TCP's SRTT gain, 1/8
	}
	if p.done != nil {
		close(p.done)
	}
}

func (s *Session) keepalive() {
	t := time.NewTicker(s.cfg.KeepAlive)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			if _, err := s.Ping(); err != nil {
				if err == ErrTimeout {
					err = ErrKeepAliveTimeout
				}
				s.closeWith(err)
				return
			}
		case <-s.closed:
			return
		}
	}
}

func (s *Session) closeWith(err error) {
	s.closeOnce.Do(func() {
		s.err = err
		close(s.closed)
		s.conn.Close()
		s.mu.Lock()
		all := make([]*Stream, 0, len(s.streams))
		for _, st := range s.streams {
			all = append(all, st)
		}
		s.mu.Unlock()
		for _, st := range all {
			st.wake()
			s.forget(st)
		}
	})
}

// forget removes st from the session and returns its window growth to
// the budgets; idempotent.
func (s *Session) forget(st *Stream) {
	st.mu.Lock()
	r := st.rx.reserved
	st.rx.reserved = 0
	st.gone = true
	st.mu.Unlock()
	s.release(r)
	s.mu.Lock()
	if s.streams[st.id] == st {
		delete(s.streams, st.id)
		if st.inbound {
			s.inbound--
		}
	}
	s.unqueue(st)
	s.mu.Unlock()
}

func (s *Session) reserve(n int64) int64 {
	got := s.own.take(n)
	if got > 0 && s.cfg.Shared != nil {
		shared := s.cfg.Shared.take(got)
		s.own.release(got - shared)
		got = shared
	}
	return got
}

func (s *Session) release(n int64) {
	s.own.release(n)
	if s.cfg.Shared != nil {
		s.cfg.Shared.release(n)
	}
}

// writeHeader writes a frame without a body.
func (s *Session) writeHeader(typ, flags byte, id, length uint32) error {
	return s.writeFrame(typ, flags, id, length, nil)
}

// writeFrame writes one frame whole; a failed write closes the session,
// since a frame cut short leaves the peer mid-frame.
func (s *Session) writeFrame(typ, flags byte, id, length uint32, body []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.IsClosed() {
		return ErrSessionShutdown
	}
	if d := s.cfg.WriteTimeout; d > 0 {
		if now := time.Now(); s.wdl.Sub(now) < d/2 {
			s.wdl = now.Add(d)
			s.conn.SetWriteDeadline(s.wdl)
		}
	}
	s.hdr.encode(typ, flags, id, length)
	var err error
	switch {
	case len(body) == 0:
		_, err = s.conn.Write(s.hdr[:])
	case s.bw != nil:
		s.bufs[0], s.bufs[1] = s.hdr[:], body
		_, err = s.bw.WriteBuffers(s.bufs[:]...)
		s.bufs[1] = nil
	case len(body) <= smallFrame:
		// One write for a small frame (an interactive keystroke, an
		// RPC), as the peer may see each write as a record or packet.
		s.small = append(append(s.small[:0], s.hdr[:]...), body...)
		_, err = s.conn.Write(s.small)
	default:
		if _, err = s.conn.Write(s.hdr[:]); err == nil {
			_, err = s.conn.Write(body)
		}
	}
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			err = fmt.Errorf("mux: a frame write made no progress for %v: %w", s.cfg.WriteTimeout/2, err)
		}
		go s.closeWith(err) // not under wmu: closeWith closes conn only
		return ErrSessionShutdown
	}
	return nil
}

// sendLoop writes the control frames the receive loop queued; the
// receive loop itself never writes, so it never waits on the peer
// reading (two peers each blocked writing would otherwise deadlock).
func (s *Session) sendLoop() {
	for {
		select {
		case f := <-s.ctrl:
			if s.writeHeader(f.typ, f.flags, f.id, f.length) != nil {
				return
			}
		case <-s.closed:
			return
		}
	}
}

func (s *Session) queueCtrl(f ctrlFrame) error {
	select {
	case s.ctrl <- f:
		return nil
	default:
		return protoErr("more than %d control frames awaiting the connection", ctrlQueue)
	}
}

func (s *Session) recvLoop() {
	defer close(s.recvDone)
	err := s.recv()
	if err == io.EOF {
		err = ErrSessionShutdown
	}
	var pe *ProtocolError
	// The peer's own go-away 1 is not answered: it found the error, and
	// is already closing.
	if (errors.As(err, &pe) || err == ErrVersion) && err != ErrPeerProtocol && s.wmu.TryLock() {
		// Best effort, and only if the connection is free: tell the peer
		// why before hanging up. A peer that does not read (the writer
		// holding wmu is stuck) gets no explanation and no wait. wmu is
		// kept until the session is closed, so the go-away is the last
		// frame: no other writer can slip one in after it, nor take the
		// connection between the check and the write.
		s.conn.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		s.hdr.encode(typeGoAway, 0, 0, goAwayProtocol)
		s.conn.Write(s.hdr[:])
		s.closeWith(err)
		s.wmu.Unlock()
	}
	s.closeWith(err)
}

func (s *Session) recv() error {
	var h header
	for {
		if _, err := io.ReadFull(s.conn, h[:]); err != nil {
			return err
		}
		if h[0] != Version {
			return ErrVersion
		}
		if h[3] != 0 {
			return protoErr("reserved header byte %#x", h[3])
		}
		id, n := h.stream(), h.length()
		switch h.typ() {
		case typeData:
			if err := s.handleData(h.flags(), id, n); err != nil {
				return err
			}
		case typeWindow:
			if h.flags() != 0 {
				return protoErr("flags %#x on a window frame", h.flags())
			}
			// Stream 0 and ids never opened are refused by lookup.
			if st, err := s.lookup(id); err != nil {
				return err
			} else if st != nil {
				if err := st.addCredit(n); err != nil {
					return err
				}
			}
		case typePing:
			if h.flags()&^flagACK != 0 {
				return protoErr("flags %#x on a ping", h.flags())
			}
			if id != 0 {
				return protoErr("ping on stream %d", id)
			}
			if h.flags()&flagACK != 0 {
				s.pong(n)
			} else if err := s.queueCtrl(ctrlFrame{typ: typePing, flags: flagACK, length: n}); err != nil {
				return err
			}
		case typeGoAway:
			switch {
			case h.flags() != 0:
				return protoErr("flags %#x on a go-away", h.flags())
			case id != 0:
				return protoErr("go-away on stream %d", id)
			case n == goAwayProtocol:
				return ErrPeerProtocol
			case n != goAwayNormal:
				return protoErr("unknown go-away code %d", n)
			}
			s.remoteGoAway.Store(true)
		default:
			return protoErr("unknown frame type %d", h.typ())
		}
	}
}

// lookup finds an open stream. It returns nil without error for a stream
// that existed and has since been forgotten (frames in flight when it was
// reset or closed are discarded), and an error for an id never opened.
// Ids are opened in turn without gaps (SPEC.md section 2.1), so every id
// of a side's parity up to the last it opened was opened.
func (s *Session) lookup(id uint32) (*Stream, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.streams[id]; st != nil {
		return st, nil
	}
	ours := id%2 == 1 == s.client
	if id == 0 || ours && id >= s.nextID || !ours && id > s.lastPeerID {
		return nil, protoErr("frame for stream %d, never opened", id)
	}
	return nil, nil
}

func (s *Session) handleData(flags byte, id, n uint32) error {
	// Checked before a SYN registers anything, so a bad frame opens no
	// stream on its way to ending the session.
	if flags&^(flagSYN|flagFIN|flagRST) != 0 {
		return protoErr("flags %#x on a data frame", flags)
	}
	if flags&flagRST != 0 && (n != 0 || flags != flagRST) {
		return protoErr("reset with a body or other flags on stream %d", id)
	}
	var st *Stream
	var err error
	if flags&flagSYN != 0 {
		st, err = s.incoming(id)
	} else {
		st, err = s.lookup(id)
	}
	if err != nil {
		return err
	}
	if flags&flagRST != 0 {
		if st != nil {
			st.resetByPeer()
		}
		return nil
	}
	// After its FIN the peer sends only RST on the stream: data, even an
	// empty frame or a second FIN, is a protocol error while the stream
	// lives (once it has ended, nothing of it is remembered and its
	// frames are discarded; SPEC.md section 2.1).
	if st != nil && st.finishedByPeer() {
		return protoErr("data after FIN on stream %d", id)
	}
	if n > 0 && st != nil && st.inbound && !s.admitQueued(st, n) {
		// Not accepted yet, and the backlog's bytes are spent: the
		// stream is reset and its data dropped, as for a full backlog.
		st.refuse()
		if err := s.queueCtrl(ctrlFrame{typ: typeData, flags: flagRST, id: id}); err != nil {
			return err
		}
		st = nil
	}
	if n > 0 {
		if st == nil {
			// Discarded as it arrives: a peer sending to a dead stream
			// costs us reading time, no memory.
			if _, err := io.CopyN(io.Discard, s.conn, int64(n)); err != nil {
				return err
			}
		} else if err := st.receive(s.conn, n); err != nil {
			return err
		}
	}
	if flags&flagFIN != 0 && st != nil {
		st.finByPeer()
	}
	return nil
}

// incoming registers a stream the peer opened; nil without error when it
// is refused (reset).
func (s *Session) incoming(id uint32) (*Stream, error) {
	s.mu.Lock()
	// The peer's ids go 1, 3, 5, ... (a client's) or 2, 4, 6, ... (a
	// server's), each SYN the next: any other id is a protocol error.
	// (In 64 bits, so the last id does not wrap round to a first.)
	next := uint64(s.lastPeerID) + 2
	if s.lastPeerID == 0 {
		next = 2
		if !s.client {
			next = 1
		}
	}
	if uint64(id) != next {
		s.mu.Unlock()
		return nil, protoErr("SYN for stream %d, want %d: ids are opened in turn by parity", id, next)
	}
	s.lastPeerID = id
	// A full backlog refuses before the stream is registered, so a flood
	// never holds more than the backlog, not even for an instant. This
	// loop is accept's only sender: room seen here is still there at the
	// send below.
	if s.goAwaySent || s.inbound >= s.cfg.MaxStreams || len(s.accept) >= cap(s.accept) {
		s.mu.Unlock()
		return nil, s.queueCtrl(ctrlFrame{typ: typeData, flags: flagRST, id: id})
	}
	st := newStream(s, id)
	st.inbound = true
	st.queued = true
	s.streams[id] = st
	s.inbound++
	s.mu.Unlock()
	select {
	case s.accept <- st:
		return st, nil
	default:
		s.forget(st)
		return nil, s.queueCtrl(ctrlFrame{typ: typeData, flags: flagRST, id: id})
	}
}
