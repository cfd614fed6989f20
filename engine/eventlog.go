package engine

import (
	"bytes"
	"context"
	"errors"
	"sort"
	"sync"
	"time"

	"github.com/outpost-exec/outpost/protocol"
)

// EventKind tells the three kinds of process event apart; Event is one
// sequenced process event. Both are the protocol's neutral forms, which
// protocol maps to notifications and process/read results.
type (
	EventKind = protocol.EventKind
	Event     = protocol.Event
)

const (
	EventOutput = protocol.EventOutput
	EventExited = protocol.EventExited
	EventClosed = protocol.EventClosed
)

// Retention bounds what a process keeps of its output for process/read and
// for replay. The exit and close events are always kept.
type Retention struct {
	MaxBytes  int64 // default 8 MiB
	MaxChunks int   // default 100,000
}

// DefaultRetention is the retention of a process unless configured.
func DefaultRetention() Retention {
	return Retention{MaxBytes: 8 << 20, MaxChunks: 100_000}
}

// MaxChunkBytes is the largest output chunk a process logs: one pipe read.
const MaxChunkBytes = 64 << 10

// Validate reports a retention too small to hold one chunk.
func (r Retention) Validate() error {
	if r.MaxBytes < MaxChunkBytes {
		return errors.New("retention MaxBytes must be at least 64 KiB (one chunk)")
	}
	if r.MaxChunks < 1 {
		return errors.New("retention MaxChunks must be at least 1")
	}
	return nil
}

// ErrLogAborted is returned by Append once the log has been aborted.
var ErrLogAborted = errors.New("process event log aborted")

// EventLog is a process's sequenced history: output chunks in a bounded
// retention buffer, plus its exit and close events (never evicted). One
// counter, starting at 1, numbers all three kinds of event.
//
// Readers either poll (Read, the process/read long poll) or subscribe
// (Subscribe, replay then live). A holding subscription — the push lane of
// the connection attached to the session — makes Append wait rather than
// evict a chunk the subscriber has not consumed yet: a client that stops
// reading slows its own processes instead of losing their output. Without a
// holding subscriber, the oldest chunks are evicted and readers asking for
// them are told of the gap.
type EventLog struct {
	mu    sync.Mutex
	space *sync.Cond // signalled when held chunks are consumed or holds go away

	limits  Retention
	nextSeq uint64

	chunks []Event // output events, oldest first, from index head
	head   int
	bytes  int64

	evictedThrough uint64 // highest evicted seq, 0 if none
	evictedChunks  uint64
	evictedBytes   uint64

	exit   *Event
	closed *Event

	openStreams int
	aborted     bool

	changed     chan struct{} // closed and replaced when an event is logged
	changedSeen bool

	subs map[*Subscription]struct{}

	closedCh chan struct{}
}

// NewEventLog returns an empty log whose process has openStreams output
// streams (2 for pipes, 1 for a PTY); the close event is logged once the
// exit is known and every stream has ended.
func NewEventLog(limits Retention, openStreams int) *EventLog {
	l := &EventLog{
		limits:      limits,
		nextSeq:     1,
		openStreams: openStreams,
		changed:     make(chan struct{}),
		subs:        make(map[*Subscription]struct{}),
		closedCh:    make(chan struct{}),
	}
	l.space = sync.NewCond(&l.mu)
	return l
}

// Append logs one output chunk and returns its seq. It may wait for a
// holding subscriber to consume older chunks; it returns ErrLogAborted once
// Abort has been called.
func (l *EventLog) Append(stream protocol.Stream, data []byte) (uint64, error) {
	l.mu.Lock()
	for {
		if l.aborted {
			l.mu.Unlock()
			return 0, ErrLogAborted
		}
		if !l.overLimitLocked(len(data)) {
			break
		}
		oldest := l.chunks[l.head].Seq
		if l.heldBeforeLocked(oldest) {
			l.space.Wait()
			continue
		}
		l.evictOldestLocked()
	}
	seq := l.nextSeq
	l.nextSeq++
	l.chunks = append(l.chunks, Event{Kind: EventOutput, Seq: seq, Stream: stream, Data: data})
	l.bytes += int64(len(data))
	notify := l.publishLocked()
	l.mu.Unlock()
	runAll(notify)
	return seq, nil
}

func (l *EventLog) overLimitLocked(add int) bool {
	n := len(l.chunks) - l.head
	if n == 0 {
		return false
	}
	return l.bytes+int64(add) > l.limits.MaxBytes || n+1 > l.limits.MaxChunks
}

// heldBeforeLocked reports whether a holding subscriber has not consumed seq.
func (l *EventLog) heldBeforeLocked(seq uint64) bool {
	for s := range l.subs {
		if s.hold && s.cursor < seq {
			return true
		}
	}
	return false
}

func (l *EventLog) evictOldestLocked() {
	ev := l.chunks[l.head]
	l.chunks[l.head] = Event{}
	l.head++
	l.bytes -= int64(len(ev.Data))
	l.evictedThrough = ev.Seq
	l.evictedChunks++
	l.evictedBytes += uint64(len(ev.Data))
	if l.head > 1024 && l.head > len(l.chunks)/2 {
		n := copy(l.chunks, l.chunks[l.head:])
		clear(l.chunks[n:])
		l.chunks = l.chunks[:n]
		l.head = 0
	}
}

// StreamEOF records that one output stream reached EOF.
func (l *EventLog) StreamEOF() {
	l.mu.Lock()
	if l.openStreams > 0 {
		l.openStreams--
	}
	notify := l.maybeCloseLocked()
	l.mu.Unlock()
	runAll(notify)
}

// Exit logs the exit event. Only the first call counts.
func (l *EventLog) Exit(code int32, sandboxDenied bool) { l.ExitBySignal(code, 0, sandboxDenied) }

// ExitBySignal logs the exit event of a process signal killed (signal 0:
// it exited). Only the first exit counts.
func (l *EventLog) ExitBySignal(code, signal int32, sandboxDenied bool) {
	l.ExitWithLimit(code, signal, sandboxDenied, "")
}

// ExitWithLimit is ExitBySignal for a command that ran into one of the
// executor's resource limits (protocol.LimitMemory or LimitPids).
func (l *EventLog) ExitWithLimit(code, signal int32, sandboxDenied bool, limit string) {
	l.mu.Lock()
	if l.exit != nil {
		l.mu.Unlock()
		return
	}
	l.exit = &Event{Kind: EventExited, Seq: l.nextSeq, ExitCode: code, Signal: signal, SandboxDenied: sandboxDenied, Limit: limit}
	l.nextSeq++
	notify := l.publishLocked()
	notify = append(notify, l.maybeCloseLocked()...)
	l.mu.Unlock()
	runAll(notify)
}

func (l *EventLog) maybeCloseLocked() []func() {
	if l.exit == nil || l.openStreams > 0 || l.closed != nil {
		return nil
	}
	l.closed = &Event{Kind: EventClosed, Seq: l.nextSeq}
	l.nextSeq++
	close(l.closedCh)
	return l.publishLocked()
}

// Abort makes pending and future Appends fail, releasing a producer that
// waits on a subscriber that will never read again.
func (l *EventLog) Abort() {
	l.mu.Lock()
	l.aborted = true
	l.space.Broadcast()
	l.mu.Unlock()
}

// publishLocked wakes long polls and returns the subscribers' callbacks,
// which the caller runs after unlocking.
func (l *EventLog) publishLocked() []func() {
	if l.changedSeen {
		close(l.changed)
		l.changed = make(chan struct{})
		l.changedSeen = false
	}
	var notify []func()
	for s := range l.subs {
		select {
		case s.ready <- struct{}{}:
		default:
		}
		if s.notify != nil {
			notify = append(notify, s.notify)
		}
	}
	return notify
}

func runAll(fs []func()) {
	for _, f := range fs {
		f()
	}
}

// Closed is closed once the close event is logged.
func (l *EventLog) Closed() <-chan struct{} { return l.closedCh }

// RetainedLines yields the retained output line by line (lines split
// across chunks are joined), for classifying a sandbox denial.
func (l *EventLog) RetainedLines(yield func(line string) bool) {
	l.mu.Lock()
	var all []byte
	for _, c := range l.chunks[l.head:] {
		all = append(all, c.Data...)
	}
	l.mu.Unlock()
	for _, line := range bytes.Split(all, []byte{'\n'}) {
		if !yield(string(line)) {
			return
		}
	}
}

// Snapshot is the log's state at one instant.
type Snapshot struct {
	NextSeq       uint64
	Exited        bool
	ExitCode      int32
	Signal        int32
	SandboxDenied bool
	Limit         string
	Closed        bool
	// EvictedChunks and EvictedBytes count output dropped from retention
	// before any reader took it.
	EvictedChunks uint64
	EvictedBytes  uint64
}

// Subscribers counts open subscriptions: pushed event streams that have
// not yet delivered the close event (a lane ends its subscription then).
func (l *EventLog) Subscribers() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.subs)
}

// Snapshot returns the current state.
func (l *EventLog) Snapshot() Snapshot {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.snapshotLocked()
}

func (l *EventLog) snapshotLocked() Snapshot {
	s := Snapshot{NextSeq: l.nextSeq, Closed: l.closed != nil, EvictedChunks: l.evictedChunks, EvictedBytes: l.evictedBytes}
	if l.exit != nil {
		s.Exited, s.ExitCode, s.Signal, s.SandboxDenied, s.Limit = true, l.exit.ExitCode, l.exit.Signal, l.exit.SandboxDenied, l.exit.Limit
	}
	return s
}

// firstChunkAfterLocked returns the index in chunks of the first retained
// chunk with seq > after.
func (l *EventLog) firstChunkAfterLocked(after uint64) int {
	live := l.chunks[l.head:]
	return l.head + sort.Search(len(live), func(i int) bool { return live[i].Seq > after })
}

func (l *EventLog) gapLocked(after uint64) *protocol.Gap {
	if after < l.evictedThrough {
		return &protocol.Gap{FromSeq: after + 1, ToSeq: l.evictedThrough}
	}
	return nil
}

// ReadRequest is a process/read long poll.
type ReadRequest struct {
	AfterSeq uint64
	MaxBytes int64 // < 0: no limit
	Wait     time.Duration
	// Cancel, when non-nil, ends a waiting read early with ErrReadCancelled
	// (the session was resumed by another connection).
	Cancel <-chan struct{}
}

// ErrReadCancelled ends a long poll whose session moved to another connection.
var ErrReadCancelled = errors.New("session has been resumed by another connection")

// Read answers a process/read: the retained chunks after AfterSeq within
// the byte budget (the first chunk always fits), waiting up to Wait for
// something the caller has not seen.
func (l *EventLog) Read(ctx context.Context, req ReadRequest) (protocol.ReadResult, error) {
	var deadline <-chan time.Time
	if req.Wait > 0 {
		t := time.NewTimer(req.Wait)
		defer t.Stop()
		deadline = t.C
	}
	for {
		l.mu.Lock()
		res, ready := l.readLocked(req)
		if ready || req.Wait <= 0 {
			l.mu.Unlock()
			return res, nil
		}
		changed := l.changed
		l.changedSeen = true
		l.mu.Unlock()
		select {
		case <-changed:
		case <-deadline:
			req.Wait = 0
		case <-req.Cancel:
			return protocol.ReadResult{}, ErrReadCancelled
		case <-ctx.Done():
			return protocol.ReadResult{}, ctx.Err()
		}
	}
}

func (l *EventLog) readLocked(req ReadRequest) (protocol.ReadResult, bool) {
	res := protocol.ReadResult{Chunks: []protocol.OutputChunk{}}
	var total int64
	for i := l.firstChunkAfterLocked(req.AfterSeq); i < len(l.chunks); i++ {
		c := &l.chunks[i]
		size := int64(len(c.Data))
		if req.MaxBytes >= 0 && len(res.Chunks) > 0 && total+size > req.MaxBytes {
			break
		}
		res.AddOutput(c)
		total += size
		if req.MaxBytes >= 0 && total >= req.MaxBytes {
			break
		}
	}
	res.Gap = l.gapLocked(req.AfterSeq)
	snap := l.snapshotLocked()
	if req.MaxBytes >= 0 && len(res.Chunks) > 0 {
		res.NextSeq = res.Chunks[len(res.Chunks)-1].Seq + 1
	} else {
		res.NextSeq = snap.NextSeq
	}
	if l.exit != nil {
		res.SetExit(l.exit)
	}
	if l.closed != nil {
		res.SetClosed(l.closed)
	}
	ready := len(res.Chunks) > 0 || snap.Closed || res.Gap != nil ||
		(snap.Exited && req.AfterSeq < snap.NextSeq-1)
	return res, ready
}

// Subscription delivers a process's events in seq order: first what is
// retained after the starting seq, then live events.
type Subscription struct {
	log    *EventLog
	cursor uint64 // last seq delivered
	hold   bool
	ready  chan struct{}
	notify func()
}

// Subscribe starts a subscription after seq afterSeq. A holding
// subscription makes producers wait rather than evict what it has not yet
// consumed (see EventLog). notify, if non-nil, is called (without locks
// held, and must not block) whenever new events may be available.
func (l *EventLog) Subscribe(afterSeq uint64, hold bool, notify func()) *Subscription {
	s := &Subscription{log: l, cursor: afterSeq, hold: hold, ready: make(chan struct{}, 1), notify: notify}
	s.ready <- struct{}{}
	l.mu.Lock()
	l.subs[s] = struct{}{}
	l.mu.Unlock()
	return s
}

// SubscribeNow starts a subscription at the current end of the log: it
// delivers only events logged from now on.
func (l *EventLog) SubscribeNow(hold bool, notify func()) *Subscription {
	l.mu.Lock()
	after := l.nextSeq - 1
	l.mu.Unlock()
	return l.Subscribe(after, hold, notify)
}

// Ready receives a value whenever new events may be available.
func (s *Subscription) Ready() <-chan struct{} { return s.ready }

// Next returns up to maxEvents events (and about maxBytes of output; the
// first event always fits) after the cursor and advances it. gap is set
// when output after the cursor was evicted before it could be delivered.
// done is true once the close event has been delivered.
func (s *Subscription) Next(maxEvents int, maxBytes int64) (events []Event, gap *protocol.Gap, done bool) {
	l := s.log
	l.mu.Lock()
	defer l.mu.Unlock()
	gap = l.gapLocked(s.cursor)
	if gap != nil {
		s.cursor = gap.ToSeq
	}
	var total int64
	i := l.firstChunkAfterLocked(s.cursor)
	for len(events) < maxEvents {
		next := s.cursor + 1
		var ev Event
		switch {
		case i < len(l.chunks) && l.chunks[i].Seq == next:
			ev = l.chunks[i]
			i++
		case l.exit != nil && l.exit.Seq == next:
			ev = *l.exit
		case l.closed != nil && l.closed.Seq == next:
			ev = *l.closed
		case i < len(l.chunks) && l.chunks[i].Seq > next:
			// Not reachable: only evicted chunks leave holes, and the gap
			// check above skipped them. Skip defensively.
			s.cursor = l.chunks[i].Seq - 1
			continue
		default:
			goto out
		}
		if len(events) > 0 && total+int64(len(ev.Data)) > maxBytes {
			break
		}
		events = append(events, ev)
		total += int64(len(ev.Data))
		s.cursor = ev.Seq
		if total >= maxBytes {
			break
		}
	}
out:
	if s.hold && len(events) > 0 {
		l.space.Broadcast()
	}
	done = l.closed != nil && s.cursor >= l.closed.Seq
	return events, gap, done
}

// Close ends the subscription and releases its hold.
func (s *Subscription) Close() {
	l := s.log
	l.mu.Lock()
	delete(l.subs, s)
	if s.hold {
		l.space.Broadcast()
	}
	l.mu.Unlock()
}
