//go:build !(linux || darwin || freebsd)

package executor

import (
	"testing"

	"github.com/outpost-exec/outpost/protocol"
)

func TestNewServerRefusesThisPlatform(t *testing.T) {
	s, err := NewServer(Config{})
	if s != nil || protocol.KindOf(err) != protocol.KindUnsupported {
		t.Fatalf("NewServer: %v, %v (kind %q), want kind unsupported", s, err, protocol.KindOf(err))
	}
}
