package executor

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/protocol"
)

// echoed is what the echo handler saw of a request.
type echoed struct {
	Method string      `json:"method"`
	Path   string      `json:"path"`
	Header http.Header `json:"header"`
	Host   string      `json:"host"`
	Body   string      `json:"body"`
}

// echoHandler answers with the request it received, as JSON.
func echoHandler(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	b, _ := json.Marshal(echoed{Method: r.Method, Path: r.URL.RequestURI(), Header: r.Header, Host: r.Host, Body: string(body)})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Add("X-Multi", "a")
	w.Header().Add("X-Multi", "b")
	w.WriteHeader(http.StatusCreated)
	w.Write(b)
}

func httpParams(url string, extra map[string]any) map[string]any {
	p := map[string]any{"method": "GET", "url": url, "requestId": "r"}
	for k, v := range extra {
		p[k] = v
	}
	return p
}

func resultBody(t *testing.T, res map[string]any) string {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(res["bodyBase64"].(string))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func decodeEcho(t *testing.T, res map[string]any) echoed {
	t.Helper()
	var e echoed
	if err := json.Unmarshal([]byte(resultBody(t, res)), &e); err != nil {
		t.Fatalf("echo body: %v", err)
	}
	return e
}

// headerValues are a result's values for a (lower-case) name.
func headerValues(res map[string]any, name string) []string {
	var out []string
	for _, h := range res["headers"].([]any) {
		hm := h.(map[string]any)
		if hm["name"] == name {
			out = append(out, hm["value"].(string))
		}
	}
	return out
}

func TestHTTPRequestBuffered(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(echoHandler))
	defer up.Close()
	r := dialRaw(t, newTestServer(t, nil, WSConfig{}).url, nil)
	r.init()

	res := r.result("http/request", httpParams(up.URL+"/echo?q=1", map[string]any{
		"method":     "POST",
		"headers":    []map[string]any{{"name": "X-A", "value": "1"}, {"name": "x-a", "value": "2"}, {"name": "Host", "value": "example.test"}},
		"bodyBase64": base64.StdEncoding.EncodeToString([]byte("hello")),
	}))
	if res["status"].(float64) != 201 {
		t.Errorf("status %v, want 201", res["status"])
	}
	if got := headerValues(res, "x-multi"); strings.Join(got, ",") != "a,b" {
		t.Errorf("x-multi %v, want a then b (names lower case, repeats kept)", got)
	}
	if got := headerValues(res, "content-type"); len(got) != 1 || got[0] != "application/json" {
		t.Errorf("content-type %v", got)
	}
	e := decodeEcho(t, res)
	if e.Method != "POST" || e.Path != "/echo?q=1" || e.Body != "hello" || e.Host != "example.test" {
		t.Errorf("upstream saw %+v", e)
	}
	if got := strings.Join(e.Header["X-A"], ","); got != "1,2" {
		t.Errorf("repeated request header arrived as %q, want 1,2", got)
	}
	// codex's defaults: Accept */*, no User-Agent.
	if got := e.Header["Accept"]; len(got) != 1 || got[0] != "*/*" {
		t.Errorf("Accept %v, want */*", got)
	}
	if got, ok := e.Header["User-Agent"]; ok {
		t.Errorf("a User-Agent was sent: %v", got)
	}

	// An empty body is "" on the wire, never null.
	m := r.call("http/request", httpParams(up.URL, map[string]any{"method": "HEAD"}))
	if m["result"].(map[string]any)["bodyBase64"] != "" {
		t.Errorf("HEAD body %v, want \"\"", m["result"])
	}
	// The largest timeoutMs is no bound, not an overflow to "at once".
	r.result("http/request", httpParams(up.URL, map[string]any{"timeoutMs": uint64(1<<64 - 1)}))
}

// A gzip body arrives decoded, as codex's client decodes it, also when
// the caller sent its own Accept-Encoding (net/http then leaves it).
func TestHTTPRequestGzipDecoded(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		zw.Write([]byte("zipped"))
		zw.Close()
		w.Header().Set("Content-Encoding", "gzip")
		w.Write(b.Bytes())
	}))
	defer up.Close()
	r := dialRaw(t, newTestServer(t, nil, WSConfig{}).url, nil)
	r.init()
	for _, hdrs := range [][]map[string]any{nil, {{"name": "Accept-Encoding", "value": "gzip"}}} {
		res := r.result("http/request", httpParams(up.URL, map[string]any{"headers": hdrs}))
		if got := resultBody(t, res); got != "zipped" || len(headerValues(res, "content-encoding")) != 0 {
			t.Errorf("headers %v: body %q, headers %v", hdrs, got, res["headers"])
		}
		r.result("http/request", httpParams(up.URL, map[string]any{"headers": hdrs, "streamResponse": true}))
		p := params(r.note())
		if data, _ := base64.StdEncoding.DecodeString(p["deltaBase64"].(string)); string(data) != "zipped" {
			t.Errorf("headers %v: streamed %q", hdrs, data)
		}
		if p := params(r.note()); p["done"] != true || p["error"] != nil {
			t.Errorf("headers %v: last delta %v", hdrs, p)
		}
	}
}

// The reply with the headers comes first; each delta is sent as its bytes
// arrive (the server writes the next event only once the client has the
// last), seq counts from 1, and the last delta is done.
func TestHTTPRequestStreamedInOrder(t *testing.T) {
	const events = 4
	acked := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range events {
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
			select {
			case <-acked:
			case <-r.Context().Done():
				return
			}
		}
	}))
	defer up.Close()
	r := dialRaw(t, newTestServer(t, nil, WSConfig{}).url, nil)
	r.init()

	res := r.result("http/request", httpParams(up.URL, map[string]any{"requestId": "s1", "streamResponse": true}))
	if len(r.notes) != 0 {
		t.Fatalf("a delta came before the reply: %v", r.notes)
	}
	if resultBody(t, res) != "" || res["status"].(float64) != 200 {
		t.Fatalf("streamed result %v", res)
	}
	if got := headerValues(res, "transfer-encoding"); len(got) != 1 || got[0] != "chunked" {
		t.Errorf("transfer-encoding %v, want chunked (codex reports it)", got)
	}
	for i := range events {
		p := params(r.note())
		data, _ := base64.StdEncoding.DecodeString(p["deltaBase64"].(string))
		if p["requestId"] != "s1" || p["seq"].(float64) != float64(i+1) || p["done"] != false || string(data) != fmt.Sprintf("data: %d\n\n", i) {
			t.Fatalf("delta %d: %v (%q)", i+1, p, data)
		}
		acked <- struct{}{}
	}
	last := r.note()
	p := params(last)
	if last["method"] != protocol.MethodHTTPRequestBodyDelta || p["seq"].(float64) != events+1 || p["done"] != true || p["deltaBase64"] != "" || p["error"] != nil {
		t.Fatalf("last delta %v, want seq %d done, no bytes, error null", last, events+1)
	}
}

// A buffered body past maxHTTPBufferedBody is refused, with a length
// header or without one; streamed, the same body arrives whole.
func TestHTTPRequestBufferedBodyCap(t *testing.T) {
	const size = maxHTTPBufferedBody + 1
	chunk := strings.Repeat("x", 64<<10)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("len") == "1" {
			w.Header().Set("Content-Length", fmt.Sprint(size))
		}
		for left := size; left > 0; left -= len(chunk) {
			w.Write([]byte(chunk[:min(left, len(chunk))]))
		}
	}))
	defer up.Close()
	r := dialRaw(t, newTestServer(t, nil, WSConfig{}).url, nil)
	r.init()
	r.wantKind("with Content-Length", r.call("http/request", httpParams(up.URL+"/?len=1", nil)), protocol.CodeInvalidRequest, protocol.KindTooLarge)
	r.wantKind("chunked", r.call("http/request", httpParams(up.URL, nil)), protocol.CodeInvalidRequest, protocol.KindTooLarge)

	r.result("http/request", httpParams(up.URL, map[string]any{"streamResponse": true}))
	total := 0
	for {
		p := params(r.note())
		data, _ := base64.StdEncoding.DecodeString(p["deltaBase64"].(string))
		if len(data) > httpDeltaBytes {
			t.Fatalf("a delta of %d bytes, more than %d", len(data), httpDeltaBytes)
		}
		total += len(data)
		if p["done"] == true {
			if p["error"] != nil {
				t.Fatalf("stream failed: %v", p["error"])
			}
			break
		}
	}
	if total != size {
		t.Fatalf("streamed %d bytes, want %d", total, size)
	}
}

func TestHTTPRequestTimeout(t *testing.T) {
	cancelled := make(chan struct{}, 4)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/part" {
			w.Write([]byte("first"))
			w.(http.Flusher).Flush()
		}
		<-r.Context().Done() // only the executor's timeout ends this
		cancelled <- struct{}{}
	}))
	defer up.Close()
	r := dialRaw(t, newTestServer(t, nil, WSConfig{}).url, nil)
	r.init()

	m := r.call("http/request", httpParams(up.URL, map[string]any{"timeoutMs": 100}))
	r.wantKind("buffered", m, protocol.CodeInternal, protocol.KindUnavailable)
	r.wantError(m, protocol.CodeInternal, "timed out after 100ms")
	<-cancelled

	// timeoutMs bounds the body too: the stream ends with an error.
	r.result("http/request", httpParams(up.URL+"/part", map[string]any{"timeoutMs": 300, "streamResponse": true}))
	first, last := params(r.note()), params(r.note())
	if first["seq"].(float64) != 1 || first["done"] != false {
		t.Fatalf("first delta %v", first)
	}
	if last["seq"].(float64) != 2 || last["done"] != true || !strings.Contains(fmt.Sprint(last["error"]), "timed out after 300ms") {
		t.Fatalf("last delta %v, want seq 2, done, a timeout error", last)
	}
	<-cancelled

	// 0 times out at once, as codex's.
	r.wantError(r.call("http/request", httpParams(up.URL, map[string]any{"timeoutMs": 0})), protocol.CodeInternal, "timed out after 0ms")
}

func TestHTTPRequestRedirects(t *testing.T) {
	other := httptest.NewServer(http.HandlerFunc(echoHandler)) // another origin
	defer other.Close()
	var hops atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		switch r.URL.Path {
		case "/to":
			hops.Add(1)
			to := q.Get("to")
			if to == "other" {
				to = other.URL + "/echo"
			}
			code := 302
			fmt.Sscan(q.Get("code"), &code)
			http.Redirect(w, r, to, code)
		case "/hop":
			n := 0
			fmt.Sscan(q.Get("n"), &n)
			if n > 0 {
				http.Redirect(w, r, fmt.Sprintf("/hop?n=%d", n-1), http.StatusFound)
				return
			}
			w.Write([]byte("end"))
		default:
			echoHandler(w, r)
		}
	}))
	defer up.Close()
	r := dialRaw(t, newTestServer(t, nil, WSConfig{}).url, nil)
	r.init()
	auth := []map[string]any{{"name": "Authorization", "value": "Bearer s"}, {"name": "Cookie", "value": "c=1"}, {"name": "X-Keep", "value": "k"}, {"name": "Content-Type", "value": "text/plain"}}
	body := base64.StdEncoding.EncodeToString([]byte("hi"))
	follow := func(method, to string, code int, extra map[string]any) echoed {
		t.Helper()
		p := httpParams(fmt.Sprintf("%s/to?code=%d&to=%s", up.URL, code, to), map[string]any{"method": method, "headers": auth, "bodyBase64": body})
		for k, v := range extra {
			p[k] = v
		}
		return decodeEcho(t, r.result("http/request", p))
	}

	// Same origin: credentials kept, Referer the whole previous URL.
	e := follow("PUT", "/echo", 302, nil)
	if e.Method != "PUT" || e.Body != "hi" || e.Header.Get("Authorization") != "Bearer s" || e.Header.Get("Referer") != up.URL+"/to?code=302&to=/echo" {
		t.Errorf("302 PUT same origin: %+v", e)
	}
	// 303 and 301/302 POST: a bodiless GET without the body's headers.
	for _, c := range []struct {
		method string
		code   int
	}{{"POST", 303}, {"PUT", 303}, {"POST", 301}, {"POST", 302}} {
		e := follow(c.method, "/echo", c.code, nil)
		if e.Method != "GET" || e.Body != "" || e.Header.Get("Content-Type") != "" || e.Header.Get("X-Keep") != "k" {
			t.Errorf("%d %s: %+v, want a GET without body or Content-Type", c.code, c.method, e)
		}
	}
	// 307 and 308 keep the method and the body.
	for _, code := range []int{307, 308} {
		if e := follow("POST", "/echo", code, nil); e.Method != "POST" || e.Body != "hi" {
			t.Errorf("%d POST: %+v", code, e)
		}
	}
	// Another origin: no credentials, Referer its origin only.
	e = follow("GET", "other", 302, nil)
	if e.Header.Get("Authorization") != "" || e.Header.Get("Cookie") != "" || e.Header.Get("X-Keep") != "k" || e.Header.Get("Referer") != up.URL+"/" {
		t.Errorf("cross-origin: %+v", e)
	}

	// stop: the redirect itself.
	hops.Store(0)
	res := r.result("http/request", httpParams(up.URL+"/to?to=/echo", map[string]any{"redirectPolicy": "stop"}))
	if res["status"].(float64) != 302 || len(headerValues(res, "location")) != 1 || hops.Load() != 1 {
		t.Errorf("stop: %v after %d hops", res, hops.Load())
	}

	// Ten redirects are followed, the eleventh refused.
	if got := resultBody(t, r.result("http/request", httpParams(up.URL+"/hop?n=10", nil))); got != "end" {
		t.Errorf("10 hops: %q", got)
	}
	m := r.call("http/request", httpParams(up.URL+"/hop?n=11", nil))
	r.wantError(m, protocol.CodeInternal, "http/request failed: too many redirects")
	r.wantKind("11 hops", m, protocol.CodeInternal, protocol.KindInvalid)
	// Only http and https targets.
	r.wantError(r.call("http/request", httpParams(up.URL+"/to?to=ftp://x/y", nil)), protocol.CodeInternal, "redirect target uses unsupported URL scheme: ftp")
}

func TestHTTPRequestBadParams(t *testing.T) {
	var reached atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached.Add(1) }))
	defer up.Close()
	r := dialRaw(t, newTestServer(t, nil, WSConfig{}).url, nil)
	r.init()
	many := make([]map[string]any, maxHTTPRequestHeaders+1)
	for i := range many {
		many[i] = map[string]any{"name": "x", "value": "1"}
	}
	for _, c := range []struct {
		what   string
		params any
		want   string
	}{
		{"no params", nil, "params are required"},
		{"no method", map[string]any{"url": up.URL, "requestId": "r"}, "missing field `method`"},
		{"no url", map[string]any{"method": "GET", "requestId": "r"}, "missing field `url`"},
		{"no requestId", map[string]any{"method": "GET", "url": up.URL}, "missing field `requestId`"},
		{"header without value", httpParams(up.URL, map[string]any{"headers": []map[string]any{{"name": "x"}}}), "missing field `value`"},
		{"bad method", httpParams(up.URL, map[string]any{"method": "GET POST"}), "http/request method is invalid: invalid HTTP method"},
		{"empty method", httpParams(up.URL, map[string]any{"method": ""}), "http/request method is invalid"},
		{"relative url", httpParams("not a url", nil), "http/request url is invalid: relative URL without a base"},
		{"empty host", httpParams("http://", nil), "http/request url is invalid: empty host"},
		{"bad port", httpParams("http://127.0.0.1:99999/", nil), "http/request url is invalid: invalid port number"},
		{"file url", httpParams("file:///etc/passwd", nil), "http/request only supports http and https URLs, got file"},
		{"bad header name", httpParams(up.URL, map[string]any{"headers": []map[string]any{{"name": "bad name", "value": "1"}}}), "http/request header name is invalid"},
		{"bad header value", httpParams(up.URL, map[string]any{"headers": []map[string]any{{"name": "x", "value": "a\nb"}}}), "http/request header value is invalid for x"},
		{"bad base64", httpParams(up.URL, map[string]any{"bodyBase64": "!!!"}), "bodyBase64 is not valid base64"},
		{"bad redirect policy", httpParams(up.URL, map[string]any{"redirectPolicy": "bogus"}), "unknown variant `bogus`, expected `follow` or `stop`"},
		{"negative timeout", httpParams(up.URL, map[string]any{"timeoutMs": -1}), "timeoutMs"},
		{"too many headers", httpParams(up.URL, map[string]any{"headers": many}), "headers; at most 256"},
		{"headers too large", httpParams(up.URL, map[string]any{"headers": []map[string]any{{"name": "x", "value": strings.Repeat("v", maxHTTPRequestHeaderBytes)}}}), "headers exceed"},
		{"long stream id", httpParams(up.URL, map[string]any{"streamResponse": true, "requestId": strings.Repeat("i", maxHTTPRequestIDBytes+1)}), "requestId must be at most"},
	} {
		m := r.call("http/request", c.params)
		r.wantError(m, protocol.CodeInvalidParams, c.want)
		e := m["error"].(map[string]any)
		if kind := e["data"].(map[string]any)["kind"]; kind != string(protocol.KindInvalid) && kind != string(protocol.KindTooLarge) {
			t.Errorf("%s: kind %v", c.what, kind)
		}
	}
	if n := reached.Load(); n != 0 {
		t.Errorf("%d bad requests reached the server", n)
	}
	// An unreachable server: the send fails, kind unavailable.
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	m := r.call("http/request", httpParams(closed.URL, nil))
	r.wantError(m, protocol.CodeInternal, "http/request failed: error sending request for url")
	r.wantKind("refused", m, protocol.CodeInternal, protocol.KindUnavailable)
	// Response headers past maxHTTPResponseHeaderBytes are not read.
	big := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Big", strings.Repeat("v", maxHTTPResponseHeaderBytes))
	}))
	defer big.Close()
	r.wantError(r.call("http/request", httpParams(big.URL, nil)), protocol.CodeInternal, "headers exceeded")
}

// With the network off for the executor's commands, http/request is
// refused before anything is sent.
func TestHTTPRequestNetworkOffRefused(t *testing.T) {
	var reached atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached.Add(1) }))
	defer up.Close()
	for _, v := range []string{"CODEX_SANDBOX_NETWORK_DISABLED=1", "OUTPOST_SANDBOX_NETWORK_DISABLED=1"} {
		ts := newTestServer(t, func(c *Config) { c.BaseEnv = append(os.Environ(), v) }, WSConfig{})
		r := dialRaw(t, ts.url, nil)
		r.init()
		m := r.call("http/request", httpParams(up.URL, nil))
		r.wantKind(v, m, protocol.CodeInvalidRequest, protocol.KindPermission)
		r.wantError(m, protocol.CodeInvalidRequest, "network is off")
	}
	if n := reached.Load(); n != 0 {
		t.Errorf("%d refused requests reached the server", n)
	}
	// "0" is not off.
	ts := newTestServer(t, func(c *Config) { c.BaseEnv = append(os.Environ(), "CODEX_SANDBOX_NETWORK_DISABLED=0") }, WSConfig{})
	r := dialRaw(t, ts.url, nil)
	r.init()
	r.result("http/request", httpParams(up.URL, nil))
}

// valueEnvVar takes a header's value from the environment commands
// inherit (Config.BaseEnv), with codex's refusals.
func TestHTTPRequestHeaderFromEnv(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(echoHandler))
	defer up.Close()
	ts := newTestServer(t, func(c *Config) {
		c.BaseEnv = []string{"PATH=/usr/bin:/bin", "MCP_TOKEN=sekrit", "EMPTY=", "OPENAI_API_KEY=k"}
	}, WSConfig{})
	r := dialRaw(t, ts.url, nil)
	r.init()
	hdr := func(env string) map[string]any {
		return httpParams(up.URL, map[string]any{"headers": []map[string]any{{"name": "Authorization", "value": "Bearer ", "valueEnvVar": env}}})
	}
	if got := decodeEcho(t, r.result("http/request", hdr("MCP_TOKEN"))).Header.Get("Authorization"); got != "Bearer sekrit" {
		t.Errorf("Authorization %q, want the prefix and the variable's value", got)
	}
	// HOME is in the executor's environment but not in BaseEnv: commands
	// could not read it, so neither may a header.
	if os.Getenv("HOME") == "" {
		t.Fatal("this test needs HOME set")
	}
	for _, c := range []struct {
		env, want string
		kind      protocol.Kind
	}{
		{"HOME", "http/request header Authorization requires executor environment variable HOME", protocol.KindNotFound},
		{"EMPTY", "requires a non-empty executor environment variable EMPTY", protocol.KindInvalid},
		{"openai_api_key", "http/request header Authorization cannot use executor environment variable openai_api_key", protocol.KindPermission},
	} {
		m := r.call("http/request", hdr(c.env))
		r.wantError(m, protocol.CodeInvalidParams, c.want)
		r.wantKind(c.env, m, protocol.CodeInvalidParams, c.kind)
	}
}

// A streamed request's id is unique while its stream runs: a second
// stream with it is refused, a buffered request is not, and the id is
// free again once the stream is done.
func TestHTTPRequestStreamIDUnique(t *testing.T) {
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
	}))
	defer up.Close()
	r := dialRaw(t, newTestServer(t, nil, WSConfig{}).url, nil)
	r.init()
	r.result("http/request", httpParams(up.URL+"/hold", map[string]any{"requestId": "dup", "streamResponse": true}))
	r.wantError(r.call("http/request", httpParams(up.URL, map[string]any{"requestId": "dup", "streamResponse": true})),
		protocol.CodeInvalidParams, "http/request streamResponse requestId `dup` is already active")
	r.result("http/request", httpParams(up.URL, map[string]any{"requestId": "dup"}))
	close(release)
	if p := params(r.note()); p["done"] != true {
		t.Fatalf("want the held stream's end, got %v", p)
	}
	// finish releases the id just after the last delta is queued.
	deadline := time.Now().Add(testTimeout)
	for {
		m := r.call("http/request", httpParams(up.URL, map[string]any{"requestId": "dup", "streamResponse": true}))
		if _, failed := m["error"]; !failed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the id stayed reserved after its stream ended: %v", m)
		}
	}
}

// At most maxHTTPInFlight requests and streams run per connection; one
// more is refused as exhausted, and a slot frees when a stream ends.
func TestHTTPRequestInFlightBound(t *testing.T) {
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer up.Close()
	r := dialRaw(t, newTestServer(t, nil, WSConfig{}).url, nil)
	r.init()
	for i := range maxHTTPInFlight {
		r.result("http/request", httpParams(up.URL, map[string]any{"requestId": fmt.Sprint(i), "streamResponse": true}))
	}
	r.wantKind("one too many", r.call("http/request", httpParams(up.URL, map[string]any{"requestId": "x"})), protocol.CodeInvalidRequest, protocol.KindExhausted)
	close(release)
	for range maxHTTPInFlight {
		if p := params(r.note()); p["done"] != true {
			t.Fatalf("want a stream's end, got %v", p)
		}
	}
}

// A client that stops reading stops the stream: the executor holds a
// bounded amount (the reply queue's deltas, socket buffers) and the
// upstream server's writes stall; closing the connection cancels the
// upstream request and ends the stream's goroutine.
func TestHTTPRequestSlowClientBounded(t *testing.T) {
	var written atomic.Int64
	upstreamDone := make(chan struct{})
	const offered = 1 << 30
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(upstreamDone)
		chunk := make([]byte, 64<<10)
		for written.Load() < offered {
			if _, err := w.Write(chunk); err != nil {
				return
			}
			written.Add(int64(len(chunk)))
		}
	}))
	defer up.Close()
	base := httpStreamsRunning.Load()
	r := dialRaw(t, newTestServer(t, nil, WSConfig{}).url, nil)
	r.init()
	r.result("http/request", httpParams(up.URL, map[string]any{"streamResponse": true}))
	// Read nothing more; wait for the upstream writes to stall.
	deadline := time.Now().Add(testTimeout)
	last, still := int64(-1), 0
	for still < 5 {
		if time.Now().After(deadline) {
			t.Fatalf("upstream never stalled: %d bytes written", written.Load())
		}
		time.Sleep(100 * time.Millisecond)
		if n := written.Load(); n == last {
			still++
		} else {
			last, still = n, 0
		}
	}
	// 16 MiB of queued deltas (as base64 on the socket, more) plus
	// loopback socket buffers; far below what was offered.
	const bound = 64 << 20
	t.Logf("upstream stalled after %d MiB", last>>20)
	if last > bound {
		t.Fatalf("the executor took %d bytes from a stream nobody read (bound %d)", last, bound)
	}
	r.c.CloseNow()
	select {
	case <-upstreamDone:
	case <-time.After(testTimeout):
		t.Fatal("closing the connection did not end the upstream request")
	}
	for httpStreamsRunning.Load() != base {
		if time.Now().After(deadline.Add(testTimeout)) {
			t.Fatalf("%d stream goroutines outlived their connection", httpStreamsRunning.Load()-base)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A buffered request still waiting when the connection closes is
// cancelled upstream.
func TestHTTPRequestCancelledWithConnection(t *testing.T) {
	arrived, cancelled := make(chan struct{}), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-r.Context().Done()
		close(cancelled)
	}))
	defer up.Close()
	r := dialRaw(t, newTestServer(t, nil, WSConfig{}).url, nil)
	r.init()
	r.send(map[string]any{"id": 1, "method": "http/request", "params": httpParams(up.URL, nil)})
	<-arrived
	r.c.CloseNow()
	select {
	case <-cancelled:
	case <-time.After(testTimeout):
		t.Fatal("the upstream request outlived the connection")
	}
}
