// Package tracectx carries W3C trace context through outpost's requests
// and names outpost's tracer. It uses only the OpenTelemetry API (trace
// and propagation), never the SDK or an exporter, so that package client —
// which a program embeds — does not pull them in; exporting is package
// tracing's, for the command line. See package tracing for the spans.
package tracectx

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// InstrumentationName names outpost's tracers.
const InstrumentationName = "github.com/outpost-exec/outpost"

var propagator = propagation.TraceContext{}

// Inject returns the W3C traceparent and tracestate of ctx's span, or
// empty strings when ctx carries no valid span.
func Inject(ctx context.Context) (traceparent, tracestate string) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return "", ""
	}
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	return c["traceparent"], c["tracestate"]
}

// Extract returns ctx with the remote span context described by
// traceparent and tracestate; malformed values are ignored (a bad header
// must not fail a request).
func Extract(ctx context.Context, traceparent, tracestate string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent, "tracestate": tracestate})
}

// Tracer returns tp's outpost tracer, or nil when tp is nil.
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer(InstrumentationName)
}
