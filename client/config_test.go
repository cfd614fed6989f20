package client

import (
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	good := DefaultConfig()
	if err := good.Validate(); err != nil {
		t.Fatalf("the default configuration: %v", err)
	}
	withKey := good
	withKey.Key, withKey.KeyFile = newKey(t), ""
	if err := withKey.Validate(); err != nil {
		t.Fatalf("a Key without a KeyFile: %v", err)
	}
	for _, tc := range []struct {
		want   string
		mutate func(*Config)
	}{
		{"ClientName", func(c *Config) { c.ClientName = "" }},
		{"KeyFile", func(c *Config) { c.KeyFile = "" }},
		{"KnownExecutors", func(c *Config) { c.KnownExecutors = "" }},
		{"Pin", func(c *Config) { c.Pin = "not-a-fingerprint" }},
		{"Mux", func(c *Config) { c.Mux.StreamWindow = 1 }},
		{"RecoveryTimeout", func(c *Config) { c.RecoveryTimeout = 0 }},
		{"OfflineGrace", func(c *Config) { c.OfflineGrace = -time.Second }},
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
}

// Dial fills the zero fields from DefaultConfig, and refuses what is
// invalid (a negative bound is not replaced by its default) before it
// dials anything.
func TestDialFillsZeroFieldsAndValidates(t *testing.T) {
	got := Config{}.withDefaults()
	want := DefaultConfig()
	if got.ClientName != want.ClientName || got.KeyFile != want.KeyFile || got.KnownExecutors != want.KnownExecutors ||
		got.Mux != want.Mux || got.RecoveryTimeout != want.RecoveryTimeout || got.OfflineGrace != want.OfflineGrace {
		t.Fatalf("filled %+v, want %+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Fatal(err)
	}
	_, err := Dial(ctxT(t), "tcp://127.0.0.1:1", Config{Key: newKey(t), RecoveryTimeout: -time.Second})
	if err == nil || !strings.Contains(err.Error(), "RecoveryTimeout") {
		t.Fatalf("Dial with a negative RecoveryTimeout: %v", err)
	}
}
