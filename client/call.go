package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/outpost-exec/outpost/internal/tracing/tracectx"
	"github.com/outpost-exec/outpost/protocol"
)

// Call runs one request of the executor's method table with params and
// decodes its result into result (nil discards it). It is for callers that
// relay requests they did not make themselves, such as the codex bridge:
// everything else should use Start, Process and Files.
//
// A request that is safe to repeat (see Idempotent) and is interrupted by
// a dropped connection runs again once the session has resumed; any other
// returns the transport error. An error of the executor's comes back as
// *protocol.Error with its code and message.
func (r *Remote) Call(ctx context.Context, method string, params, result any) error {
	return r.call(ctx, Idempotent(method, params), method, params, result)
}

// StartProcess is Start that also returns the executor's start result:
// the process id, its pid and the sandbox type the executor chose, for
// callers that pass the result on (the codex bridge).
func (r *Remote) StartProcess(ctx context.Context, params protocol.ExecParams) (_ *Process, _ protocol.StartResult, err error) {
	p, res, _, err := r.startProcess(ctx, params, nil)
	return p, res, err
}

// StartProcessCodex is StartProcess for a front end that relays codex
// (outpost bridge): raw is process/start's params as codex wrote them,
// sent as they are (codex/call on the native transport) so the executor
// decodes and judges exactly what codex sent — fields outpost's types do
// not know included — and the result comes back as the executor's JSON.
// params is raw decoded, for the process id. raw must name that process
// id; it is sent unchanged, so no trace context is added.
func (r *Remote) StartProcessCodex(ctx context.Context, params protocol.ExecParams, raw json.RawMessage) (*Process, json.RawMessage, error) {
	if params.ProcessID == "" {
		return nil, nil, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "processId must not be empty")
	}
	p, _, out, err := r.startProcess(ctx, params, raw)
	return p, out, err
}

func (r *Remote) startProcess(ctx context.Context, params protocol.ExecParams, raw json.RawMessage) (_ *Process, _ protocol.StartResult, _ json.RawMessage, err error) {
	ctx, p, params, end, err := r.prepareStart(ctx, params)
	if err != nil {
		return nil, protocol.StartResult{}, nil, err
	}
	defer func() { end(err) }()
	var res protocol.StartResult
	var out json.RawMessage
	send := func(res *protocol.StartResult) error {
		if raw == nil {
			return r.call(ctx, false, protocol.MethodProcessStart, params, res)
		}
		var err error
		if out, err = r.CallCodex(ctx, protocol.MethodProcessStart, raw); err != nil {
			return err
		}
		json.Unmarshal(out, res) // for the pid; the caller passes out on
		return nil
	}
	err = send(&res)
	if errors.Is(err, errTransport) {
		err = r.recoverStart(ctx, p, params, &res, send)
		if err == nil && raw != nil && out == nil {
			// It had run: the answer was lost with the connection.
			out, _ = json.Marshal(res)
		}
	}
	if err != nil {
		r.forget(p)
		return nil, protocol.StartResult{}, nil, err
	}
	p.pid = res.Pid
	p.started.Store(true)
	if res.ProcessID == "" {
		res.ProcessID = p.id
	}
	return p, res, out, nil
}

// recoverStart settles a process/start whose connection dropped before
// its answer — a relay of a cluster killed, a network blip — once the
// session has resumed: the process id is the client's, so the executor
// is asked whether it has the process (process/read): if it does, the
// start ran and the process is this one (its pid is not known: 0); if it
// says the id is unknown, the start never arrived and is sent again. A
// start is never run twice. It gives up (the transport error) when the
// session cannot resume or ctx ends.
func (r *Remote) recoverStart(ctx context.Context, p *Process, params protocol.ExecParams, res *protocol.StartResult, send func(*protocol.StartResult) error) error {
	if r.cfg.NoResume {
		return fmt.Errorf("%s: %w", protocol.MethodProcessStart, errTransport)
	}
	for attempt := 0; ; attempt++ {
		zero, none := uint64(0), uint64(0)
		var rr protocol.ReadResult
		err := r.call(ctx, true, protocol.MethodProcessRead, protocol.ReadParams{ProcessID: params.ProcessID, AfterSeq: &zero, MaxBytes: &none, WaitMs: &zero}, &rr)
		switch {
		case err == nil:
			*res = protocol.StartResult{ProcessID: params.ProcessID}
			// Its events so far went to the dropped connection: read
			// them back, as a resume does for every started process.
			p.started.Store(true)
			go r.catchUp(p)
			return nil
		case protocol.KindOf(err) != protocol.KindNotFound:
			return fmt.Errorf("%s: %w (checking whether it ran: %w)", protocol.MethodProcessStart, errTransport, err)
		case attempt == maxStartRecoveries:
			return fmt.Errorf("%s: %w (the connection dropped under it %d times)", protocol.MethodProcessStart, errTransport, attempt+1)
		}
		err = send(res)
		if !errors.Is(err, errTransport) {
			return err
		}
	}
}

// maxStartRecoveries bounds the starts recoverStart sends again.
const maxStartRecoveries = 3

// prepareStart completes params (a process id, an environment, trace
// context) and registers the process, so that no early event is missed;
// end closes the process/start span.
func (r *Remote) prepareStart(ctx context.Context, params protocol.ExecParams) (context.Context, *Process, protocol.ExecParams, func(error), error) {
	if params.ProcessID == "" {
		params.ProcessID = "p" + strconv.FormatInt(r.nextID.Add(1), 10)
	}
	end := func(error) {}
	if tr := tracectx.Tracer(r.cfg.TracerProvider); tr != nil {
		var span trace.Span
		ctx, span = tr.Start(ctx, protocol.MethodProcessStart, trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(attribute.String("outpost.process_id", params.ProcessID)))
		end = func(err error) { endSpan(span, err) }
		params.TraceParent, params.TraceState = tracectx.Inject(ctx)
	}
	if params.Env == nil {
		params.Env = map[string]string{}
	}
	p := newProcess(r, params.ProcessID)
	r.mu.Lock()
	if r.procs[p.id] != nil {
		r.mu.Unlock()
		err := fmt.Errorf("process %s is already running in this session", p.id)
		end(err)
		return ctx, nil, params, nil, err
	}
	r.procs[p.id] = p
	r.mu.Unlock()
	return ctx, p, params, end, nil
}

// Err reports why the Remote was given up — its session could not be
// resumed within the recovery timeout, or Close was called — and nil while
// it is connected or still resuming. Once non-nil it stays so.
func (r *Remote) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.closed:
		return ErrClosed
	case r.cur == nil:
		return r.lastErr // set only when recovery has given up for good
	}
	return nil
}

// Idempotent reports whether a request may run twice with the effect of
// once, so that Call retries it after a reconnect: reads and lookups,
// resizes, whole-file writes, block writes at an offset, process writes
// that carry a writeId (the executor accepts an id once), removes that
// ignore a missing path (force, the default), recursive directory
// creation (the default) and discarding closes. Starts, signals,
// terminates, copies, opens, creates and committing closes are not.
func Idempotent(method string, params any) bool {
	switch method {
	case protocol.MethodProcessRead, protocol.MethodProcessResize, protocol.MethodEnvironmentInfo,
		protocol.MethodFsReadFile, protocol.MethodFsWriteFile, protocol.MethodFsGetMetadata,
		protocol.MethodFsCanonicalize, protocol.MethodFsReadDirectory, protocol.MethodFsReadBlock,
		protocol.MethodFsWriteBlock, protocol.MethodFsHash:
		return true
	case protocol.MethodProcessWrite:
		switch p := params.(type) {
		case protocol.WriteParams:
			return p.WriteID != nil
		case *protocol.WriteParams:
			return p != nil && p.WriteID != nil
		}
	case protocol.MethodFsRemove:
		switch p := params.(type) {
		case protocol.FsRemoveParams:
			return p.Force == nil || *p.Force
		case *protocol.FsRemoveParams:
			return p != nil && (p.Force == nil || *p.Force)
		}
	case protocol.MethodFsCreateDirectory:
		switch p := params.(type) {
		case protocol.FsCreateDirectoryParams:
			return p.Recursive == nil || *p.Recursive
		case *protocol.FsCreateDirectoryParams:
			return p != nil && (p.Recursive == nil || *p.Recursive)
		}
	case protocol.MethodFsClose:
		switch p := params.(type) {
		case protocol.FsCloseParams:
			return p.Discard
		case *protocol.FsCloseParams:
			return p != nil && p.Discard
		}
	}
	return false
}
