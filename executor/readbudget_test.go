package executor

import (
	"testing"

	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/transport"
)

// The read budgets' settings: defaults, zero filled, and a budget that
// could never hold a message of the largest size refused.
func TestReadBudgetSettings(t *testing.T) {
	d := DefaultNativeConfig()
	if d.MaxMessageBytes != protocol.MaxMessageBytes || d.ConnectionReadBytes != transport.DefaultConnectionReadBytes {
		t.Fatalf("NativeConfig defaults: %d, %d", d.MaxMessageBytes, d.ConnectionReadBytes)
	}
	if o := (NativeConfig{}).withDefaults(); o.MaxMessageBytes != d.MaxMessageBytes || o.ConnectionReadBytes != d.ConnectionReadBytes {
		t.Fatalf("zero fields not filled: %d, %d", o.MaxMessageBytes, o.ConnectionReadBytes)
	}
	good := DefaultNativeConfig()
	good.Key = floodKey(t)
	checkValidate(t, good, []validateCase[NativeConfig]{
		{"NativeConfig.MaxMessageBytes", func(c *NativeConfig) { c.MaxMessageBytes = -1 }},
		{"NativeConfig.MaxMessageBytes", func(c *NativeConfig) { c.MaxMessageBytes = protocol.MaxMessageBytes + 1 }},
		{"NativeConfig.ConnectionReadBytes", func(c *NativeConfig) { c.ConnectionReadBytes = int64(c.MaxMessageBytes) - 1 }},
	})
	checkValidate(t, DefaultConfig(), []validateCase[Config]{
		{"MessageReadBytes", func(c *Config) { c.MessageReadBytes = protocol.MaxMessageBytes - 1 }},
	})
	if DefaultConfig().MessageReadBytes != transport.DefaultProcessReadBytes {
		t.Fatal("Config.MessageReadBytes default")
	}
	cfg := DefaultConfig()
	cfg.MessageReadBytes = 0
	srv, err := NewServer(cfg)
	if err != nil || srv.reads.Limit() != transport.DefaultProcessReadBytes {
		t.Fatalf("MessageReadBytes 0: %v, limit %d", err, srv.reads.Limit())
	}
}
