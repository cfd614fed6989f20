package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outpost-exec/outpost/protocol"
)

// EventBuffer bounds the events buffered per process for Events(). When
// it is full, the connection (or, on the native transport, that process's
// stream) stops reading, and the executor slows that process down: output
// is never dropped to make room.
const EventBuffer = 1024

// maxReorder bounds the events a process holds while a resumed
// connection's catch-up reads fill the gap before them.
const maxReorder = 4096

// EventKind tells events apart.
type EventKind string

const (
	EventOutput EventKind = "output"
	EventExited EventKind = "exited"
	EventClosed EventKind = "closed"
	// EventFailed is the last event of a process whose events can no
	// longer be delivered (the session was lost, or output the client had
	// not seen was evicted while it was disconnected). Err says why.
	EventFailed EventKind = "failed"
)

// Event is one process event, delivered in seq order exactly once.
type Event struct {
	Kind          EventKind
	Seq           uint64
	Stream        protocol.Stream
	Data          []byte
	ExitCode      int32
	Signal        int32 // EventExited: the signal that killed it, 0 if none
	SandboxDenied bool  // EventExited
	// Limit is the executor's resource limit the command ran into
	// (protocol.LimitMemory, LimitPids; "" if none). EventExited.
	Limit string
	Err   error
}

// ErrOutputLost says output was evicted on the executor before the client
// could receive it (it was disconnected for too long, or read too slowly
// while detached).
type ErrOutputLost struct {
	ProcessID      string
	FromSeq, ToSeq uint64
}

func (e *ErrOutputLost) Error() string {
	return fmt.Sprintf("process %s: output seq %d..%d was evicted on the executor before it could be received", e.ProcessID, e.FromSeq, e.ToSeq)
}

// Process is the client-side proxy of a remote process.
type Process struct {
	env    *Remote
	id     string
	events chan Event
	pid    int
	// started: the executor has answered the start. Until then there is
	// nothing to catch up on: a start still in flight when the connection
	// is replaced was sent on the new one, whose event stream carries all
	// the process's events.
	started atomic.Bool

	deliverMu sync.Mutex
	reorder   *sync.Cond
	lastSeq   uint64
	pending   map[uint64]Event
	finished  bool

	done      chan struct{}
	abort     chan struct{} // closed by fail: a blocked delivery gives up
	abortOnce sync.Once
	exitCode  atomic.Int64 // valid after exited
	exited    atomic.Bool
	failure   atomic.Pointer[error]
	writes    atomic.Int64
	// stdinWaits counts writes refused for a full stdin queue and resent.
	stdinWaits atomic.Int64
}

func newProcess(env *Remote, id string) *Process {
	p := &Process{env: env, id: id, events: make(chan Event, EventBuffer), pending: map[uint64]Event{}, done: make(chan struct{}), abort: make(chan struct{})}
	p.reorder = sync.NewCond(&p.deliverMu)
	return p
}

// ID is the process id within the session.
func (p *Process) ID() string { return p.id }

// Pid is the process's id (and process group) on the executor, 0 if the
// executor does not say (codex).
func (p *Process) Pid() int { return p.pid }

// Events delivers the process's events in seq order, each once; it is
// closed after EventClosed or EventFailed. Consume it, or call Wait, which
// does.
func (p *Process) Events() <-chan Event { return p.events }

// Done is closed once the process has closed or failed.
func (p *Process) Done() <-chan struct{} { return p.done }

// LastSeq is the seq of the last event delivered.
func (p *Process) LastSeq() uint64 {
	p.deliverMu.Lock()
	defer p.deliverMu.Unlock()
	return p.lastSeq
}

// deliver hands ev to Events in seq order: duplicates are dropped, early
// events wait (bounded) for the gap before them. With block false (a
// shared connection whose reader must not stall), overflowing the reorder
// buffer fails the process instead of waiting.
func (p *Process) deliver(ev Event, block bool) {
	p.deliverMu.Lock()
	defer p.deliverMu.Unlock()
	for !p.finished && ev.Seq > p.lastSeq+1 && len(p.pending) >= maxReorder {
		if !block {
			p.failLocked(fmt.Errorf("process %s: too many events arrived out of order while recovering", p.id))
			return
		}
		p.reorder.Wait()
	}
	if p.finished || ev.Seq <= p.lastSeq {
		return
	}
	if ev.Seq > p.lastSeq+1 {
		p.pending[ev.Seq] = ev
		return
	}
	if !p.emitLocked(ev) {
		return
	}
	for !p.finished {
		next, ok := p.pending[p.lastSeq+1]
		if !ok {
			break
		}
		delete(p.pending, next.Seq)
		if !p.emitLocked(next) {
			return
		}
	}
	p.reorder.Broadcast()
}

// emitLocked hands ev to the consumer, waiting while its buffer is full
// (backpressure) unless the process fails meanwhile.
func (p *Process) emitLocked(ev Event) bool {
	select {
	case p.events <- ev:
	case <-p.abort:
		return false
	}
	p.lastSeq = ev.Seq
	if ev.Kind == EventExited {
		p.exitCode.Store(int64(ev.ExitCode))
		p.exited.Store(true)
	}
	if ev.Kind == EventClosed {
		p.finishLocked()
	}
	return true
}

func (p *Process) finishLocked() {
	p.finished = true
	p.pending = nil
	close(p.events)
	close(p.done)
	p.reorder.Broadcast()
	p.env.forget(p)
}

// fail ends the process's event stream with an EventFailed. A delivery
// blocked on a consumer that is not reading is abandoned first.
func (p *Process) fail(err error) {
	p.abortOnce.Do(func() { close(p.abort) })
	p.deliverMu.Lock()
	defer p.deliverMu.Unlock()
	p.failLocked(err)
}

func (p *Process) failLocked(err error) {
	if p.finished {
		return
	}
	p.abortOnce.Do(func() { close(p.abort) })
	p.failure.Store(&err)
	select {
	case p.events <- Event{Kind: EventFailed, Seq: p.lastSeq, Err: err}:
	default:
		// The consumer is not reading; Wait and Err still report err.
	}
	p.finishLocked()
}

// Err reports why the process failed, or nil.
func (p *Process) Err() error {
	if e := p.failure.Load(); e != nil {
		return *e
	}
	return nil
}

// Result is a finished process's outcome.
type Result struct {
	ExitCode int32
	// Signal is the signal that killed the process (ExitCode is then
	// 128+Signal), 0 if it exited.
	Signal int32
	Stdout []byte
	Stderr []byte // empty for a tty: all its output is in Stdout
}

// Wait consumes the events until the process closes and returns its
// output and exit code. A process that failed returns its error.
func (p *Process) Wait(ctx context.Context) (Result, error) {
	var out, errb bytes.Buffer
	var res Result
	for {
		select {
		case ev, ok := <-p.events:
			if !ok {
				res.Stdout, res.Stderr = out.Bytes(), errb.Bytes()
				res.ExitCode = int32(p.exitCode.Load())
				return res, p.Err()
			}
			switch ev.Kind {
			case EventOutput:
				if ev.Stream == protocol.StreamStderr {
					errb.Write(ev.Data)
				} else {
					out.Write(ev.Data)
				}
			case EventExited:
				res.Signal = ev.Signal
			case EventFailed:
				res.Stdout, res.Stderr = out.Bytes(), errb.Bytes()
				return res, ev.Err
			}
		case <-ctx.Done():
			return res, ctx.Err()
		}
	}
}

func (p *Process) nextWriteID() string {
	return p.id + "-w" + strconv.FormatInt(p.writes.Add(1), 10)
}

// Write writes data to the process's stdin. It applies backpressure:
// while the executor's stdin queue is full (the command reads slower than
// it is fed, or not at all) Write waits and resends the same write, until
// the executor takes it, the process closes (WriteStdinClosed), or ctx
// ends (an error wrapping ctx.Err()). A write interrupted by a dropped
// connection is resent after the session resumes. Every resend carries
// the same write id, so the executor applies the bytes once, whichever
// attempt it saw.
func (p *Process) Write(ctx context.Context, data []byte) (protocol.WriteStatus, error) {
	return p.write(ctx, data, false)
}

// CloseStdin closes the process's stdin (on a PTY: sends ^D), after every
// byte already written; it waits for room like Write.
func (p *Process) CloseStdin(ctx context.Context) error {
	st, err := p.write(ctx, nil, true)
	if err == nil && st != protocol.WriteAccepted && st != protocol.WriteStdinClosed {
		err = fmt.Errorf("close stdin: %s", st)
	}
	return err
}

// Stdin backpressure: a write the executor refuses because its stdin
// queue is full is resent after a delay that starts at stdinRetryMin and
// doubles up to stdinRetryMax, so a command that never reads costs one
// small request per stdinRetryMax, and one that reads slowly is fed
// within stdinRetryMax of making room. Memory stays bounded: the caller's
// one chunk here, the executor's queue there (StdinQueueWrites,
// StdinQueueBytes).
const (
	stdinRetryMin = time.Millisecond
	stdinRetryMax = 20 * time.Millisecond
)

// nextStdinDelay is the wait before the next resend of a refused write,
// after one of prev (0 for the first refusal).
func nextStdinDelay(prev time.Duration) time.Duration {
	if prev < stdinRetryMin {
		return stdinRetryMin
	}
	return min(2*prev, stdinRetryMax)
}

// stdinFull says err is the executor's refusal of a write for want of
// room (kind exhausted), which waiting cures.
func stdinFull(err error) bool { return protocol.KindOf(err) == protocol.KindExhausted }

func (p *Process) write(ctx context.Context, data []byte, closeStdin bool) (protocol.WriteStatus, error) {
	id := p.nextWriteID()
	params := protocol.WriteParams{ProcessID: p.id, Chunk: data, WriteID: &id, CloseStdin: closeStdin}
	var delay time.Duration
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		var res protocol.WriteResult
		err := p.env.call(ctx, true, protocol.MethodProcessWrite, params, &res)
		switch {
		case err == nil && res.Status != protocol.WriteStarting:
			return res.Status, nil
		case err != nil && !stdinFull(err):
			return "", err
		}
		p.stdinWaits.Add(1)
		delay = nextStdinDelay(delay)
		if timer == nil {
			timer = time.NewTimer(delay)
		} else {
			timer.Reset(delay)
		}
		select {
		case <-timer.C:
		case <-ctx.Done():
			return "", fmt.Errorf("process %s: writing stdin: waiting for the command to read what it was sent: %w", p.id, ctx.Err())
		case <-p.done:
			// Closed (its stdin with it) or failed: nothing will read.
			if err := p.Err(); err != nil {
				return "", err
			}
			return protocol.WriteStdinClosed, nil
		}
	}
}

// Signal sends sig to the process group.
func (p *Process) Signal(ctx context.Context, sig protocol.Signal) error {
	return p.env.call(ctx, false, protocol.MethodProcessSignal, protocol.SignalParams{ProcessID: p.id, Signal: string(sig)}, nil)
}

// Resize resizes the process's PTY.
func (p *Process) Resize(ctx context.Context, rows, cols uint16) error {
	return p.env.call(ctx, true, protocol.MethodProcessResize, protocol.ResizeParams{ProcessID: p.id, Rows: rows, Cols: cols}, nil)
}

// Terminate stops the process: TERM to its group, KILL after a grace. It
// reports whether the process was still running.
func (p *Process) Terminate(ctx context.Context) (bool, error) {
	var res protocol.TerminateResult
	err := p.env.call(ctx, false, protocol.MethodProcessTerminate, protocol.TerminateParams{ProcessID: p.id}, &res)
	return res.Running, err
}

// Read long-polls the executor's retained output (process/read) without
// touching the Events stream.
func (p *Process) Read(ctx context.Context, afterSeq uint64, maxBytes *uint64, waitMs uint64) (protocol.ReadResult, error) {
	var res protocol.ReadResult
	err := p.env.call(ctx, true, protocol.MethodProcessRead, protocol.ReadParams{ProcessID: p.id, AfterSeq: &afterSeq, MaxBytes: maxBytes, WaitMs: &waitMs}, &res)
	return res, err
}

// errTransport marks a call that failed because the connection dropped.
var errTransport = errors.New("exec-server transport disconnected")
