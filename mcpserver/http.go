package mcpserver

import (
	"crypto/subtle"
	"net/http"
	"net/url"
	"strings"
)

// bearer refuses a request without "Authorization: Bearer <token>" when
// token is set (401, with the WWW-Authenticate challenge RFC 6750 asks
// for). The comparison takes the same time for every wrong token.
func bearer(token string, next http.Handler) http.Handler {
	if token == "" {
		return next
	}
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := []byte(r.Header.Get("Authorization"))
		if subtle.ConstantTimeCompare(got, want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="outpost mcp"`)
			http.Error(w, "outpost mcp: a bearer token is required (Authorization: Bearer …)", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// originCheck refuses, for every method (a GET opens a session's event
// stream), a request whose Origin is not the host the request was sent
// to: a web page the user has open — even one served from another local
// port — must not talk to a local MCP server. Requests without an Origin
// (agents, curl) pass.
func originCheck(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if o := r.Header.Get("Origin"); o != "" && !originAllowed(o, r.Host) {
			http.Error(w, "outpost mcp: cross-origin request refused", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// originAllowed: the Origin names exactly the Host the request was sent
// to.
func originAllowed(origin, host string) bool {
	u, err := url.Parse(origin)
	return err == nil && u.Host != "" && strings.EqualFold(u.Host, host)
}
