package conformance

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"
)

// http/request against outpost's executor and codex 0.171's exec-server,
// both calling the same upstream servers on 127.0.0.1 (this test's own).
// What may differ is normalised away, each named where it is:
//   - the wording of transport failures (net/http's and reqwest's): only
//     the code and codex's prefix are compared;
//   - response header order: net/http keeps a map, so outpost sends names
//     sorted; headers are compared as sorted lists (Date dropped);
//   - Accept-Encoding sent upstream (reqwest offers zstd,gzip, net/http
//     gzip): not compared.

// httpUpstream is the servers every request goes to: up, and other (a
// second origin for redirects).
type httpUpstream struct {
	up, other *httptest.Server
}

func newHTTPUpstream(t *testing.T) *httpUpstream {
	echo := func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		seen := map[string]any{"method": r.Method, "path": r.URL.RequestURI(), "body": string(body), "host": r.Host}
		for _, h := range []string{"Accept", "User-Agent", "Authorization", "Cookie", "Referer", "Content-Type", "X-A", "X-Keep"} {
			if v, ok := r.Header[h]; ok {
				seen[h] = v
			}
		}
		b, _ := json.Marshal(seen)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Add("X-Multi", "a")
		w.Header().Add("X-Multi", "b")
		w.WriteHeader(http.StatusCreated)
		w.Write(b)
	}
	u := &httpUpstream{other: httptest.NewServer(http.HandlerFunc(echo))}
	u.up = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		switch r.URL.Path {
		case "/to":
			to := q.Get("to")
			if to == "other" {
				to = u.other.URL + "/echo"
			}
			code := 302
			fmt.Sscan(q.Get("code"), &code)
			w.Header().Set("Location", to)
			w.WriteHeader(code)
		case "/hop":
			n := 0
			fmt.Sscan(q.Get("n"), &n)
			if n > 0 {
				w.Header().Set("Location", fmt.Sprintf("/hop?n=%d", n-1))
				w.WriteHeader(http.StatusFound)
				return
			}
			w.Write([]byte("end"))
		case "/stream":
			w.Header().Set("Content-Type", "text/event-stream")
			for i := range 3 {
				fmt.Fprintf(w, "data: %d\n\n", i)
				w.(http.Flusher).Flush()
			}
		case "/short":
			// A body cut short of its Content-Length.
			w.Header().Set("Content-Length", "100")
			w.Write([]byte("abc"))
			w.(http.Flusher).Flush()
			if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
				c.Close()
			}
		case "/gzip":
			if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
				w.Write([]byte("plain"))
				return
			}
			var b bytes.Buffer
			zw := gzip.NewWriter(&b)
			zw.Write([]byte("zipped"))
			zw.Close()
			w.Header().Set("Content-Encoding", "gzip")
			w.Header().Set("Content-Length", fmt.Sprint(b.Len()))
			w.Write(b.Bytes())
		case "/latin1":
			// Not visible ASCII: codex leaves such values out.
			w.Header()["X-Latin"] = []string{"caf\xe9"}
			w.Header().Set("X-Plain", "ok")
		case "/hold":
			// Headers at once, then no body until the request ends.
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
			case <-time.After(stepTimeout):
			}
		case "/slow":
			select {
			case <-r.Context().Done():
			case <-time.After(stepTimeout):
			}
		default:
			echo(w, r)
		}
	}))
	t.Cleanup(func() { u.up.Close(); u.other.Close() })
	return u
}

// httpNote is the next notification, from those call kept first.
func httpNote(w *wire) map[string]any {
	w.t.Helper()
	if len(w.notes) > 0 {
		m := w.notes[0]
		w.notes = w.notes[1:]
		return m
	}
	for {
		m := w.recv()
		if _, ok := m["method"]; ok {
			return m
		}
		w.t.Fatalf("unexpected reply %v", m)
	}
}

// httpResult renders a result: status, headers (sorted, Date dropped),
// and the body, or the upstream's echo of the request.
func httpResult(m map[string]any) string {
	if _, ok := m["error"]; ok {
		return shape(m)
	}
	res := m["result"].(map[string]any)
	var hs []string
	for _, h := range res["headers"].([]any) {
		hm := h.(map[string]any)
		if hm["name"] != "date" {
			hs = append(hs, fmt.Sprintf("%v=%v", hm["name"], hm["value"]))
		}
	}
	sort.Strings(hs)
	body, _ := base64.StdEncoding.DecodeString(res["bodyBase64"].(string))
	return fmt.Sprintf("status=%v headers=%s body=%s", res["status"], strings.Join(hs, ","), body)
}

// httpPrefix renders an error as its code and the start of its message.
func httpPrefix(m map[string]any, prefix string) string {
	e, ok := m["error"].(map[string]any)
	if !ok {
		return "result:" + httpResult(m)
	}
	return fmt.Sprintf("error:%v prefix-ok=%v", e["code"], strings.HasPrefix(fmt.Sprint(e["message"]), prefix))
}

// httpStream renders a stream's deltas after its reply: the bytes, the
// sequence, and how it ended (whether with an error, not its wording).
func httpStream(w *wire, id string) string {
	w.t.Helper()
	var data strings.Builder
	seqOK := true
	for want := 1.0; ; want++ {
		m := httpNote(w)
		p := m["params"].(map[string]any)
		if m["method"] != "http/request/bodyDelta" || p["requestId"] != id {
			w.t.Fatalf("unexpected notification %v", m)
		}
		seqOK = seqOK && p["seq"].(float64) == want
		b, _ := base64.StdEncoding.DecodeString(p["deltaBase64"].(string))
		data.Write(b)
		if p["done"] == true {
			return fmt.Sprintf("data=%q seq-from-1=%v last-empty=%v error=%v", data.String(), seqOK, len(b) == 0, p["error"] != nil)
		}
	}
}

func httpScenario(t *testing.T, url string, u *httpUpstream) []observation {
	var obs []observation
	see := func(step, value string) { obs = append(obs, observation{step, value}) }
	w := dial(t, url)
	w.call("initialize", map[string]any{"clientName": "diff"})
	w.notify("initialized")
	req := func(extra map[string]any) map[string]any {
		p := map[string]any{"method": "GET", "url": u.up.URL + "/echo", "requestId": "r"}
		for k, v := range extra {
			p[k] = v
		}
		return w.call("http/request", p)
	}
	hdr := func(name, value string) map[string]any {
		return map[string]any{"headers": []map[string]any{{"name": name, "value": value}}}
	}
	envHdr := func(env string) map[string]any {
		return map[string]any{"headers": []map[string]any{{"name": "Authorization", "value": "Bearer ", "valueEnvVar": env}}}
	}

	// Params, with codex's exact messages.
	see("no method", shape(w.call("http/request", map[string]any{"url": u.up.URL, "requestId": "r"})))
	see("no url", shape(w.call("http/request", map[string]any{"method": "GET", "requestId": "r"})))
	see("no requestId", shape(w.call("http/request", map[string]any{"method": "GET", "url": u.up.URL})))
	see("header without value", shape(req(map[string]any{"headers": []map[string]any{{"name": "x"}}})))
	see("bad method", shape(req(map[string]any{"method": "GET POST"})))
	see("empty method", shape(req(map[string]any{"method": ""})))
	see("relative url", shape(req(map[string]any{"url": "not a url"})))
	see("empty host", shape(req(map[string]any{"url": "http://"})))
	see("bad port", shape(req(map[string]any{"url": "http://127.0.0.1:99999/"})))
	see("file url", shape(req(map[string]any{"url": "file:///etc/passwd"})))
	see("bad header name", shape(req(hdr("bad name", "1"))))
	see("bad header value", shape(req(hdr("x", "a\nb"))))
	see("bad redirect policy", shape(req(map[string]any{"redirectPolicy": "bogus"})))
	see("bad base64", code(req(map[string]any{"bodyBase64": "!!!"})))
	see("negative timeout", code(req(map[string]any{"timeoutMs": -1})))

	// Header values from the executor's environment.
	see("env header", httpResult(req(envHdr("HTTP_DIFF_TOKEN"))))
	see("env header unset", shape(req(envHdr("HTTP_DIFF_UNSET"))))
	see("env header empty", shape(req(envHdr("HTTP_DIFF_EMPTY"))))
	see("env header denied", shape(req(envHdr("openai_api_key"))))

	// Buffered.
	see("GET", httpResult(req(map[string]any{"headers": []map[string]any{{"name": "X-A", "value": "1"}, {"name": "x-a", "value": "2"}}})))
	see("POST body", httpResult(req(map[string]any{"method": "POST", "bodyBase64": b64("hello"), "headers": []map[string]any{{"name": "Content-Type", "value": "text/plain"}}})))
	see("Host header", httpResult(req(hdr("Host", "example.test"))))
	see("HEAD", httpResult(req(map[string]any{"method": "HEAD"})))
	see("userinfo", httpResult(req(map[string]any{"url": strings.Replace(u.up.URL, "http://", "http://user:pw@", 1) + "/echo"})))
	see("non-ASCII request header", httpResult(req(hdr("X-A", "café"))))
	see("non-ASCII response header", httpResult(req(map[string]any{"url": u.up.URL + "/latin1"})))
	see("gzip", httpResult(req(map[string]any{"url": u.up.URL + "/gzip"})))
	see("gzip asked for", httpResult(req(map[string]any{"url": u.up.URL + "/gzip", "headers": []map[string]any{{"name": "Accept-Encoding", "value": "gzip"}}})))
	see("largest timeout", httpResult(req(map[string]any{"timeoutMs": uint64(1<<64 - 1)})))
	see("short body", httpPrefix(req(map[string]any{"url": u.up.URL + "/short"}), "failed to read http/request response body: "))

	// Streamed: the reply first, then the deltas.
	m := req(map[string]any{"url": u.up.URL + "/stream", "requestId": "s1", "streamResponse": true})
	see("stream reply", fmt.Sprintf("%s deltas-before-reply=%d", httpResult(m), len(w.notes)))
	see("stream deltas", httpStream(w, "s1"))
	req(map[string]any{"url": u.up.URL + "/short", "requestId": "s2", "streamResponse": true})
	see("stream cut short", httpStream(w, "s2"))
	req(map[string]any{"url": u.up.URL + "/hop", "requestId": "", "streamResponse": true})
	see("empty stream", httpStream(w, ""))
	req(map[string]any{"url": u.up.URL + "/hold", "requestId": "dup", "streamResponse": true, "timeoutMs": 1500})
	see("duplicate stream id", shape(req(map[string]any{"requestId": "dup", "streamResponse": true})))
	see("buffered with a streaming id", code(req(map[string]any{"requestId": "dup"})))
	see("stream timeout", httpStream(w, "dup"))

	// Redirects.
	to := func(method string, code int, target string, extra map[string]any) map[string]any {
		p := map[string]any{"method": method, "url": fmt.Sprintf("%s/to?code=%d&to=%s", u.up.URL, code, target), "bodyBase64": b64("hi"),
			"headers": []map[string]any{{"name": "Authorization", "value": "Bearer s"}, {"name": "Cookie", "value": "c=1"}, {"name": "X-Keep", "value": "k"}, {"name": "Content-Type", "value": "text/plain"}}}
		for k, v := range extra {
			p[k] = v
		}
		return req(p)
	}
	for _, c := range []struct {
		method string
		code   int
	}{{"PUT", 302}, {"DELETE", 302}, {"POST", 301}, {"POST", 302}, {"POST", 303}, {"PUT", 303}, {"POST", 307}, {"POST", 308}} {
		see(fmt.Sprintf("redirect %d %s", c.code, c.method), httpResult(to(c.method, c.code, "/echo", nil)))
	}
	see("redirect to another origin", httpResult(to("GET", 302, "other", nil)))
	see("redirect stop", httpResult(to("GET", 302, "/echo", map[string]any{"redirectPolicy": "stop"})))
	see("redirect 300 not followed", httpResult(to("GET", 300, "/echo", nil)))
	see("10 redirects", httpResult(req(map[string]any{"url": u.up.URL + "/hop?n=10"})))
	see("11 redirects", shape(req(map[string]any{"url": u.up.URL + "/hop?n=11"})))
	see("redirect to ftp", shape(req(map[string]any{"url": u.up.URL + "/to?to=ftp://x/y"})))

	// Failures to send.
	see("timeout", httpPrefix(req(map[string]any{"url": u.up.URL + "/slow", "timeoutMs": 200}), "http/request failed: "))
	see("timeout 0", httpPrefix(req(map[string]any{"timeoutMs": 0}), "http/request failed: "))
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	see("connection refused", httpPrefix(req(map[string]any{"url": closed.URL}), "http/request failed: error sending request for url ("))
	return obs
}

func TestDifferentialHTTPRequestAgainstCodexExecServer(t *testing.T) {
	env := []string{"HTTP_DIFF_TOKEN=sekrit", "HTTP_DIFF_EMPTY=", "OPENAI_API_KEY=k"}
	ours, theirs := bothServers(t, env...)

	u := newHTTPUpstream(t)
	a := httpScenario(t, ours.URL, u)
	b := httpScenario(t, theirs.URL, u)
	if len(a) != len(b) {
		t.Fatalf("outpost made %d observations, codex %d", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Errorf("%s:\n  outpost: %s\n  codex:   %s", a[i].step, a[i].value, b[i].value)
		} else {
			t.Logf("%s: %s", a[i].step, a[i].value)
		}
	}
}
