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
	retry := codexReadOnly[method]
	for {
		c, err := r.current(ctx)
		if err != nil {
			return nil, err
		}
		var out json.RawMessage
		if c.json {
			var p any
			if len(params) > 0 {
				p = params
			}
			err = c.rpc.Call(ctx, method, p, &out)
		} else {
			var res protocol.CodexCallResult
			err = c.rpc.Call(ctx, protocol.MethodCodexCall, protocol.CodexCallParams{Method: method, Params: params}, &res)
			out = res.Result
		}
		if err == nil {
			if len(out) == 0 {
				out = json.RawMessage("null")
			}
			return out, nil
		}
		if !errors.Is(err, ErrClosed) {
			return nil, err
		}
		if !retry || r.cfg.NoResume {
			return nil, fmt.Errorf("%s: %w: %v", method, errTransport, err)
		}
	}
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
