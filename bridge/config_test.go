package bridge

import (
	"context"
	"strings"
	"testing"

	"github.com/outpost-exec/outpost/client"
)

func TestConfigValidate(t *testing.T) {
	good := DefaultConfig()
	good.Dial = func(context.Context, string) (*client.Remote, error) { return nil, nil }
	if err := good.Validate(); err != nil {
		t.Fatalf("the default configuration with a Dial: %v", err)
	}
	for _, tc := range []struct {
		want   string
		mutate func(*Config)
	}{
		{"Dial", func(c *Config) { c.Dial = nil }},
		{"MaxConnections", func(c *Config) { c.MaxConnections = 0 }},
		{"MaxSessions", func(c *Config) { c.MaxSessions = -1 }},
		{"MaxProcessesPerSession", func(c *Config) { c.MaxProcessesPerSession = 0 }},
		{"DetachedTTL", func(c *Config) { c.DetachedTTL = 0 }},
		{"EventQueue", func(c *Config) { c.EventQueue = 0 }},
		{"MaxConcurrentCalls", func(c *Config) { c.MaxConcurrentCalls = -1 }},
		{"PingInterval", func(c *Config) { c.PingInterval = 0 }},
		{"DialTimeout", func(c *Config) { c.DialTimeout = -1 }},
		{"MaxMessageBytes", func(c *Config) { c.MaxMessageBytes = 0 }},
	} {
		c := good
		tc.mutate(&c)
		err := c.Validate()
		if err == nil {
			t.Errorf("%s: accepted", tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %q does not name it", tc.want, err)
		}
	}
	// New fills zero fields, and refuses a negative one.
	b, err := New(Config{Dial: good.Dial})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	got := b.cfg
	if got.MaxConnections != DefaultMaxConnections || got.MaxSessions != DefaultMaxSessions ||
		got.MaxProcessesPerSession != DefaultMaxProcessesPerSession || got.DetachedTTL != DefaultDetachedTTL ||
		got.EventQueue != DefaultEventQueue || got.MaxConcurrentCalls != DefaultMaxConcurrentCalls ||
		got.PingInterval != DefaultPingInterval || got.DialTimeout != DefaultDialTimeout ||
		got.MaxMessageBytes != good.MaxMessageBytes || got.Logger == nil {
		t.Fatalf("New filled %+v", got)
	}
	if _, err := New(Config{Dial: good.Dial, DetachedTTL: -1}); err == nil || !strings.Contains(err.Error(), "DetachedTTL") {
		t.Fatalf("New with a negative DetachedTTL: %v", err)
	}
}
