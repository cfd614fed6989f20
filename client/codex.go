package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/transport"
)

// codex's protocol through a Remote, for front ends that relay it
// (outpost bridge): any request as the JSON codex wrote, and every codex
// notification that is not a process event, without knowing their shapes.
// On ws and stdio connections requests travel as they are; on the native
// transport inside codex/call (protocol/codex.go).

// CallCodex sends one codex request with params as JSON (nil: none) and
// returns its result as JSON. An executor's refusal comes back as its
// *protocol.Error. Requests that only read (see codexReadOnly) are sent
// again after a reconnect; others fail with the disconnect.
func (r *Remote) CallCodex(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	return r.CallCodexThen(ctx, method, params, nil)
}

// CallCodexThen is CallCodex for a front end that relays the answer and
// the notifications alike (outpost bridge): then (when not nil) runs with
// the outcome, and the notifications the executor sent after the answer
// reach OnCodexNotification's function only once then has returned — so
// a reply passed on in then goes out before them, as the executor sent it.
func (r *Remote) CallCodexThen(ctx context.Context, method string, params json.RawMessage, then func(json.RawMessage, error)) (json.RawMessage, error) {
	retry := codexReadOnly[method]
	for {
		c, err := r.current(ctx)
		if err != nil {
			return r.codexDone(nil, err, then)
		}
		var out json.RawMessage
		var res protocol.CodexCallResult
		var last bool
		var invalid error // a result that is not JSON, refused in relay
		relay := func(err error) {
			switch {
			case err == nil:
				if !c.json {
					out = res.Result
				}
				if len(out) == 0 {
					out = json.RawMessage("null")
				} else if !c.json && !json.Valid(out) {
					// Bytes, not JSON: passed on, they would fail the
					// relaying front end's write and drop its codex
					// connection.
					invalid = protocol.KindErrorf(protocol.KindInternal, protocol.CodeInternal, "%s: the executor's result is not valid JSON", method)
					out, err = nil, invalid
				}
			case errors.Is(err, ErrClosed) && retry && !r.cfg.NoResume:
				return // sent again on the resumed connection: not the outcome
			case errors.Is(err, ErrClosed):
				err = fmt.Errorf("%s: %w: %v", method, errTransport, err)
			}
			last = true
			if then != nil {
				then(out, err)
			}
		}
		if c.json {
			var p any
			if len(params) > 0 {
				p = params
			}
			err = c.rpc.CallThen(ctx, method, p, &out, relay)
		} else {
			err = c.rpc.CallThen(ctx, protocol.MethodCodexCall, protocol.CodexCallParams{Method: method, Params: params}, &res, relay)
		}
		if last {
			if err == nil && invalid != nil {
				err = invalid
			}
			if err != nil {
				if errors.Is(err, ErrClosed) {
					err = fmt.Errorf("%s: %w: %v", method, errTransport, err)
				}
				return nil, err
			}
			return out, nil
		}
	}
}

// codexDone reports an outcome that never reached the connection.
func (r *Remote) codexDone(out json.RawMessage, err error, then func(json.RawMessage, error)) (json.RawMessage, error) {
	if then != nil {
		then(out, err)
	}
	return out, err
}

// codexReadOnly are the codex requests that change nothing on the
// executor, so running one twice is running it once.
var codexReadOnly = map[string]bool{
	protocol.MethodEnvironmentInfo: true,
	"environment/status":           true,
	"environmentConfig/read":       true,
	"capabilities/discoverV2":      true,
	"fs/walk":                      true,
	protocol.MethodFsReadFile:      true,
	protocol.MethodFsGetMetadata:   true,
	protocol.MethodFsCanonicalize:  true,
	protocol.MethodFsReadDirectory: true,
	protocol.MethodFsReadBlock:     true,
	protocol.MethodFsHash:          true,
}

// OnCodexNotification sets the function that receives codex's
// notifications that are not process events (fs/missingChanged,
// http/request/bodyDelta, and any the executor gains), in the order the
// executor sent them, with params as JSON. It runs on the connection's
// reader: while it blocks, the connection's replies wait. nil drops them
// (the default).
func (r *Remote) OnCodexNotification(f func(method string, params json.RawMessage)) {
	if f == nil {
		r.codexNote.Store(nil)
		return
	}
	r.codexNote.Store(&f)
}

// routeCodex hands a notification that is not a process event to the
// OnCodexNotification function.
func (r *Remote) routeCodex(method string, params transport.Params) {
	f := r.codexNote.Load()
	if f == nil {
		return
	}
	var raw json.RawMessage
	if method == protocol.MethodCodexNotification {
		var n protocol.CodexNotification
		if params == nil || params.Decode(&n) != nil || n.Method == "" {
			return
		}
		if len(n.Params) > 0 && !json.Valid(n.Params) {
			// Not JSON: a front end could never write it to codex, and one
			// that keeps an unwritten notification for the next connection
			// would fail on it again and again. Dropped.
			return
		}
		method, raw = n.Method, n.Params
	} else if params != nil && !params.Absent() {
		// A JSON connection's own notification: its params are JSON.
		if params.Decode(&raw) != nil {
			return
		}
	}
	if len(raw) == 0 {
		raw = json.RawMessage("null")
	}
	(*f)(method, raw)
}
