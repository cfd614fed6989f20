package tracing

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

func TestInjectExtractRoundTrip(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	ctx, span := tp.Tracer("t").Start(context.Background(), "s")
	defer span.End()
	tparent, _ := Inject(ctx)
	if tparent == "" {
		t.Fatal("no traceparent for a live span")
	}
	got := trace.SpanContextFromContext(Extract(context.Background(), tparent, ""))
	if !got.IsRemote() || got.TraceID() != span.SpanContext().TraceID() || got.SpanID() != span.SpanContext().SpanID() {
		t.Fatalf("round trip: %v", got)
	}
}

// A malformed header from a client must not fail its request, nor plant a
// bogus parent.
func TestMalformedTraceparentIsIgnored(t *testing.T) {
	for _, tp := range []string{"garbage", "00-00000000000000000000000000000000-0000000000000000-01", "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra\x00"} {
		if sc := trace.SpanContextFromContext(Extract(context.Background(), tp, "k=\x00")); sc.IsValid() {
			t.Errorf("%q gave a valid parent %v", tp, sc)
		}
	}
	if p, s := Inject(context.Background()); p != "" || s != "" {
		t.Fatalf("no span, yet %q %q", p, s)
	}
}

func TestFromEnvIsOffWithoutAnEndpoint(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	tp, shutdown, err := FromEnv(context.Background(), "x")
	if tp != nil || err != nil || shutdown(context.Background()) != nil {
		t.Fatalf("%v %v", tp, err)
	}
}
