package executor

import (
	"strings"
	"testing"

	"github.com/flynn/noise"

	"github.com/outpost-exec/outpost/identity"
)

// validateCase breaks one field of a good configuration; Validate must
// then fail naming want.
type validateCase[C any] struct {
	want   string
	mutate func(*C)
}

// checkValidate checks that good passes Validate and that each case
// fails it with an error naming its field.
func checkValidate[C interface{ Validate() error }](t *testing.T, good C, cases []validateCase[C]) {
	t.Helper()
	if err := good.Validate(); err != nil {
		t.Fatalf("good configuration refused: %v", err)
	}
	for _, tc := range cases {
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

func TestConfigValidate(t *testing.T) {
	checkValidate(t, DefaultConfig(), []validateCase[Config]{
		{"Backend", func(c *Config) { c.Backend = nil }},
		{"MaxSessions", func(c *Config) { c.MaxSessions = 0 }},
		{"MaxProcessesPerSession", func(c *Config) { c.MaxProcessesPerSession = -1 }},
		{"MaxFileBytes", func(c *Config) { c.MaxFileBytes = 0 }},
		{"MaxFileHandles", func(c *Config) { c.MaxFileHandles = 0 }},
		{"DetachedTTL", func(c *Config) { c.DetachedTTL = 0 }},
		{"ClosedRetention", func(c *Config) { c.ClosedRetention = -1 }},
		{"MaxConcurrentReads", func(c *Config) { c.MaxConcurrentReads = 0 }},
		{"SandboxHidden", func(c *Config) { c.SandboxHidden = []string{"relative"} }},
	})
}

func TestNativeConfigValidate(t *testing.T) {
	good := DefaultNativeConfig()
	good.Key = floodKey(t)
	checkValidate(t, good, []validateCase[NativeConfig]{
		{"NativeConfig.Key", func(c *NativeConfig) { c.Key = noise.DHKey{} }},
		{"NativeConfig.Mux", func(c *NativeConfig) { c.Mux.StreamWindow = 1 }},
		{"NativeConfig.MaxConnections", func(c *NativeConfig) { c.MaxConnections = 0 }},
		{"NativeConfig.MaxHandshakes", func(c *NativeConfig) { c.MaxHandshakes = 0 }},
		{"NativeConfig.MaxHandshakes", func(c *NativeConfig) { c.MaxHandshakes = c.MaxConnections }},
		{"NativeConfig.MaxHandshakesPerAddress", func(c *NativeConfig) { c.MaxHandshakesPerAddress = -1 }},
		{"NativeConfig.HandshakeTimeout", func(c *NativeConfig) { c.HandshakeTimeout = 0 }},
		{"NativeConfig.FirstByteTimeout", func(c *NativeConfig) { c.FirstByteTimeout = -1 }},
		{"NativeConfig.MaxFailedHandshakes", func(c *NativeConfig) { c.MaxFailedHandshakes = 0 }},
		{"NativeConfig.FailureWindow", func(c *NativeConfig) { c.FailureWindow = 0 }},
	})
}

func TestJoinConfigValidate(t *testing.T) {
	relayKey, err := identity.Generate()
	if err != nil {
		t.Fatal(err)
	}
	good := DefaultJoinConfig()
	good.RelayURL = "outpost://127.0.0.1:7100#" + relayKey.PublicKey().Fingerprint()
	good.Key, good.ID = floodKey(t), "e-1"
	checkValidate(t, good, []validateCase[JoinConfig]{
		{"JoinConfig.RelayURL", func(c *JoinConfig) { c.RelayURL = "" }},
		{"JoinConfig.RelayURL", func(c *JoinConfig) { c.RelayURL = "tcp://127.0.0.1:7100" }},
		{"JoinConfig.Key", func(c *JoinConfig) { c.Key = noise.DHKey{} }},
		{"JoinConfig.ID", func(c *JoinConfig) { c.ID = "" }},
		{"JoinConfig.Mux", func(c *JoinConfig) { c.Mux.MaxInboundStreams = 0 }},
		{"JoinConfig.MaxHandshakes", func(c *JoinConfig) { c.MaxHandshakes = 0 }},
		{"JoinConfig.MaxHandshakes", func(c *JoinConfig) { c.MaxHandshakes = DefaultMaxNativeConnections }},
		{"JoinConfig.MaxHandshakesPerAddress", func(c *JoinConfig) { c.MaxHandshakesPerAddress = 0 }},
		{"JoinConfig.HandshakeTimeout", func(c *JoinConfig) { c.HandshakeTimeout = -1 }},
		{"JoinConfig.FirstByteTimeout", func(c *JoinConfig) { c.FirstByteTimeout = 0 }},
	})
	// Zero fields are filled; negative ones are not.
	bare := JoinConfig{RelayURL: good.RelayURL, Key: good.Key, ID: good.ID}
	if err := bare.withDefaults().Validate(); err != nil {
		t.Fatalf("zero fields not filled: %v", err)
	}
	bare.HandshakeTimeout = -1
	if err := bare.withDefaults().Validate(); err == nil {
		t.Fatal("a negative HandshakeTimeout was replaced by the default")
	}
}

func TestWSConfigValidate(t *testing.T) {
	checkValidate(t, DefaultWSConfig(), []validateCase[WSConfig]{
		{"WSConfig.PingInterval", func(c *WSConfig) { c.PingInterval = 0 }},
		{"WSConfig.MaxMessageBytes", func(c *WSConfig) { c.MaxMessageBytes = -1 }},
	})
	if err := (WSConfig{}).withDefaults().Validate(); err != nil {
		t.Fatalf("the zero WSConfig, filled: %v", err)
	}
	srv, err := NewServer(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.ListenWS("127.0.0.1:0", WSConfig{PingInterval: -1}); err == nil || !strings.Contains(err.Error(), "PingInterval") {
		t.Fatalf("ListenWS with a negative PingInterval: %v", err)
	}
}
