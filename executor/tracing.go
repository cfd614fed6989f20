package executor

import (
	"context"
	"path/filepath"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/outpost-exec/outpost/engine"
	"github.com/outpost-exec/outpost/internal/tracing"
	"github.com/outpost-exec/outpost/protocol"
)

// Spans: see package internal/tracing. The executor records them only when
// Config.TracerProvider is set.

// handshakeKey carries a native connection's handshake timing to its
// initialize, where the client's trace context first arrives.
type handshakeKey struct{}

type handshakeInfo struct {
	start, end time.Time
	via        string // "tcp", "unix" or "relay"
	client     string // the client key's fingerprint
}

// clientFingerprint is the fingerprint of the client key ctx's connection
// authenticated with, or "" (a WebSocket or stdio connection has none).
func clientFingerprint(ctx context.Context) string {
	h, _ := ctx.Value(handshakeKey{}).(handshakeInfo)
	return h.client
}

func withHandshake(ctx context.Context, h handshakeInfo) context.Context {
	return context.WithValue(ctx, handshakeKey{}, h)
}

// traceHandshake records the connection's handshake as a child of the
// client's connect span.
func (c *serverConn) traceHandshake(p protocol.InitializeParams) {
	tr := tracing.Tracer(c.srv.cfg.TracerProvider)
	h, ok := c.ctx.Value(handshakeKey{}).(handshakeInfo)
	if tr == nil || !ok {
		return
	}
	ctx := tracing.Extract(context.Background(), p.TraceParent, p.TraceState)
	_, span := tr.Start(ctx, "outpost.handshake", trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(h.start),
		trace.WithAttributes(attribute.String("outpost.via", h.via), attribute.String("outpost.client", p.ClientName)))
	span.End(trace.WithTimestamp(h.end))
}

// startSpan opens the process/start span for p, as a child of the
// caller's span when p carries trace context. It returns a nil span when
// tracing is off.
func (s *Session) startSpan(ctx context.Context, p *protocol.ExecParams) (context.Context, trace.Span) {
	tr := tracing.Tracer(s.srv.cfg.TracerProvider)
	if tr == nil {
		return ctx, nil
	}
	ctx = tracing.Extract(ctx, p.TraceParent, p.TraceState)
	attrs := []attribute.KeyValue{attribute.String("outpost.process_id", p.ProcessID), attribute.Bool("outpost.tty", p.Tty)}
	if len(p.Argv) > 0 {
		// The program's name only: arguments may hold secrets.
		attrs = append(attrs, attribute.String("process.executable.name", filepath.Base(p.Argv[0])))
	}
	return tr.Start(ctx, protocol.MethodProcessStart, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
}

// endSpan ends span (if any), recording err.
func endSpan(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// processSpan opens the span of a running process; finishProcessSpan ends
// it when the process closes.
func (s *Session) processSpan(ctx context.Context, pid int, sandboxType string) trace.Span {
	tr := tracing.Tracer(s.srv.cfg.TracerProvider)
	if tr == nil {
		return nil
	}
	_, span := tr.Start(ctx, "process", trace.WithAttributes(attribute.Int("process.pid", pid), attribute.String("outpost.sandbox", sandboxType)))
	return span
}

func finishProcessSpan(span trace.Span, snap engine.Snapshot) {
	span.SetAttributes(
		attribute.Int("process.exit.code", int(snap.ExitCode)),
		attribute.Int("outpost.signal", int(snap.Signal)),
		attribute.Bool("outpost.sandbox_denied", snap.SandboxDenied),
		attribute.Int64("outpost.evicted_bytes", int64(snap.EvictedBytes)),
	)
	if snap.ExitCode != 0 || snap.SandboxDenied {
		span.SetStatus(codes.Error, "the process failed")
	}
	span.End()
}
