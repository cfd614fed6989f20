package mux

import (
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// chunkSize is the unit of a stream's receive buffer: frame bodies are
// read straight into pooled chunks of this size (one Noise record's
// plaintext fits, so it decrypts in place), appended to the last chunk
// while it has room. Every chunk but the first and last is full, so a
// stream holds at most its window + 2 × chunkSize.
const chunkSize = 64 << 10

// smallChunk is the size of a stream's first chunk when its first frame
// fits: a stream that carries a request or two, or waits in the accept
// backlog with its first message, holds 4 KiB rather than 64.
const smallChunk = 4 << 10

var chunkPool = sync.Pool{New: func() any { b := make([]byte, chunkSize); return &b }}

type chunk struct {
	b    *[]byte // chunkSize bytes from chunkPool, or a first chunk of smallChunk
	r, w int     // unread bytes are (*b)[r:w]; the receive loop fills (*b)[w:]
}

func (c *chunk) full() bool { return c.w == len(*c.b) }

// newChunk is the next chunk of a stream that has received received
// bytes, for a frame with n bytes still to come.
func newChunk(received uint64, n uint32) *chunk {
	if received == 0 && n <= smallChunk {
		b := make([]byte, smallChunk)
		return &chunk{b: &b}
	}
	return &chunk{b: chunkPool.Get().(*[]byte)}
}

// chunkCost is what receiving an n-byte frame will allocate (st.mu held).
func (st *Stream) chunkCost(n uint32) int64 {
	free := 0
	if k := len(st.chunks); k > 0 {
		c := st.chunks[k-1]
		free = len(*c.b) - c.w
	}
	if int(n) <= free {
		return 0
	}
	rest := int64(int(n) - free)
	if len(st.chunks) == 0 && st.rx.received == 0 && rest <= smallChunk {
		return smallChunk
	}
	return (rest + chunkSize - 1) / chunkSize * chunkSize
}

// Stream is one bidirectional byte stream, a net.Conn. Close half-closes
// it: no more writes, while reads go on until the peer closes its side.
type Stream struct {
	sess    *Session
	id      uint32
	inbound bool
	// queued: in the accept backlog, charged queuedCharge bytes of it;
	// refused: reset there for want of its bytes (AcceptStream skips it).
	// The session's mu guards the three.
	queued       bool
	refused      bool
	queuedCharge int64

	wmu    sync.Mutex // one Write at a time, so a Write's frames stay in order
	sendMu sync.Mutex // one frame of this stream at a time; guards finSent
	// finSent: the FIN is on the wire, so no data frame may follow it.
	finSent bool

	mu        sync.Mutex
	rx        tuner
	chunks    []*chunk
	credit    uint64 // bytes we may still send
	localFIN  bool   // Close called
	remoteFIN bool
	reset     bool
	gone      bool // forgotten by the session
	rdl, wdl  time.Time

	readWake  chan struct{} // capacity 1: data, FIN, reset, deadline change
	writeWake chan struct{} // capacity 1: credit, close, reset, deadline change
}

func newStream(s *Session, id uint32) *Stream {
	return &Stream{
		sess:      s,
		id:        id,
		rx:        newTuner(s.cfg.MaxStreamWindow),
		credit:    InitialWindow,
		readWake:  make(chan struct{}, 1),
		writeWake: make(chan struct{}, 1),
	}
}

// StreamID returns the stream's id.
func (st *Stream) StreamID() uint32 { return st.id }

func notify(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func (st *Stream) wake() {
	notify(st.readWake)
	notify(st.writeWake)
}

func (st *Stream) buffered() uint64 { return st.rx.received - st.rx.consumed }

// Read reads what the peer sent; io.EOF once it closed its side and all
// is read.
func (st *Stream) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		st.mu.Lock()
		if st.buffered() > 0 {
			n := st.copyOut(p)
			st.rx.consumed += uint64(n)
			var credit uint32
			ping := false
			if st.rx.grantNeeded() && !st.gone {
				ping = st.tune()
				credit = st.rx.grant()
			}
			st.mu.Unlock()
			if ping {
				st.sess.pingAsync()
			}
			if credit > 0 {
				// An error here is the session's, and the next call
				// reports it.
				st.sess.writeHeader(typeWindow, 0, st.id, credit)
			}
			return n, nil
		}
		err := st.readErr()
		dl := st.rdl
		st.mu.Unlock()
		if err != nil {
			return 0, err
		}
		if !st.wait(st.readWake, dl) {
			continue
		}
	}
}

// readErr is why a Read with nothing buffered returns, or nil to wait.
func (st *Stream) readErr() error {
	switch {
	case st.reset:
		return ErrStreamReset
	case st.remoteFIN:
		return io.EOF
	case st.sess.IsClosed():
		return ErrSessionShutdown
	case !st.rdl.IsZero() && !time.Now().Before(st.rdl):
		return os.ErrDeadlineExceeded
	}
	return nil
}

// wait blocks until woken, the deadline passes or the session ends; it
// always returns false (the caller re-checks its state).
func (st *Stream) wait(wake chan struct{}, dl time.Time) bool {
	var timeout <-chan time.Time
	if !dl.IsZero() {
		t := time.NewTimer(time.Until(dl))
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-wake:
	case <-timeout:
	case <-st.sess.closed:
	}
	return false
}

// tune judges the window at a refresh (see flow.go) and grows it from the
// budgets; it reports whether the RTT sample should be refreshed.
func (st *Stream) tune() (ping bool) {
	if st.rx.window >= st.rx.max {
		return false
	}
	now := time.Now()
	grow := st.rx.judge(now, st.sess.RTT())
	if grow > 0 {
		got := st.sess.reserve(int64(grow))
		st.rx.window += uint64(got)
		st.rx.reserved += got
	}
	return !st.sess.rttFresh(now)
}

// copyOut moves buffered bytes to p, returning full chunks to the pool.
// The last chunk is kept even when drained unless it is full: the
// receive loop may be filling its free part.
func (st *Stream) copyOut(p []byte) int {
	n := 0
	for n < len(p) && len(st.chunks) > 0 {
		c := st.chunks[0]
		k := copy(p[n:], (*c.b)[c.r:c.w])
		c.r += k
		n += k
		if c.r < c.w || !c.full() {
			break
		}
		st.chunks[0] = nil
		st.chunks = st.chunks[1:]
		if len(*c.b) == chunkSize {
			chunkPool.Put(c.b)
		}
	}
	return n
}

// receive reads a data frame's n-byte body from r into the stream.
func (st *Stream) receive(r io.Reader, n uint32) error {
	st.mu.Lock()
	if st.remoteFIN {
		st.mu.Unlock()
		return protoErr("data after FIN on stream %d", st.id)
	}
	if st.rx.received+uint64(n) > st.rx.limit {
		st.mu.Unlock()
		return protoErr("stream %d: %d bytes beyond its window", st.id, st.rx.received+uint64(n)-st.rx.limit)
	}
	st.mu.Unlock()
	for n > 0 {
		st.mu.Lock()
		if len(st.chunks) == 0 || st.chunks[len(st.chunks)-1].full() {
			st.chunks = append(st.chunks, newChunk(st.rx.received, n))
		}
		c := st.chunks[len(st.chunks)-1]
		free := (*c.b)[c.w:min(len(*c.b), c.w+int(n))]
		st.mu.Unlock()
		// The reader only touches (*c.b)[c.r:c.w] and frees only full
		// chunks, so free is ours until committed below.
		k, err := r.Read(free)
		if k > 0 {
			st.mu.Lock()
			c.w += k
			st.rx.received += uint64(k)
			st.mu.Unlock()
			notify(st.readWake)
			n -= uint32(k)
		}
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

func (st *Stream) addCredit(n uint32) error {
	st.mu.Lock()
	st.credit += uint64(n)
	over := st.credit > 1<<32
	st.mu.Unlock()
	if over {
		return protoErr("stream %d: window over 4 GiB", st.id)
	}
	notify(st.writeWake)
	return nil
}

// finishedByPeer reports whether the peer's FIN has arrived.
func (st *Stream) finishedByPeer() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.remoteFIN
}

func (st *Stream) finByPeer() {
	st.mu.Lock()
	st.remoteFIN = true
	done := st.localFIN
	st.mu.Unlock()
	notify(st.readWake)
	if done {
		st.sess.forget(st)
	}
}

func (st *Stream) resetByPeer() {
	st.mu.Lock()
	st.reset = true
	st.mu.Unlock()
	st.wake()
	st.sess.forget(st)
}

// refuse resets a stream that waited in the accept backlog when its
// bytes were spent: its data is dropped and nothing more is sent on it
// but the RST the caller queues.
func (st *Stream) refuse() {
	st.mu.Lock()
	st.reset = true
	st.localFIN = true
	st.chunks = nil
	st.mu.Unlock()
	st.sendMu.Lock()
	st.finSent = true
	st.sendMu.Unlock()
	st.wake()
	st.sess.forget(st)
}

// Write sends p, waiting for window credit as needed.
func (st *Stream) Write(p []byte) (int, error) {
	st.wmu.Lock()
	defer st.wmu.Unlock()
	total := 0
	for len(p) > 0 {
		st.mu.Lock()
		var err error
		for {
			err = st.writeErr()
			if err != nil || st.credit > 0 {
				break
			}
			dl := st.wdl
			st.mu.Unlock()
			st.wait(st.writeWake, dl)
			st.mu.Lock()
		}
		if err != nil {
			st.mu.Unlock()
			return total, err
		}
		k := min(uint64(len(p)), st.credit, MaxDataFrame)
		st.credit -= k
		st.mu.Unlock()
		st.sendMu.Lock()
		if st.finSent {
			st.sendMu.Unlock()
			return total, ErrStreamClosed
		}
		err = st.sess.writeFrame(typeData, 0, st.id, uint32(k), p[:k])
		st.sendMu.Unlock()
		if err != nil {
			return total, err
		}
		total += int(k)
		p = p[k:]
	}
	return total, nil
}

func (st *Stream) writeErr() error {
	switch {
	case st.reset:
		return ErrStreamReset
	case st.localFIN:
		return ErrStreamClosed
	case st.sess.IsClosed():
		return ErrSessionShutdown
	case !st.wdl.IsZero() && !time.Now().Before(st.wdl):
		return os.ErrDeadlineExceeded
	}
	return nil
}

// sendFlags sends a body-less data frame (SYN, FIN, RST) for the stream.
func (st *Stream) sendFlags(flags byte) error {
	st.sendMu.Lock()
	defer st.sendMu.Unlock()
	if st.finSent {
		return nil
	}
	if flags&(flagFIN|flagRST) != 0 {
		st.finSent = true
	}
	return st.sess.writeHeader(typeData, flags, st.id, 0)
}

// Close half-closes the stream: the peer reads EOF after what was
// written; reads here go on until the peer closes too. Writes waiting for
// credit fail with ErrStreamClosed.
func (st *Stream) Close() error {
	st.mu.Lock()
	if st.localFIN || st.reset {
		st.mu.Unlock()
		return nil
	}
	st.localFIN = true
	done := st.remoteFIN
	st.mu.Unlock()
	notify(st.writeWake)
	err := st.sendFlags(flagFIN)
	if done {
		st.sess.forget(st)
	}
	if err == ErrSessionShutdown {
		return nil
	}
	return err
}

// Reset abandons the stream in both directions: buffered data is
// dropped, the peer's reads and writes fail with ErrStreamReset.
func (st *Stream) Reset() error {
	st.mu.Lock()
	if st.reset {
		st.mu.Unlock()
		return nil
	}
	st.reset = true
	st.localFIN = true
	st.chunks = nil // not to the pool: the receive loop may hold the last
	st.mu.Unlock()
	st.wake()
	err := st.sendFlags(flagRST)
	st.sess.forget(st)
	return err
}

// LocalAddr and RemoteAddr are the session connection's.
func (st *Stream) LocalAddr() net.Addr  { return st.sess.conn.LocalAddr() }
func (st *Stream) RemoteAddr() net.Addr { return st.sess.conn.RemoteAddr() }

// SetDeadline sets both deadlines.
func (st *Stream) SetDeadline(t time.Time) error {
	st.SetReadDeadline(t)
	return st.SetWriteDeadline(t)
}

// SetReadDeadline makes Read fail with os.ErrDeadlineExceeded from t on.
func (st *Stream) SetReadDeadline(t time.Time) error {
	st.mu.Lock()
	st.rdl = t
	st.mu.Unlock()
	notify(st.readWake)
	return nil
}

// SetWriteDeadline makes Write fail with os.ErrDeadlineExceeded from t
// on, also while waiting for credit (a frame already being written
// finishes or fails by the session's WriteTimeout).
func (st *Stream) SetWriteDeadline(t time.Time) error {
	st.mu.Lock()
	st.wdl = t
	st.mu.Unlock()
	notify(st.writeWake)
	return nil
}
