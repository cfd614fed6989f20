//go:build !(linux || darwin || freebsd)

package engine

import (
	"context"
	"testing"

	"github.com/outpost-exec/outpost/protocol"
)

func TestStartIsRefusedAsUnsupported(t *testing.T) {
	_, err := NewLocalBackend().Start(context.Background(), Spec{Argv: []string{"cmd"}})
	if protocol.KindOf(err) != protocol.KindUnsupported {
		t.Fatalf("Start: %v (kind %q), want kind unsupported", err, protocol.KindOf(err))
	}
}
