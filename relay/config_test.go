package relay

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/flynn/noise"
)

func TestConfigValidate(t *testing.T) {
	tokens, err := OpenStore(filepath.Join(t.TempDir(), "relay.db"))
	if err != nil {
		t.Fatal(err)
	}
	good := DefaultConfig()
	good.Key, good.Tokens = key(t).Keypair(), tokens
	if err := good.Validate(); err != nil {
		t.Fatalf("the default configuration with a key and a store: %v", err)
	}
	for _, tc := range []struct {
		want   string
		mutate func(*Config)
	}{
		{"Key", func(c *Config) { c.Key = noise.DHKey{} }},
		{"Tokens", func(c *Config) { c.Tokens = nil }},
		{"Mux", func(c *Config) { c.Mux.KeepAlive = 0 }},
		{"MaxExecutors", func(c *Config) { c.MaxExecutors = 0 }},
		{"MaxConnections", func(c *Config) { c.MaxConnections = -1 }},
		{"MaxHandshakes", func(c *Config) { c.MaxHandshakes = 0 }},
		{"HandshakeTimeout", func(c *Config) { c.HandshakeTimeout = 0 }},
		{"MaxStreamsPerExecutor", func(c *Config) { c.MaxStreamsPerExecutor = 0 }},
		{"MaxFailedHandshakes", func(c *Config) { c.MaxFailedHandshakes = -1 }},
		{"FailureWindow", func(c *Config) { c.FailureWindow = 0 }},
		{"LivenessTimeout", func(c *Config) { c.LivenessTimeout = 0 }},
		{"RevocationPoll", func(c *Config) { c.RevocationPoll = -1 }},
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
	// The zero value of every field with a default is filled.
	srv, err := NewServer(Config{Key: good.Key, Tokens: tokens})
	if err != nil {
		t.Fatal(err)
	}
	got, want := srv.cfg, good
	got.Logger, want.Logger = nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("NewServer filled %+v, want DefaultConfig's values %+v", got, want)
	}
	// A negative bound is refused, not replaced by the default.
	if _, err := NewServer(Config{Key: good.Key, Tokens: tokens, MaxExecutors: -1}); err == nil || !strings.Contains(err.Error(), "MaxExecutors") {
		t.Fatalf("NewServer with MaxExecutors -1: %v", err)
	}
	if _, err := NewServer(Config{Key: good.Key}); err == nil || !strings.Contains(err.Error(), "Tokens") {
		t.Fatalf("NewServer without a token store: %v", err)
	}
}
