package transport

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"testing"

	"github.com/outpost-exec/outpost/identity"
)

func TestParseURLAcceptsEveryKindOfTarget(t *testing.T) {
	k, err := NoiseSuite.GenerateKeypair(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var key identity.PublicKey
	copy(key[:], k.Public)
	fp := key.Fingerprint()
	cases := []struct {
		in      string
		want    URL // raw is filled in
		network string
	}{
		{"tcp://127.0.0.1:7000", URL{Scheme: SchemeTCP, Addr: "127.0.0.1:7000"}, "tcp"},
		{"tcp://exec.example.com:7000#" + fp, URL{Scheme: SchemeTCP, Addr: "exec.example.com:7000", Fingerprint: fp, Key: key}, "tcp"},
		{"tcp://[::1]:1", URL{Scheme: SchemeTCP, Addr: "[::1]:1"}, "tcp"},
		{"tcp://:7443", URL{Scheme: SchemeTCP, Addr: ":7443"}, "tcp"},
		{"tcp://0.0.0.0:0", URL{Scheme: SchemeTCP, Addr: "0.0.0.0:0"}, "tcp"},
		{"tcp://h:65535#", URL{Scheme: SchemeTCP, Addr: "h:65535"}, "tcp"}, // an empty fragment is no pin
		{"unix:///run/outpost.sock", URL{Scheme: SchemeUnix, Addr: "/run/outpost.sock"}, "unix"},
		{"unix:///run/outpost.sock#" + fp, URL{Scheme: SchemeUnix, Addr: "/run/outpost.sock", Fingerprint: fp, Key: key}, "unix"},
		{"ws://127.0.0.1:8080", URL{Scheme: SchemeWS, Addr: "127.0.0.1:8080"}, "tcp"},
		{"ws://localhost:8080/", URL{Scheme: SchemeWS, Addr: "localhost:8080", Path: "/"}, "tcp"},
		{"ws://[::1]:8080/exec", URL{Scheme: SchemeWS, Addr: "[::1]:8080", Path: "/exec"}, "tcp"},
		{"stdio:///usr/bin/outpost", URL{Scheme: SchemeStdio, Addr: "/usr/bin/outpost"}, ""},
		{"stdio://outpost", URL{Scheme: SchemeStdio, Addr: "outpost"}, ""},
		{"outpost://relay.example.com:7443#" + fp, URL{Scheme: SchemeRelay, Addr: "relay.example.com:7443", Fingerprint: fp, Key: key}, "tcp"},
		{"outpost+ws://10.0.0.1:8080#" + fp, URL{Scheme: SchemeRelayWS, Addr: "10.0.0.1:8080", Fingerprint: fp, Key: key}, "tcp"},
	}
	for _, c := range cases {
		got, err := ParseURL(c.in)
		if err != nil {
			t.Errorf("ParseURL(%q): %v", c.in, err)
			continue
		}
		c.want.raw = c.in
		if got != c.want {
			t.Errorf("ParseURL(%q) = %+v, want %+v", c.in, got, c.want)
		}
		if got.String() != c.in {
			t.Errorf("ParseURL(%q).String() = %q", c.in, got.String())
		}
		if base, _, _ := strings.Cut(c.in, "#"); got.Base() != base {
			t.Errorf("ParseURL(%q).Base() = %q, want %q", c.in, got.Base(), base)
		}
		if got.Network() != c.network {
			t.Errorf("ParseURL(%q).Network() = %q, want %q", c.in, got.Network(), c.network)
		}
		if got.HasKey() != (c.want.Fingerprint != "") || got.IsRelay() != (c.want.Scheme == SchemeRelay || c.want.Scheme == SchemeRelayWS) {
			t.Errorf("ParseURL(%q): HasKey %v, IsRelay %v", c.in, got.HasKey(), got.IsRelay())
		}
	}
}

func TestParseURLRefusesMalformedURLsNamingTheFormExpected(t *testing.T) {
	k, err := NoiseSuite.GenerateKeypair(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var key identity.PublicKey
	copy(key[:], k.Public)
	fp := key.Fingerprint()
	cases := []struct {
		in      string
		schemes []string
		scheme  string // URLErrorScheme: "" for an unsupported scheme
		want    string // in the message
	}{
		{"http://x", nil, "", "unsupported URL `http://x`; expected `tcp://HOST:PORT`, `unix:///path`, `ws://HOST:PORT`, `stdio:///path/to/outpost`, `outpost://HOST:PORT#<fingerprint>` or `outpost+ws://HOST:PORT#<fingerprint>`"},
		{"", nil, "", "unsupported URL ``"},
		{"127.0.0.1:80", nil, "", "unsupported URL"},
		{"TCP://127.0.0.1:80", nil, "", "unsupported URL"},
		{"tcp:/127.0.0.1:80", nil, "", "unsupported URL"},
		{"wss://127.0.0.1:443", nil, "", "unsupported URL"},
		{"ws://127.0.0.1:80", []string{SchemeTCP, SchemeUnix}, "", "unsupported URL `ws://127.0.0.1:80`; expected `tcp://HOST:PORT` or `unix:///path`"},
		{"outpost://h:1#" + fp, []string{SchemeTCP}, "", "expected `tcp://HOST:PORT`"},

		{"tcp://nohostport", nil, SchemeTCP, "invalid tcp URL `tcp://nohostport`; expected `tcp://HOST:PORT`"},
		{"tcp://h:", nil, SchemeTCP, "invalid tcp URL"},
		{"tcp://h:http", nil, SchemeTCP, "invalid tcp URL"},
		{"tcp://h:65536", nil, SchemeTCP, "invalid tcp URL"},
		{"tcp://h:-1", nil, SchemeTCP, "invalid tcp URL"},
		{"tcp://h:1/path", nil, SchemeTCP, "invalid tcp URL"},
		{"tcp://user@h:1", nil, SchemeTCP, "invalid tcp URL"},
		{"tcp://::1:80", nil, SchemeTCP, "invalid tcp URL"},
		{"tcp://h:1#short", nil, SchemeTCP, "tcp URL `tcp://h:1#short`: invalid key fingerprint"},
		{"unix://relative", nil, SchemeUnix, "invalid unix URL `unix://relative`; expected `unix:///path`"},
		{"unix://", nil, SchemeUnix, "invalid unix URL"},
		{"unix:///s#nope", nil, SchemeUnix, "invalid key fingerprint"},
		{"ws://localhost", nil, SchemeWS, "invalid websocket URL `ws://localhost`; expected `ws://HOST:PORT`"},
		{"ws://", nil, SchemeWS, "invalid websocket URL"},
		{"ws://h:1/a b", nil, SchemeWS, "invalid websocket URL"},
		{"ws://h:1#" + fp, nil, SchemeWS, "carries no key; drop its #fragment"},
		{"stdio://", nil, SchemeStdio, "invalid stdio URL"},
		{"outpost://relay:7443", nil, SchemeRelay, "relay URL `outpost://relay:7443` lacks the relay's key fingerprint (#...)"},
		{"outpost+ws://relay:8080#", nil, SchemeRelayWS, "lacks the relay's key fingerprint"},
		{"outpost://relay#" + fp, nil, SchemeRelay, "invalid relay URL `outpost://relay#" + fp + "`; expected `outpost://HOST:PORT#<fingerprint>` or `outpost+ws://HOST:PORT#<fingerprint>`"},
		{"outpost://relay:7443/x#" + fp, nil, SchemeRelay, "invalid relay URL"},
		{"outpost://relay:7443#not-a-key", nil, SchemeRelay, "invalid key fingerprint"},
	}
	for _, c := range cases {
		u, err := ParseURL(c.in, c.schemes...)
		if err == nil {
			t.Errorf("ParseURL(%q, %v) = %+v, want an error", c.in, c.schemes, u)
			continue
		}
		var ue *URLError
		if !errors.As(err, &ue) || ue.URL != c.in {
			t.Errorf("ParseURL(%q): %T %v, want a *URLError for it", c.in, err, err)
		}
		if got := URLErrorScheme(err); got != c.scheme {
			t.Errorf("ParseURL(%q): URLErrorScheme %q, want %q (%v)", c.in, got, c.scheme, err)
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseURL(%q): %q lacks %q", c.in, err, c.want)
		}
	}
	if URLErrorScheme(errors.New("other")) != "" || URLErrorScheme(nil) != "" {
		t.Error("URLErrorScheme of a non-URL error")
	}
}

func TestURLDialRefusesMessageTransports(t *testing.T) {
	for _, s := range []string{"ws://127.0.0.1:1", "stdio:///bin/true"} {
		u, err := ParseURL(s)
		if err != nil {
			t.Fatal(err)
		}
		if c, err := u.Dial(context.Background()); err == nil {
			c.Close()
			t.Errorf("%s dialled as a byte stream", s)
		}
	}
}
