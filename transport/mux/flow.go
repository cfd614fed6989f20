package mux

import (
	"sync/atomic"
	"time"
)

// Receive-window tuning (SPEC.md section 4).
//
// A stream's window W is the most the peer may have sent beyond what the
// application has read, so it is also the most the stream buffers. The
// receiver refreshes it (a window frame) once W/updateDivisor has been
// read, so between W·(1-1/updateDivisor) and W is in flight: with a
// divisor of 4, at least 3/4 (yamux refreshed at 1/2: half to 3/4).
//
// The window grows in epochs, in the manner of QUIC stacks: an epoch
// starts at a refresh and is judged at the first refresh after at least
// W/2 has been read in it. If reading that much took less than
// growWithin round trips' worth of the window (elapsed < growWithin·RTT·
// read/W), the application could have drained a window in under
// growWithin round trips, so the window, not the reader, was the limit:
// W doubles, up to the stream's cap and what the budgets allow. A reader
// slower than W/(growWithin·RTT) never grows its window. At steady state
// W ends between growWithin and 2·growWithin times the bandwidth-delay
// product, enough for data queued in the sender's socket buffer as well.
const (
	updateDivisor = 4
	growWithin    = 2

	// rttFloor is the least round trip the tuner assumes: on a loaded
	// host, a reader goroutine descheduled for a millisecond or two is
	// as much a round trip as the wire's, even over loopback.
	rttFloor = 2 * time.Millisecond

	// rttMaxAge: a stream that is judging its window asks for a fresh
	// sample (a ping) when the last is older than this, so the estimate
	// follows queueing that builds up during a transfer.
	rttMaxAge = time.Second
)

// Budget bounds how far stream windows may grow beyond InitialWindow,
// together. A session has one of its own (Config.SessionBudget) and may
// share another with every session in the process (Config.Shared). It is
// safe for concurrent use.
type Budget struct {
	limit int64
	used  atomic.Int64
}

// NewBudget returns a budget of limit bytes.
func NewBudget(limit int64) *Budget { return &Budget{limit: limit} }

// Used reports the bytes currently reserved.
func (b *Budget) Used() int64 { return b.used.Load() }

// take reserves up to n bytes and returns how many it got.
func (b *Budget) take(n int64) int64 {
	for {
		used := b.used.Load()
		got := min(n, b.limit-used)
		if got <= 0 {
			return 0
		}
		if b.used.CompareAndSwap(used, used+got) {
			return got
		}
	}
}

func (b *Budget) release(n int64) {
	if n > 0 {
		b.used.Add(-n)
	}
}

// tuner is one stream's receive-side flow control; the stream's mutex
// guards it.
type tuner struct {
	window    uint64 // current window W
	max       uint64 // its cap
	limit     uint64 // the peer may send up to this offset
	received  uint64 // bytes received
	consumed  uint64 // bytes read by the application
	reserved  int64  // W - InitialWindow, taken from the budgets
	epochAt   time.Time
	epochRead uint64
}

func newTuner(max uint32) tuner {
	return tuner{window: InitialWindow, max: uint64(max), limit: InitialWindow}
}

// grantNeeded reports whether enough has been read since the last window
// frame to send one; cheap, so Read can call it on every call.
func (t *tuner) grantNeeded() bool {
	return t.consumed+t.window-t.limit >= t.window/updateDivisor
}

// judge runs the epoch test at a refresh: grow reports how many bytes the
// window should grow by (0: keep it), and stale whether the RTT sample is
// too old to trust much longer.
func (t *tuner) judge(now time.Time, rtt time.Duration) (grow uint64) {
	if t.epochAt.IsZero() {
		t.epochAt, t.epochRead = now, t.consumed
		return 0
	}
	read := t.consumed - t.epochRead
	if read < t.window/2 {
		return 0
	}
	elapsed := now.Sub(t.epochAt)
	t.epochAt, t.epochRead = now, t.consumed
	if t.window >= t.max {
		return 0
	}
	rtt = max(rtt, rttFloor)
	if float64(elapsed) < growWithin*float64(rtt)*float64(read)/float64(t.window) {
		return min(t.window, t.max-t.window)
	}
	return 0
}

// grant moves the limit to consumed + window and returns the credit that
// adds (0 when below the refresh threshold).
func (t *tuner) grant() uint32 {
	if !t.grantNeeded() {
		return 0
	}
	d := t.consumed + t.window - t.limit
	t.limit += d
	return uint32(d)
}
