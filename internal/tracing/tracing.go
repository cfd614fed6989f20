// Package tracing carries W3C trace context through outpost's requests and
// sets up OpenTelemetry export for the command line. The propagation itself
// is package tracectx's, which uses the OpenTelemetry API alone: package
// client imports that one, so a program embedding the client does not link
// the SDK and the OTLP exporter (and gRPC, protobuf) that FromEnv needs.
//
// Trace context travels in request params (InitializeParams and ExecParams
// carry traceparent and tracestate), so it is inside the Noise channel: a
// relay splicing the stream never sees it. Spans:
//
//	client    outpost.connect      dial, Noise handshake, initialize
//	client    process/start        the start request
//	executor  outpost.handshake    accept to handshake done (native
//	                               transport), recorded at initialize as a
//	                               child of the client's connect span
//	executor  process/start        request to spawn (or refusal)
//	executor  process              spawn to close: exit code, signal,
//	                               sandbox denial, evicted output
//
// A nil TracerProvider in a Config means no spans and no cost.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/outpost-exec/outpost/internal/tracing/tracectx"
)

// InstrumentationName names outpost's tracers.
const InstrumentationName = tracectx.InstrumentationName

// Inject, Extract and Tracer are package tracectx's (API only), here for
// the executor and the command line, which import this package anyway.

// Inject returns the W3C traceparent and tracestate of ctx's span, or
// empty strings when ctx carries no valid span.
func Inject(ctx context.Context) (traceparent, tracestate string) { return tracectx.Inject(ctx) }

// Extract returns ctx with the remote span context described by
// traceparent and tracestate; malformed values are ignored.
func Extract(ctx context.Context, traceparent, tracestate string) context.Context {
	return tracectx.Extract(ctx, traceparent, tracestate)
}

// Tracer returns tp's outpost tracer, or nil when tp is nil.
func Tracer(tp trace.TracerProvider) trace.Tracer { return tracectx.Tracer(tp) }

// FromEnv builds a TracerProvider exporting over OTLP/HTTP when the
// standard OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
// is set (the exporter reads the other OTEL_EXPORTER_OTLP_* variables
// itself), and returns nil otherwise. shutdown flushes pending spans.
func FromEnv(ctx context.Context, service string) (tp trace.TracerProvider, shutdown func(context.Context) error, err error) {
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return nil, func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(semconv.ServiceName(service)))
	if err != nil && !errors.Is(err, resource.ErrSchemaURLConflict) {
		return nil, nil, err
	}
	p := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return p, p.Shutdown, nil
}
