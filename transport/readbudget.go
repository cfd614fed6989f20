package transport

// Read budgets: what bounds the memory of messages being read.
//
// A frame limit bounds one message, but a reader holds its partly read
// message for as long as the peer takes to finish it, and the peer
// chooses how many such readers it keeps going: every control stream of
// every connection. Nothing in the frame limit bounds that product (64
// streams × 64 MiB × 1,024 connections), and flow control does not
// either: the application reads the stream into the message buffer, so
// the window keeps reopening.
//
// So a reader with a ReadBudget reserves a frame's bytes past
// FreeFrameBytes from it as its buffer grows, before allocating them, and
// releases them once the frame is decoded or dropped. Budgets nest: a
// reservation is taken from a budget and from every budget above it
// (stream readers of one connection share the connection's, connections
// share the process's), all or none. A reservation that does not fit
// fails at once, never waits: the reader drops the frame, and what it had
// of it, and reports a *ReadBudgetError (kind protocol.KindExhausted,
// errors.Is ErrReadBudgetExhausted); the stream stays in sync, so the
// peer can try again later.
//
// The first FreeFrameBytes of every frame take nothing from any budget:
// the small messages that make up nearly all traffic (every RPC but
// whole-file writes and bulk blocks) are always read, whatever a flood of
// large ones holds, so a client is served while another exhausts the
// budgets. What that leaves unbudgeted is FreeFrameBytes per reading
// stream, a quarter of what the multiplexer may already buffer per stream
// (its 256 KiB initial window).

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/outpost-exec/outpost/protocol"
)

// FreeFrameBytes is how much of every frame a reader holds without
// reserving from its ReadBudget.
const FreeFrameBytes = 64 << 10

// Defaults for the budgets of servers that read messages from peers.
const (
	// DefaultConnectionReadBytes bounds one connection's partly read
	// messages, all its streams together: 64 MiB, one message of the
	// largest size (protocol.MaxMessageBytes) at a time. A client sends
	// its requests on one control stream, one after another, so it never
	// needs more; a peer that opens many streams to read large frames on
	// all of them shares this among them.
	DefaultConnectionReadBytes = protocol.MaxMessageBytes
	// DefaultProcessReadBytes bounds a whole server's partly read
	// messages: 256 MiB, four messages of the largest size at once (the
	// size of the multiplexers' shared window budget).
	DefaultProcessReadBytes = 256 << 20
)

// ErrReadBudgetExhausted is what a *ReadBudgetError is (errors.Is).
var ErrReadBudgetExhausted = errors.New("no memory left for messages being read")

// ReadBudget bounds the bytes of partly read messages held by the readers
// that reserve from it, and, through its parent, by those of other
// budgets. Its methods are safe for concurrent use; a nil *ReadBudget
// bounds nothing.
type ReadBudget struct {
	scope  string // "connection", "process": for errors
	limit  int64
	used   atomic.Int64
	parent *ReadBudget
}

// NewReadBudget returns a budget of limit bytes named scope (in errors),
// drawing on parent too when parent is not nil.
func NewReadBudget(scope string, limit int64, parent *ReadBudget) *ReadBudget {
	return &ReadBudget{scope: scope, limit: limit, parent: parent}
}

// Limit is the budget's size.
func (b *ReadBudget) Limit() int64 {
	if b == nil {
		return 0
	}
	return b.limit
}

// Used is what is reserved from the budget now.
func (b *ReadBudget) Used() int64 {
	if b == nil {
		return 0
	}
	return b.used.Load()
}

// Reserve takes n bytes from b and from every budget above it, or, when
// one of them has less than n left, takes nothing and returns a
// *ReadBudgetError naming the first that had not. n <= 0 takes nothing.
func (b *ReadBudget) Reserve(n int64) error {
	if n <= 0 {
		return nil
	}
	for at := b; at != nil; at = at.parent {
		if !at.take(n) {
			for undo := b; undo != at; undo = undo.parent {
				undo.used.Add(-n)
			}
			return &ReadBudgetError{Scope: at.scope, Limit: at.limit, Want: n}
		}
	}
	return nil
}

// Release returns n bytes Reserve took to b and every budget above it.
func (b *ReadBudget) Release(n int64) {
	if n <= 0 {
		return
	}
	for at := b; at != nil; at = at.parent {
		if at.used.Add(-n) < 0 {
			panic("transport: ReadBudget released more than was reserved")
		}
	}
}

func (b *ReadBudget) take(n int64) bool {
	for {
		used := b.used.Load()
		if used+n > b.limit || used+n < used {
			return false
		}
		if b.used.CompareAndSwap(used, used+n) {
			return true
		}
	}
}

// ReadBudgetError refuses a reservation: a frame was dropped because the
// budget named by Scope (Limit bytes) could not hold Want more bytes of
// it. It is temporary: the same message may be read once other messages
// are done. It is errors.Is ErrReadBudgetExhausted, and protocol.KindOf
// says protocol.KindExhausted.
type ReadBudgetError struct {
	Scope string
	Limit int64
	Want  int64
}

func (e *ReadBudgetError) Error() string {
	return fmt.Sprintf("%v: the %s's budget of %d bytes for messages being read is in use (by messages of other streams or connections); try again later", ErrReadBudgetExhausted, e.Scope, e.Limit)
}

// Unwrap makes the error ErrReadBudgetExhausted and, for protocol.KindOf,
// a *protocol.Error of kind exhausted.
func (e *ReadBudgetError) Unwrap() []error {
	return []error{ErrReadBudgetExhausted, protocol.KindErrorf(protocol.KindExhausted, protocol.CodeInvalidRequest, "%s", e.Error())}
}

// frameGrowth is the next capacity of a frame buffer holding have bytes
// (all of its capacity) of an n-byte frame: at most 4× what has arrived,
// so a peer that announces a large frame gets memory only in proportion
// to what it sends; and the whole frame when that is at most
// FreeFrameBytes more, so a 1 MiB block with its framing takes one step
// from 256 KiB rather than a last one for its header bytes.
func frameGrowth(have, n int) int {
	want := min(n, max(4*have, FreeFrameBytes))
	if n-want <= FreeFrameBytes {
		want = n
	}
	return want
}

// frameBuffer grows the buffer of one frame being read, reserving from a
// budget what it holds past FreeFrameBytes. The zero value (no budget)
// grows the same way without reserving.
type frameBuffer struct {
	budget *ReadBudget
	held   int64 // reserved from budget for b
	b      []byte
}

// grow makes room for at least need bytes of a frame of at most n
// (need <= n), keeping b's contents; it fails, reserving nothing more,
// when the budget cannot hold the larger buffer.
func (f *frameBuffer) grow(need, n int) error {
	if need <= cap(f.b) {
		return nil
	}
	want := max(need, frameGrowth(len(f.b), n))
	more := int64(max(0, want-FreeFrameBytes)) - f.held
	if err := f.budget.Reserve(more); err != nil {
		return err
	}
	f.held += max(0, more)
	nb := make([]byte, len(f.b), want)
	copy(nb, f.b)
	f.b = nb
	return nil
}

// release returns the reservation; the caller drops or hands on b.
func (f *frameBuffer) release() {
	f.budget.Release(f.held)
	f.held = 0
}

// drop releases the reservation and the buffer.
func (f *frameBuffer) drop() {
	f.release()
	f.b = nil
}
