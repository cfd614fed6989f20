package client

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/outpost-exec/outpost/internal/tracing"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/transport"
)

// Environment is a place where processes run: a remote executor, or this
// machine (Local). Every topology offers the same API.
type Environment interface {
	// Start starts a process. An empty ProcessID is filled in; nil Env
	// means an empty environment (set EnvPolicy to inherit the executor's).
	Start(ctx context.Context, params protocol.ExecParams) (*Process, error)
	// Info describes the executor.
	Info(ctx context.Context) (protocol.EnvironmentInfo, error)
	// SessionID is the executor's id for this client's session.
	SessionID() string
	// Files is the executor's filesystem under a sandbox policy (nil: as
	// the executor's user); the methods below are Files(nil)'s.
	Files(sandbox any) *Files
	ReadFile(ctx context.Context, name string) ([]byte, error)
	WriteFile(ctx context.Context, name string, data []byte, perm os.FileMode) error
	Open(ctx context.Context, name string) (*FileReader, error)
	Create(ctx context.Context, name string, perm os.FileMode) (*FileWriter, error)
	Stat(ctx context.Context, name string) (fs.FileInfo, error)
	ReadDir(ctx context.Context, name string) ([]fs.DirEntry, error)
	Remove(ctx context.Context, name string, recursive bool) error
	MkdirAll(ctx context.Context, name string) error
	Copy(ctx context.Context, src, dst string, recursive bool) error
	// Close ends the connection; the executor keeps the session's
	// processes for its detached TTL.
	Close() error
}

// conn is one live connection to an executor.
type conn struct {
	rpc   *RPC
	close func() error
	// shared: events arrive on the connection's one reader, which must not
	// block on a single process's reorder buffer.
	shared bool
}

// dialFunc opens a connection whose notifications go to route.
type dialFunc func(ctx context.Context, route func(method string, params transport.Params, block bool)) (*conn, error)

// Remote is an Environment reached over a connection. When the connection
// drops it reconnects with jittered exponential backoff, resumes the
// session, and replays each live process's events from the last one it
// delivered — exactly once, in order — or fails the process with
// *ErrOutputLost when the executor no longer retains them.
type Remote struct {
	url  string
	dial dialFunc
	opts Options

	mu        sync.Mutex
	cur       *conn
	ready     chan struct{} // closed while cur is usable
	sessionID string
	procs     map[string]*Process
	closed    bool
	lastErr   error
	nextID    atomic.Int64
	recovered atomic.Int64
}

func newRemote(ctx context.Context, url string, dial dialFunc, opts Options) (*Remote, error) {
	r := &Remote{url: url, dial: dial, opts: opts, procs: map[string]*Process{}, ready: make(chan struct{})}
	c, sid, err := r.connect(ctx, "")
	if err != nil {
		return nil, err
	}
	r.sessionID = sid
	r.install(c)
	return r, nil
}

// connect dials and initializes, resuming sid when non-empty.
func (r *Remote) connect(ctx context.Context, sid string) (_ *conn, _ string, err error) {
	if tr := tracing.Tracer(r.opts.TracerProvider); tr != nil {
		var span trace.Span
		ctx, span = tr.Start(ctx, "outpost.connect", trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(attribute.String("outpost.transport", urlScheme(r.url)), attribute.Bool("outpost.resume", sid != "")))
		defer func() { endSpan(span, err) }()
	}
	c, err := r.dial(ctx, r.route)
	if err != nil {
		return nil, "", err
	}
	params := protocol.InitializeParams{ClientName: r.opts.clientName()}
	params.TraceParent, params.TraceState = tracing.Inject(ctx)
	if sid != "" {
		params.ResumeSessionID = &sid
	}
	var res protocol.InitializeResult
	if err := c.rpc.Call(ctx, protocol.MethodInitialize, params, &res); err != nil {
		c.close()
		return nil, "", fmt.Errorf("initialize: %w", err)
	}
	if err := c.rpc.Notify(ctx, protocol.MethodInitialized, struct{}{}); err != nil {
		c.close()
		return nil, "", fmt.Errorf("initialized: %w", err)
	}
	return c, res.SessionID, nil
}

func (r *Remote) install(c *conn) {
	r.mu.Lock()
	r.cur = c
	close(r.ready)
	r.mu.Unlock()
	go r.watch(c)
}

// watch waits for c to fail and recovers.
func (r *Remote) watch(c *conn) {
	<-c.rpc.Done()
	r.mu.Lock()
	if r.closed || r.cur != c {
		r.mu.Unlock()
		return
	}
	r.cur = nil
	r.ready = make(chan struct{})
	r.mu.Unlock()
	if r.opts.NoResume {
		r.failAll(fmt.Errorf("%w: %v", errTransport, c.rpc.Err()))
		return
	}
	r.recover(c.rpc.Err())
}

// recover reconnects and resumes the session, then catches every live
// process up from its last delivered event.
func (r *Remote) recover(cause error) {
	deadline := time.Now().Add(r.opts.recoveryTimeout())
	backoff := 100 * time.Millisecond
	var offlineSince time.Time
	for attempt := 1; ; attempt++ {
		r.mu.Lock()
		closed := r.closed
		r.mu.Unlock()
		if closed {
			return
		}
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		c, sid, err := r.connect(ctx, r.sessionID)
		cancel()
		if err == nil {
			if sid != r.sessionID {
				c.close()
				r.failAll(fmt.Errorf("%w: the executor resumed session %s instead of %s", errTransport, sid, r.sessionID))
				return
			}
			r.install(c)
			r.recovered.Add(1)
			r.catchUpAll()
			return
		}
		var pe *protocol.Error
		if errors.As(err, &pe) && pe.Code == protocol.CodeInvalidRequest {
			// unknown session: it expired or the executor restarted.
			r.failAll(fmt.Errorf("%w (%v); failed to resume session %s: %v", errTransport, cause, r.sessionID, err))
			return
		}
		if errors.As(err, &pe) && pe.Code == protocol.CodeNotFound {
			// The relay says the executor is offline. It may be rejoining
			// after a relay restart; past a short grace it is gone, and so
			// is the session it held: say so promptly.
			if offlineSince.IsZero() {
				offlineSince = time.Now()
			} else if time.Since(offlineSince) > r.opts.offlineGrace() {
				r.failAll(fmt.Errorf("%w (%v): %s", errTransport, cause, pe.Message))
				return
			}
		} else {
			offlineSince = time.Time{}
		}
		if time.Now().After(deadline) {
			r.failAll(fmt.Errorf("%w (%v); gave up resuming session %s after %d attempts: %v", errTransport, cause, r.sessionID, attempt, err))
			return
		}
		// Full jitter: sleep a random part of the current backoff.
		sleep := time.Duration(rand.Int64N(int64(backoff))) + time.Millisecond
		time.Sleep(min(sleep, time.Until(deadline)))
		backoff = min(backoff*2, 5*time.Second)
	}
}

// catchUpAll replays what each live process produced while the client was
// away.
func (r *Remote) catchUpAll() {
	r.mu.Lock()
	procs := make([]*Process, 0, len(r.procs))
	for _, p := range r.procs {
		procs = append(procs, p)
	}
	r.mu.Unlock()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for _, p := range procs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			r.catchUp(p)
		}()
	}
	wg.Wait()
}

// catchUp reads p's retained events after the last one delivered until it
// has seen everything the executor had; pushed events after that flow in
// through the new connection and are merged in seq order.
func (r *Remote) catchUp(p *Process) {
	const chunkBudget = 8 << 20
	for {
		select {
		case <-p.done:
			return
		default:
		}
		after := p.LastSeq()
		budget := uint64(chunkBudget)
		wait := uint64(0)
		var res protocol.ReadResult
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := r.call(ctx, true, protocol.MethodProcessRead, protocol.ReadParams{ProcessID: p.id, AfterSeq: &after, MaxBytes: &budget, WaitMs: &wait}, &res)
		cancel()
		if err != nil {
			var pe *protocol.Error
			if errors.As(err, &pe) {
				p.fail(fmt.Errorf("process %s: catching up after reconnect: %w", p.id, err))
			}
			return // transport trouble: the next recovery catches up again
		}
		if res.Gap != nil {
			p.fail(&ErrOutputLost{ProcessID: p.id, FromSeq: res.Gap.FromSeq, ToSeq: res.Gap.ToSeq})
			return
		}
		evs := readEvents(res)
		for _, ev := range evs {
			p.deliver(ev, true)
		}
		if len(res.Chunks) == 0 {
			return
		}
	}
}

// readEvents turns a read result into events in seq order.
func readEvents(res protocol.ReadResult) []Event {
	evs := make([]Event, 0, len(res.Chunks)+2)
	for _, c := range res.Chunks {
		evs = append(evs, Event{Kind: EventOutput, Seq: c.Seq, Stream: c.Stream, Data: c.Chunk})
	}
	limit := res.NextSeq
	if n := len(res.Chunks); n > 0 {
		limit = res.Chunks[n-1].Seq + 1
	}
	if res.Exited && res.ExitSeq > 0 && res.ExitSeq < limit+1 && res.ExitCode != nil {
		evs = append(evs, Event{Kind: EventExited, Seq: res.ExitSeq, ExitCode: *res.ExitCode, SandboxDenied: res.SandboxDenied, Limit: res.Limit})
	}
	if res.Closed && res.CloseSeq > 0 && res.CloseSeq < limit+2 {
		evs = append(evs, Event{Kind: EventClosed, Seq: res.CloseSeq})
	}
	sort.Slice(evs, func(i, j int) bool { return evs[i].Seq < evs[j].Seq })
	return evs
}

func (r *Remote) failAll(err error) {
	r.mu.Lock()
	r.lastErr = err
	procs := make([]*Process, 0, len(r.procs))
	for _, p := range r.procs {
		procs = append(procs, p)
	}
	r.mu.Unlock()
	for _, p := range procs {
		p.fail(err)
	}
}

// route delivers a pushed notification to its process.
func (r *Remote) route(method string, params transport.Params, block bool) {
	var ev Event
	var pid string
	switch method {
	case protocol.MethodProcessOutput:
		var n protocol.OutputNotification
		if params.Decode(&n) != nil {
			return
		}
		pid, ev = n.ProcessID, Event{Kind: EventOutput, Seq: n.Seq, Stream: n.Stream, Data: n.Chunk}
	case protocol.MethodProcessExited:
		var n protocol.ExitedNotification
		if params.Decode(&n) != nil {
			return
		}
		denied := n.SandboxDenied != nil && *n.SandboxDenied
		pid, ev = n.ProcessID, Event{Kind: EventExited, Seq: n.Seq, ExitCode: n.ExitCode, Signal: n.Signal, SandboxDenied: denied, Limit: n.Limit}
	case protocol.MethodProcessClosed:
		var n protocol.ClosedNotification
		if params.Decode(&n) != nil {
			return
		}
		pid, ev = n.ProcessID, Event{Kind: EventClosed, Seq: n.Seq}
	default:
		return
	}
	r.mu.Lock()
	p := r.procs[pid]
	r.mu.Unlock()
	if p != nil {
		p.deliver(ev, block)
	}
}

func (r *Remote) forget(p *Process) {
	r.mu.Lock()
	if r.procs[p.id] == p {
		delete(r.procs, p.id)
	}
	r.mu.Unlock()
}

// current waits for a usable connection.
func (r *Remote) current(ctx context.Context) (*conn, error) {
	for {
		r.mu.Lock()
		c, ready, closed, lastErr := r.cur, r.ready, r.closed, r.lastErr
		r.mu.Unlock()
		switch {
		case closed:
			return nil, ErrClosed
		case c != nil:
			return c, nil
		case lastErr != nil:
			return nil, lastErr
		}
		select {
		case <-ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// call runs a request. A retryable call (reads, writes with a write id,
// resizes) that fails because the connection dropped runs again on the
// resumed connection; others return the transport error.
func (r *Remote) call(ctx context.Context, retryable bool, method string, params, result any) error {
	for {
		c, err := r.current(ctx)
		if err != nil {
			return err
		}
		err = c.rpc.Call(ctx, method, params, result)
		if err == nil || !errors.Is(err, ErrClosed) {
			return err
		}
		if !retryable || r.opts.NoResume {
			return fmt.Errorf("%s: %w: %v", method, errTransport, err)
		}
	}
}

// Start implements Environment.
func (r *Remote) Start(ctx context.Context, params protocol.ExecParams) (*Process, error) {
	p, _, err := r.StartProcess(ctx, params)
	return p, err
}

// urlScheme is the part of url before "://" (never the token or path).
func urlScheme(url string) string {
	scheme, _, _ := strings.Cut(url, "://")
	return scheme
}

// endSpan ends span, recording err.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// Info implements Environment.
func (r *Remote) Info(ctx context.Context) (protocol.EnvironmentInfo, error) {
	var info protocol.EnvironmentInfo
	err := r.call(ctx, true, protocol.MethodEnvironmentInfo, nil, &info)
	return info, err
}

// SessionID implements Environment.
func (r *Remote) SessionID() string { return r.sessionID }

// URL is what was dialled.
func (r *Remote) URL() string { return r.url }

// Reconnects counts successful session resumes.
func (r *Remote) Reconnects() int64 { return r.recovered.Load() }

// Close implements Environment.
func (r *Remote) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	c := r.cur
	r.cur = nil
	r.mu.Unlock()
	var err error
	if c != nil {
		err = c.close()
	}
	r.failAll(ErrClosed)
	return err
}

// dropConnection closes the current connection as a network failure would
// (tests use it to exercise resume).
func (r *Remote) dropConnection() {
	r.mu.Lock()
	c := r.cur
	r.mu.Unlock()
	if c != nil {
		c.close()
	}
}
