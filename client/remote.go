package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/outpost-exec/outpost/internal/backoff"
	"github.com/outpost-exec/outpost/internal/tracing/tracectx"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/transport"
)

// Environment is a place where processes run: a remote executor, or this
// machine (package local). Every topology offers the same API.
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
	// launch, when set, completes the connection's handshake: what was
	// written before is held and sent with it, as early data when the
	// executor takes it. It is called once, after the first requests.
	launch launchFunc
	// json: the connection speaks codex's JSON (ws, stdio), so codex
	// requests travel as they are rather than inside codex/call.
	json bool
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
	cfg  Config // its zero fields filled

	// life ends with Close: recovery, catch-up reads and their dials run
	// under it, so Close stops them.
	life    context.Context
	endLife context.CancelFunc

	mu        sync.Mutex
	cur       *conn
	ready     chan struct{} // closed while cur is usable, and once the Remote is closed or given up
	readyOpen bool          // ready is not closed yet
	sessionID string
	procs     map[string]*Process
	closed    bool
	lastErr   error
	nextID    atomic.Int64
	recovered atomic.Int64
	codexNote atomic.Pointer[func(method string, params json.RawMessage)]
}

// newRemote dials the first connection; cfg comes with its zero fields
// filled.
func newRemote(ctx context.Context, url string, dial dialFunc, cfg Config) (*Remote, error) {
	r := &Remote{url: url, dial: dial, cfg: cfg, procs: map[string]*Process{}, ready: make(chan struct{}), readyOpen: true}
	r.life, r.endLife = context.WithCancel(context.Background())
	c, sid, err := r.connect(ctx, "")
	if err != nil {
		r.endLife()
		return nil, err
	}
	r.sessionID = sid
	r.install(c)
	return r, nil
}

// connect dials and initializes, resuming sid when non-empty.
func (r *Remote) connect(ctx context.Context, sid string) (_ *conn, _ string, err error) {
	ctx, end := r.connectSpan(ctx, sid)
	defer func() { end(err) }()
	c, init, err := r.open(ctx, sid)
	if err != nil {
		return nil, "", err
	}
	sessionID, err := r.finishOpen(ctx, c, init)
	if err != nil {
		return nil, "", err
	}
	return c, sessionID, nil
}

// connectSpan starts the outpost.connect span, when tracing.
func (r *Remote) connectSpan(ctx context.Context, sid string) (context.Context, func(error)) {
	tr := tracectx.Tracer(r.cfg.TracerProvider)
	if tr == nil {
		return ctx, func(error) {}
	}
	ctx, span := tr.Start(ctx, "outpost.connect", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("outpost.transport", urlScheme(r.url)), attribute.Bool("outpost.resume", sid != "")))
	return ctx, func(err error) { endSpan(span, err) }
}

// open dials and sends initialize and initialized without waiting for
// initialize's answer: a request sent next on c's RPC is pipelined behind
// them (the executor handles a connection's requests in order). The
// handshake of a connection with a launch is not made yet: finishOpen
// makes it, carrying what was sent so far.
func (r *Remote) open(ctx context.Context, sid string) (*conn, *Pending, error) {
	c, err := r.dial(ctx, r.route)
	if err != nil {
		return nil, nil, err
	}
	params := protocol.InitializeParams{ClientName: r.cfg.ClientName, ProtocolVersion: protocol.Version}
	params.TraceParent, params.TraceState = tracectx.Inject(ctx)
	if sid != "" {
		params.ResumeSessionID = &sid
	}
	init, err := c.rpc.Send(ctx, protocol.MethodInitialize, params)
	if err != nil {
		c.close()
		return nil, nil, fmt.Errorf("initialize: %w", err)
	}
	if err := c.rpc.Notify(ctx, protocol.MethodInitialized, struct{}{}); err != nil {
		c.close()
		return nil, nil, fmt.Errorf("initialized: %w", err)
	}
	return c, init, nil
}

// finishOpen completes c's handshake if it waits (conn.launch) and
// initialize's answer: the session id. On failure c is closed.
func (r *Remote) finishOpen(ctx context.Context, c *conn, init *Pending) (string, error) {
	if c.launch != nil {
		if err := c.launch(ctx); err != nil {
			c.close()
			return "", err
		}
	}
	var res protocol.InitializeResult
	if err := init.Wait(ctx, &res); err != nil {
		c.close()
		return "", fmt.Errorf("initialize: %w", err)
	}
	return res.SessionID, nil
}

// newRemoteStart is newRemote and StartProcess in one round trip fewer:
// process/start is sent right behind initialize, before its answer (and,
// with early data, in the handshake's first message). See DialStart.
func newRemoteStart(ctx context.Context, url string, dial dialFunc, cfg Config, params protocol.ExecParams) (_ *Remote, _ *Process, _ protocol.StartResult, err error) {
	r := &Remote{url: url, dial: dial, cfg: cfg, procs: map[string]*Process{}, ready: make(chan struct{}), readyOpen: true}
	r.life, r.endLife = context.WithCancel(context.Background())
	cctx, end := r.connectSpan(ctx, "")
	c, init, err := r.open(cctx, "")
	if err != nil {
		end(err)
		r.endLife()
		return nil, nil, protocol.StartResult{}, err
	}
	sctx, p, params, endStart, err := r.prepareStart(ctx, params)
	if err != nil {
		c.close()
		end(err)
		r.endLife()
		return nil, nil, protocol.StartResult{}, err
	}
	defer func() { endStart(err) }()
	start, serr := c.rpc.Send(sctx, protocol.MethodProcessStart, params)
	sid, err := r.finishOpen(cctx, c, init)
	end(err)
	if err != nil {
		// The executor refuses requests after a failed initialize: the
		// start did not run.
		r.forget(p)
		r.endLife()
		return nil, nil, protocol.StartResult{}, fmt.Errorf("%w (so process/start was not run)", err)
	}
	r.sessionID = sid
	if !r.install(c) {
		return nil, nil, protocol.StartResult{}, ErrClosed
	}
	if serr != nil {
		r.forget(p)
		return r, nil, protocol.StartResult{}, serr
	}
	var res protocol.StartResult
	if err := start.Wait(sctx, &res); err != nil {
		if errors.Is(err, ErrClosed) {
			// The connection dropped under the start: settle it on the
			// resumed session.
			err = r.recoverStart(sctx, p, params, &res, func(res *protocol.StartResult) error {
				return r.call(sctx, false, protocol.MethodProcessStart, params, res)
			})
		}
		if err != nil {
			r.forget(p)
			return r, nil, protocol.StartResult{}, err
		}
	}
	p.pid = res.Pid
	p.started.Store(true)
	if res.ProcessID == "" {
		res.ProcessID = p.id
	}
	return r, p, res, nil
}

// install makes c the current connection and watches it. A closed Remote
// refuses: c is closed and install reports false.
func (r *Remote) install(c *conn) bool {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		c.close()
		return false
	}
	r.cur = c
	r.wakeLocked()
	r.mu.Unlock()
	go r.watch(c)
	return true
}

// wakeLocked closes ready, releasing callers waiting for a connection.
func (r *Remote) wakeLocked() {
	if r.readyOpen {
		close(r.ready)
		r.readyOpen = false
	}
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
	r.ready, r.readyOpen = make(chan struct{}), true
	r.mu.Unlock()
	if r.cfg.NoResume {
		r.failAll(fmt.Errorf("%w: %v", errTransport, c.rpc.Err()))
		return
	}
	r.recover(c.rpc.Err())
}

// recover reconnects and resumes the session, then catches every live
// process up from its last delivered event. It runs under the Remote's
// life: Close ends it, whether it is dialling, resuming or waiting.
//
// What the executor (or relay) answers decides, by its error kind:
// unknown_session — the session is gone, and so are its processes;
// refused — these credentials will not do; anything else (unavailable,
// exhausted, a dropped dial) is tried again with backoff until the
// recovery timeout, except that an executor the relay reports offline
// fails its processes after the offline grace. A peer that sends no kinds
// is judged by its codes, as before kinds: -32600 is an unknown session
// and -32004 an offline executor.
func (r *Remote) recover(cause error) {
	ctx, cancel := context.WithTimeout(r.life, r.cfg.RecoveryTimeout)
	defer cancel()
	bo := backoff.Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second}
	var offlineSince time.Time
	for attempt := 1; ; attempt++ {
		c, sid, err := r.connect(ctx, r.sessionID)
		if err == nil {
			if sid != r.sessionID {
				c.close()
				r.failAll(fmt.Errorf("%w: the executor resumed session %s instead of %s", errTransport, sid, r.sessionID))
				return
			}
			if !r.install(c) {
				return // closed meanwhile
			}
			r.recovered.Add(1)
			r.catchUpAll()
			return
		}
		if r.life.Err() != nil {
			return // closed: Close has failed every process
		}
		var pe *protocol.Error
		isPE := errors.As(err, &pe)
		kind := protocol.KindOf(err)
		switch {
		case kind == protocol.KindUnknownSession || kind == "" && isPE && pe.Code == protocol.CodeInvalidRequest:
			// It expired, or the executor restarted.
			r.failAll(fmt.Errorf("%w (%v); failed to resume session %s: %v", errTransport, cause, r.sessionID, err))
			return
		case kind == protocol.KindRefused, kind == protocol.KindNotFound:
			// Refused, or the relay no longer knows the executor (its id
			// was unbound): waiting changes nothing.
			// The refusal's kind reaches the caller (errors.Is on both).
			r.failAll(fmt.Errorf("%w (%v); resuming session %s was refused: %w", errTransport, cause, r.sessionID, err))
			return
		case isPE && pe.Code == protocol.CodeNotFound && (kind == protocol.KindUnavailable || kind == ""):
			// The relay says the executor is offline. It may be rejoining
			// after a relay restart; past a short grace it is gone, and so
			// is the session it held: say so promptly.
			if offlineSince.IsZero() {
				offlineSince = time.Now()
			} else if time.Since(offlineSince) > r.cfg.OfflineGrace {
				r.failAll(fmt.Errorf("%w (%v): %s", errTransport, cause, pe.Message))
				return
			}
		default:
			offlineSince = time.Time{}
		}
		if werr := bo.Wait(ctx); werr != nil {
			if r.life.Err() != nil {
				return
			}
			r.failAll(fmt.Errorf("%w (%v); gave up resuming session %s after %d attempts: %v", errTransport, cause, r.sessionID, attempt, err))
			return
		}
	}
}

// catchUpAll replays what each live process produced while the client was
// away.
func (r *Remote) catchUpAll() {
	r.mu.Lock()
	procs := make([]*Process, 0, len(r.procs))
	for _, p := range r.procs {
		if p.started.Load() {
			procs = append(procs, p)
		}
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
		ctx, cancel := context.WithTimeout(r.life, 30*time.Second)
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
		for _, ev := range res.Events() {
			p.deliver(clientEvent(ev), true)
		}
		if len(res.Chunks) == 0 {
			return
		}
	}
}

// clientEvent is the client's form of a protocol event.
func clientEvent(ev protocol.Event) Event {
	kind := EventOutput
	switch ev.Kind {
	case protocol.EventExited:
		kind = EventExited
	case protocol.EventClosed:
		kind = EventClosed
	}
	return Event{Kind: kind, Seq: ev.Seq, Stream: ev.Stream, Data: ev.Data, ExitCode: ev.ExitCode, Signal: ev.Signal, SandboxDenied: ev.SandboxDenied, Limit: ev.Limit}
}

func (r *Remote) failAll(err error) {
	r.mu.Lock()
	r.lastErr = err
	r.wakeLocked()
	procs := make([]*Process, 0, len(r.procs))
	for _, p := range r.procs {
		procs = append(procs, p)
	}
	r.mu.Unlock()
	for _, p := range procs {
		p.fail(err)
	}
}

// route delivers a pushed notification to its process, or one of
// codex's other notifications to the OnCodexNotification function.
func (r *Remote) route(method string, params transport.Params, block bool) {
	pid, ev, ok := protocol.DecodeEvent(method, params)
	if !ok {
		r.routeCodex(method, params)
		return
	}
	r.mu.Lock()
	p := r.procs[pid]
	r.mu.Unlock()
	if p != nil {
		p.deliver(clientEvent(ev), block)
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
		if !retryable || r.cfg.NoResume {
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
	r.wakeLocked()
	r.mu.Unlock()
	r.endLife() // stops a recovery, whatever it is waiting for
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
		// Wait for watch to notice, so the test's next call finds the
		// connection gone (and resumes) rather than racing watch onto
		// the closed one; watch is runnable once c's RPC is done.
		for {
			r.mu.Lock()
			noticed := r.cur != c || r.closed
			r.mu.Unlock()
			if noticed {
				return
			}
			runtime.Gosched()
		}
	}
}
