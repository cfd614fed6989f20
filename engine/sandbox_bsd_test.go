//go:build darwin || freebsd

package engine

import (
	"context"
	"testing"

	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/sandbox"
)

// A sandboxed start is refused before its setup runs: never run
// unsandboxed what asked for a sandbox.
func TestSandboxedStartIsRefusedAsUnsupported(t *testing.T) {
	setupRan := false
	_, err := NewLocalBackend().Start(context.Background(), Spec{
		Argv:         []string{"/bin/echo", "hi"},
		Path:         "/bin/echo",
		Sandboxed:    true,
		SandboxSetup: func() (sandbox.Launch, error) { setupRan = true; return sandbox.Launch{}, nil },
	})
	if protocol.KindOf(err) != protocol.KindUnsupported {
		t.Fatalf("Start: %v (kind %q), want kind unsupported", err, protocol.KindOf(err))
	}
	if setupRan {
		t.Fatal("the sandbox setup ran")
	}
}
