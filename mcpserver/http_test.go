package mcpserver

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/outpost-exec/outpost/client"
)

// unreachable is an executor that cannot be dialled: these tests are about
// the HTTP front, and the list tool needs no executor.
func unreachable(context.Context) (client.Environment, error) {
	return nil, errors.New("no executor in this test")
}

func httpServer(t *testing.T, token string) *httptest.Server {
	return httpServerWith(t, token, 0)
}

func httpServerWith(t *testing.T, token string, maxSessions int) *httptest.Server {
	t.Helper()
	srv, err := New(Config{Executors: []Executor{{ID: "e1", Dial: unreachable}}, Workspace: "/", MaxSessions: maxSessions})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	hs := httptest.NewServer(srv.HTTPHandler(HTTPOptions{Token: token}))
	t.Cleanup(hs.Close)
	return hs
}

const initBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`

func post(t *testing.T, url string, header map[string]string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(initBody))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res
}

func TestHTTPWantsTheBearerToken(t *testing.T) {
	hs := httpServer(t, "s3cret")
	for name, c := range map[string]struct {
		header map[string]string
		want   int
	}{
		"none":         {nil, http.StatusUnauthorized},
		"wrong":        {map[string]string{"Authorization": "Bearer s3cre"}, http.StatusUnauthorized},
		"not bearer":   {map[string]string{"Authorization": "Basic s3cret"}, http.StatusUnauthorized},
		"right":        {map[string]string{"Authorization": "Bearer s3cret"}, http.StatusOK},
		"cross origin": {map[string]string{"Authorization": "Bearer s3cret", "Origin": "http://evil.example"}, http.StatusForbidden},
		// A page on another local port is another origin too.
		"other port": {map[string]string{"Authorization": "Bearer s3cret", "Origin": "http://127.0.0.1:1"}, http.StatusForbidden},
		// DNS rebinding: a loopback server asked for a name that is not.
		"rebinding": {map[string]string{"Authorization": "Bearer s3cret", "Host": "evil.example"}, http.StatusForbidden},
	} {
		if got := post(t, hs.URL, c.header).StatusCode; got != c.want {
			t.Errorf("%s: status %d, want %d", name, got, c.want)
		}
	}
	res := post(t, hs.URL, map[string]string{"Authorization": "Bearer s3cret", "Origin": hs.URL})
	if res.StatusCode != http.StatusOK {
		t.Errorf("same origin: status %d", res.StatusCode)
	}
	if res := post(t, hs.URL, nil); res.Header.Get("WWW-Authenticate") == "" {
		t.Error("a 401 without WWW-Authenticate")
	}
}

// bearerTransport adds the token to every request of the SDK's client.
type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

func TestHTTPServesTheSDKClient(t *testing.T) {
	hs := httpServer(t, "tok")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: hs.URL, HTTPClient: &http.Client{Transport: bearerTransport{"tok"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil || len(tools.Tools) != 13 {
		t.Fatalf("%d tools, %v", len(tools.Tools), err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "list"})
	if err != nil || res.IsError {
		t.Fatalf("list: %v %+v", err, res)
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "run", Arguments: map[string]any{"argv": []string{"true"}}})
	if err != nil || !res.IsError || res.Meta[KindMeta] != "unavailable" {
		t.Fatalf("run on an unreachable executor: %v %+v", err, res)
	}
}

func TestConfigRefusesWhatCannotWork(t *testing.T) {
	for name, c := range map[string]Config{
		"no executors":   {},
		"duplicate id":   {Executors: []Executor{{ID: "a", Dial: unreachable}, {ID: "a", Dial: unreachable}}},
		"no dial":        {Executors: []Executor{{ID: "a"}}},
		"relative ws":    {Executors: []Executor{{ID: "a", Dial: unreachable}}, Workspace: "ws"},
		"bad mode":       {Executors: []Executor{{ID: "a", Dial: unreachable}}, AllowedSandboxes: []string{"root"}},
		"default banned": {Executors: []Executor{{ID: "a", Dial: unreachable}}, DefaultSandbox: "full-access"},
		"handles":        {Executors: []Executor{{ID: "a", Dial: unreachable}}, MaxHandles: 5000},
	} {
		if _, err := New(c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestHTTPBoundsTheSessions(t *testing.T) {
	hs := httpServerWith(t, "tok", 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	connect := func() (*mcp.ClientSession, error) {
		c := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil)
		return c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: hs.URL, HTTPClient: &http.Client{Transport: bearerTransport{"tok"}}, MaxRetries: -1}, nil)
	}
	a, err := connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	b, err := connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if c, err := connect(); err == nil {
		c.Close()
		t.Fatal("a third session was opened past MaxSessions 2")
	}
	res := post(t, hs.URL, map[string]string{"Authorization": "Bearer tok"})
	if res.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a new session past the bound: status %d", res.StatusCode)
	}
	// The sessions already open still work, and closing one makes room.
	if _, err := b.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	a.Close() // DELETE; the server forgets the session as it closes
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c, err := connect()
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a session closed: %v", err)
		}
	}
}

// Sessions sent initialize and never notifications/initialized count
// like any other.
func TestHTTPBoundsSessionsNeverInitialized(t *testing.T) {
	hs := httpServerWith(t, "tok", 2)
	for i := range 2 {
		if res := post(t, hs.URL, map[string]string{"Authorization": "Bearer tok"}); res.StatusCode != http.StatusOK {
			t.Fatalf("initialize %d: status %d", i, res.StatusCode)
		}
	}
	if res := post(t, hs.URL, map[string]string{"Authorization": "Bearer tok"}); res.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("initialize past MaxSessions: status %d", res.StatusCode)
	}
}
