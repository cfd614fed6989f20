package client

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/outpost-exec/outpost/internal/testdeps"
)

// clientModules is every module a program importing package client may
// link. The in-process executor (package local) and the OTLP exporter
// (internal/tracing) stay out: they would bring the sandbox, PTYs,
// Prometheus, the OpenTelemetry SDK, gRPC and protobuf. Add to this list
// only what the client itself needs.
var clientModules = map[string]bool{
	"github.com/outpost-exec/outpost":     true,
	"github.com/flynn/noise":              true, // Noise
	"golang.org/x/crypto":                 true, // Noise's ciphers, the key files
	"golang.org/x/sys":                    true,
	"github.com/vmihailenco/msgpack/v5":   true, // its messages
	"github.com/vmihailenco/tagparser/v2": true, // msgpack's
	"github.com/coder/websocket":          true, // ws:// and outpost+ws:// relays
	"go.opentelemetry.io/otel":            true, // the trace API: attributes, codes, propagation
	"go.opentelemetry.io/otel/trace":      true,
	"github.com/cespare/xxhash/v2":        true, // otel/attribute's
	"github.com/zeebo/xxh3":               true, // transfers' end-to-end digest
	"github.com/klauspost/cpuid/v2":       true, // xxh3's choice of AVX2/AVX-512
}

func TestClientLinksOnlyTheModulesItNeeds(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		testdeps.Missing(t, "go", "the go tool is not on PATH, so the client's module graph cannot be listed")
	}
	out, err := exec.Command(goTool, "list", "-deps", "-f", "{{with .Module}}{{.Path}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	seen := map[string]bool{}
	for _, m := range strings.Fields(string(out)) {
		if !clientModules[m] && !seen[m] {
			t.Errorf("package client links module %s, which is not in the allow-list", m)
		}
		seen[m] = true
	}
	if !seen["github.com/flynn/noise"] {
		t.Fatalf("go list named no noise module; its output: %q", out)
	}
}
