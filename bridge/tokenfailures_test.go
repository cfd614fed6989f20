package bridge

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/outpost-exec/outpost/client"
)

type tokenClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *tokenClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *tokenClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// upgradeFrom opens a WebSocket to url from the loopback address src
// with the bearer token tok and returns the HTTP status of the upgrade
// (101 when it succeeded; the connection is then closed).
func upgradeFrom(t *testing.T, url, src, tok string) int {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	hc := &http.Client{Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPClient: hc, HTTPHeader: http.Header{"Authorization": {"Bearer " + tok}}})
	if err == nil {
		ws.Close(websocket.StatusNormalClosure, "")
		return http.StatusSwitchingProtocols
	}
	if resp == nil {
		t.Fatalf("upgrade from %s: %v", src, err)
	}
	return resp.StatusCode
}

// Over the bridge's real listener: wrong bearer tokens from one address
// get it refused (429, the right token too) for the rest of the window,
// while another address is served; the Stats count it.
func TestBridgeRefusesAnAddressThatSentTooManyWrongTokens(t *testing.T) {
	clock := &tokenClock{t: time.Unix(1_700_000_000, 0)}
	b, err := New(Config{
		Dial: func(context.Context, string) (*client.Remote, error) {
			return nil, errors.New("no executor in this test")
		},
		Token: "right", MaxFailedTokens: 3, FailureWindow: time.Minute, now: clock.now,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	l, err := b.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const attacker, other = "127.0.0.5", "127.0.0.6"
	for i := range 3 {
		if got := upgradeFrom(t, l.URL(), attacker, "guess"); got != http.StatusUnauthorized {
			t.Fatalf("wrong token %d: %d, want 401", i, got)
		}
	}
	if got := upgradeFrom(t, l.URL(), attacker, "right"); got != http.StatusTooManyRequests {
		t.Fatalf("right token from the blocked address: %d, want 429", got)
	}
	if got := upgradeFrom(t, l.URL(), other, "right"); got != http.StatusSwitchingProtocols {
		t.Fatalf("right token from another address: %d, want 101", got)
	}
	if st := b.Stats().TokenFailures; st.Failures != 3 || st.Blocked != 1 || st.Refusals != 1 {
		t.Fatalf("token failures %+v, want 3 recorded, 1 blocked, 1 refusal", st)
	}
	clock.advance(time.Minute)
	if got := upgradeFrom(t, l.URL(), attacker, "right"); got != http.StatusSwitchingProtocols {
		t.Fatalf("right token after the window: %d, want 101", got)
	}
}

// The failure limit's fields are filled by New and checked by Validate.
func TestTokenFailureConfig(t *testing.T) {
	good := DefaultConfig()
	good.Dial = func(context.Context, string) (*client.Remote, error) { return nil, nil }
	for name, mutate := range map[string]func(*Config){
		"MaxFailedTokens": func(c *Config) { c.MaxFailedTokens = 0 },
		"FailureWindow":   func(c *Config) { c.FailureWindow = -time.Second },
	} {
		c := good
		mutate(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	b, err := New(Config{Dial: good.Dial})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if got := b.auth.Failures.Config(); got.MaxFailures != DefaultMaxFailedTokens || got.Window != DefaultFailureWindow {
		t.Fatalf("limiter %+v, want the defaults", got)
	}
}
