package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"

	"github.com/outpost-exec/outpost/protocol"
)

// The audit trail: one log line per tool call — the tool, the executor,
// what it ran or touched (argv, path), how it ended (exit code, error and
// its kind) and how long it took — written by auditMiddleware when the
// call returns. Handlers add their details with note.

// KindMeta is the _meta key of a failed call's result that names the
// error's kind (invalid_argument, not_allowed, unknown_executor,
// unknown_handle, too_many_handles, edit_mismatch, busy, unavailable, or an
// executor's kind such as not_found and permission), so an MCP client
// decides on it without reading the message.
const KindMeta = "outpost/kind"

type auditKey struct{}

// auditRecord collects one call's details.
type auditRecord struct {
	executor string
	fields   []zap.Field
	err      error
}

// note adds details to the call's audit line.
func note(ctx context.Context, executor string, fields ...zap.Field) {
	if r, ok := ctx.Value(auditKey{}).(*auditRecord); ok {
		if executor != "" {
			r.executor = executor
		}
		r.fields = append(r.fields, fields...)
	}
}

// auditMiddleware logs each tools/call and names a failure's kind in its
// result's _meta.
func (s *Server) auditMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		call, ok := req.(*mcp.CallToolRequest)
		if method != "tools/call" || !ok {
			return next(ctx, method, req)
		}
		rec := &auditRecord{}
		ctx = context.WithValue(ctx, auditKey{}, rec)
		start := time.Now()
		var res mcp.Result
		var err error
		if sess, serr := s.session(call.Session); serr != nil {
			res = failed(serr)
			rec.err = serr
		} else {
			slots := sess.calls
			if controlTools[call.Params.Name] {
				slots = sess.control
			}
			select {
			case slots <- struct{}{}:
				res, err = next(ctx, method, req)
				<-slots
			default:
				rec.err = errorf(ErrBusy, "this session has %d tool calls in flight, the most it may: wait for one to finish", MaxConcurrentCalls)
				res = failed(rec.err)
			}
		}
		fields := []zap.Field{zap.String("tool", call.Params.Name), zap.String("executor", rec.executor)}
		fields = append(fields, rec.fields...)
		fields = append(fields, zap.Duration("took", time.Since(start)))
		if sid := call.Session.ID(); sid != "" {
			fields = append(fields, zap.String("session", sid))
		}
		failure := err
		if r, ok := res.(*mcp.CallToolResult); ok && r != nil && r.IsError {
			failure = rec.err
			kind := kindName(rec.err)
			if rec.err == nil {
				kind = "invalid_argument" // the SDK refused the arguments by the schema
				failure = errors.New(errorText(r))
			}
			if r.Meta == nil {
				r.Meta = mcp.Meta{}
			}
			r.Meta[KindMeta] = kind
			fields = append(fields, zap.String("kind", kind))
		}
		if failure != nil {
			fields = append(fields, zap.NamedError("error", failure))
		}
		s.cfg.Log.Info("mcp tool call", fields...)
		return res, err
	}
}

// controlTools have slots of their own (MaxControlCalls), so that a
// session whose calls all wait (reads, runs) can still stop them.
var controlTools = map[string]bool{"terminate": true, "signal": true, "list": true}

// failed is a tool error result (its kind is added by the caller).
func failed(err error) *mcp.CallToolResult {
	r := &mcp.CallToolResult{}
	r.SetError(err)
	return r
}

func errorText(r *mcp.CallToolResult) string {
	for _, c := range r.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			return t.Text
		}
	}
	return "tool error"
}

// kindName names an error's kind for KindMeta.
func kindName(err error) string {
	for _, k := range []struct {
		err  error
		name string
	}{
		{ErrInvalidArgument, "invalid_argument"}, {ErrUnknownExecutor, "unknown_executor"},
		{ErrNotAllowed, "not_allowed"}, {ErrUnknownHandle, "unknown_handle"},
		{ErrTooManyHandles, "too_many_handles"}, {ErrEditMismatch, "edit_mismatch"},
		{ErrUnavailable, "unavailable"}, {ErrBusy, "busy"},
	} {
		if errors.Is(err, k.err) {
			return k.name
		}
	}
	if k := protocol.KindOf(err); k != "" {
		return string(k)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return "cancelled"
	}
	return "internal"
}

// addTool registers a tool whose handler's error is kept for the audit
// line and whose panic becomes an internal error, not a dead server.
func addTool[In, Out any](s *Server, t *mcp.Tool, h mcp.ToolHandlerFor[In, Out]) {
	mcp.AddTool(s.mcp, t, func(ctx context.Context, req *mcp.CallToolRequest, in In) (res *mcp.CallToolResult, out Out, err error) {
		defer func() {
			if p := recover(); p != nil {
				res, err = nil, fmt.Errorf("internal error in %s: %v", t.Name, p)
				s.cfg.Log.Error("mcp tool panicked", zap.String("tool", t.Name), zap.Any("panic", p), zap.Stack("stack"))
			}
			if r, ok := ctx.Value(auditKey{}).(*auditRecord); ok {
				r.err = err
			}
		}()
		return h(ctx, req, in)
	})
}
