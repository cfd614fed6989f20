package executor

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// maxHTTPRedirects is how many redirects a request follows before it
// fails, as codex's: the eleventh is refused.
const maxHTTPRedirects = 10

// redirectError is a redirect the policy refuses to follow.
type redirectError struct{ msg string }

func (e *redirectError) Error() string { return e.msg }

// sendHTTP sends req and, when follow is set, follows its redirects as
// codex 0.171 does (observed against its exec-server):
//   - 301, 302, 303, 307 and 308 with a Location that parses are
//     followed; anything else, a missing or unparsable Location included,
//     is the answer;
//   - 303 turns any method but HEAD into a bodiless GET, and so do 301 and
//     302 for POST; other methods keep their method and body (a 302 PUT
//     stays a PUT);
//   - the request's own credentials (Authorization, Cookie, Cookie2,
//     Proxy-Authorization, WWW-Authenticate) and Host are not sent to
//     another origin;
//   - Referer is the previous URL on the same origin, only its origin on
//     another, none from https to http;
//   - only http and https targets, at most maxHTTPRedirects hops, all
//     within the one timeout (ctx).
//
// net/http's Client is not used: its redirect rules differ (it turns a
// 302 PUT into a GET and keeps full Referers), so the loop is here and
// each hop is one RoundTrip.
func sendHTTP(ctx context.Context, rt http.RoundTripper, req *outRequest, follow bool) (*http.Response, error) {
	cur := *req
	cur.header = req.header.Clone()
	for hops := 0; ; hops++ {
		hreq, err := cur.build(ctx)
		if err != nil {
			return nil, err
		}
		resp, err := rt.RoundTrip(hreq)
		if err != nil {
			return nil, fmt.Errorf("error sending request for url (%s): %w", cur.url.Redacted(), err)
		}
		if !follow {
			return resp, nil
		}
		next, ok := redirectTarget(cur.url, resp)
		if !ok {
			return resp, nil
		}
		// What a redirect says in its body is not wanted: read a little,
		// so the connection can be reused, and let it go.
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if next.Scheme != "http" && next.Scheme != "https" {
			return nil, &redirectError{fmt.Sprintf("redirect target uses unsupported URL scheme: %s", next.Scheme)}
		}
		if hops >= maxHTTPRedirects {
			return nil, &redirectError{"too many redirects"}
		}
		cur.redirect(resp.StatusCode, next)
	}
}

// redirectTarget is where a response redirects to, if it is a redirect
// codex follows.
func redirectTarget(from *url.URL, resp *http.Response) (*url.URL, bool) {
	switch resp.StatusCode {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
	default:
		return nil, false
	}
	loc := resp.Header.Get("Location")
	if loc == "" {
		return nil, false
	}
	next, err := from.Parse(loc)
	if err != nil || next.Host == "" && (next.Scheme == "http" || next.Scheme == "https") {
		return nil, false
	}
	next.User = nil // credentials only ever travel in headers
	return next, true
}

// redirect turns r into the request to send to next after status.
func (r *outRequest) redirect(status int, next *url.URL) {
	if status == http.StatusSeeOther && r.method != http.MethodHead ||
		(status == http.StatusMovedPermanently || status == http.StatusFound) && r.method == http.MethodPost {
		r.method = http.MethodGet
		r.body = nil
		for _, h := range []string{"Content-Type", "Content-Length", "Content-Encoding", "Transfer-Encoding"} {
			r.header.Del(h)
		}
	}
	if status == http.StatusSeeOther && r.method == http.MethodHead {
		r.body = nil
	}
	sameOrigin := origin(r.url) == origin(next)
	if !sameOrigin {
		for _, h := range []string{"Authorization", "Cookie", "Cookie2", "Proxy-Authorization", "Www-Authenticate"} {
			r.header.Del(h)
		}
		r.host = ""
	}
	r.header.Del("Referer")
	if !(r.url.Scheme == "https" && next.Scheme == "http") {
		ref := *r.url
		ref.User, ref.Fragment, ref.RawFragment = nil, "", ""
		if !sameOrigin {
			ref = url.URL{Scheme: ref.Scheme, Host: ref.Host, Path: "/"}
		}
		r.header.Set("Referer", ref.String())
	}
	r.url = next
}

// origin is a URL's scheme, host and port (the default port made
// explicit), what the same-origin rule compares.
func origin(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return u.Scheme + "://" + strings.ToLower(u.Hostname()) + ":" + port
}

// build is r as one net/http request under ctx.
func (r *outRequest) build(ctx context.Context) (*http.Request, error) {
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	hreq, err := http.NewRequestWithContext(ctx, r.method, r.url.String(), body)
	if err != nil {
		return nil, err
	}
	hreq.Header = r.header.Clone()
	if r.host != "" {
		hreq.Host = r.host
	}
	return hreq, nil
}
