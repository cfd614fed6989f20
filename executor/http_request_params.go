package executor

import (
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/transport"
)

// httpRequestWire is http/request's params as they arrive: pointers, so a
// missing required field is named as codex names it ("missing field
// `method`"), and the body as text, so bad base64 is named too.
type httpRequestWire struct {
	Method         *string          `json:"method" msgpack:"method"`
	URL            *string          `json:"url" msgpack:"url"`
	Headers        []httpHeaderWire `json:"headers" msgpack:"headers"`
	BodyBase64     *string          `json:"bodyBase64" msgpack:"bodyBase64"`
	TimeoutMs      *uint64          `json:"timeoutMs" msgpack:"timeoutMs"`
	RedirectPolicy *string          `json:"redirectPolicy" msgpack:"redirectPolicy"`
	RequestID      *string          `json:"requestId" msgpack:"requestId"`
	StreamResponse bool             `json:"streamResponse" msgpack:"streamResponse"`
}

type httpHeaderWire struct {
	Name        *string `json:"name" msgpack:"name"`
	Value       *string `json:"value" msgpack:"value"`
	ValueEnvVar *string `json:"valueEnvVar" msgpack:"valueEnvVar"`
}

func missingField(name string) error {
	return protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "missing field `%s`", name)
}

// decodeHTTPRequest decodes and checks the shape of http/request's params;
// prepareHTTPRequest judges their values.
func decodeHTTPRequest(m *transport.Message) (protocol.HTTPRequestParams, error) {
	var w httpRequestWire
	if err := decode(m, &w, true); err != nil {
		return protocol.HTTPRequestParams{}, err
	}
	var p protocol.HTTPRequestParams
	// codex reports the first missing field in its declaration order.
	switch {
	case w.Method == nil:
		return p, missingField("method")
	case w.URL == nil:
		return p, missingField("url")
	case w.RequestID == nil:
		return p, missingField("requestId")
	}
	p.Method, p.URL, p.RequestID, p.StreamResponse, p.TimeoutMs = *w.Method, *w.URL, *w.RequestID, w.StreamResponse, w.TimeoutMs
	if len(w.Headers) > maxHTTPRequestHeaders {
		return p, protocol.KindErrorf(protocol.KindTooLarge, protocol.CodeInvalidParams, "http/request has %d headers; at most %d may be sent", len(w.Headers), maxHTTPRequestHeaders)
	}
	for _, h := range w.Headers {
		switch {
		case h.Name == nil:
			return p, missingField("name")
		case h.Value == nil:
			return p, missingField("value")
		}
		p.Headers = append(p.Headers, protocol.HTTPHeader{Name: *h.Name, Value: *h.Value, ValueEnvVar: h.ValueEnvVar})
	}
	if w.BodyBase64 != nil {
		body, err := base64.StdEncoding.DecodeString(*w.BodyBase64)
		if err != nil {
			return p, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "invalid params for http/request: bodyBase64 is not valid base64: %v", err)
		}
		p.Body = body
	}
	p.RedirectPolicy = protocol.HTTPRedirectFollow
	if w.RedirectPolicy != nil {
		switch rp := protocol.HTTPRedirectPolicy(*w.RedirectPolicy); rp {
		case protocol.HTTPRedirectFollow, protocol.HTTPRedirectStop:
			p.RedirectPolicy = rp
		default:
			return p, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "unknown variant `%s`, expected `follow` or `stop`", *w.RedirectPolicy)
		}
	}
	return p, nil
}

// outRequest is a request ready to send, and to send again on a redirect.
type outRequest struct {
	method string
	url    *url.URL
	header http.Header // canonical names, so net/http's own lookups see them
	host   string      // a Host header's value, which net/http takes apart
	body   []byte      // nil: none
}

// httpHeaderEnvDenylist are variables no header may take its value from,
// whatever the executor's environment holds: codex 0.171's list (its own
// and cloud credentials), and outpost's own credentials. A client that can
// run commands could read them anyway; the list keeps a header from
// carrying them off by mistake.
var httpHeaderEnvDenylist = []string{
	"CODEX_EXEC_SERVER_NOISE_AUTH_TOKEN", "OPENAI_FEDERATION_RULE_ID", "OPENAI_IDENTITY_TOKEN_FILE",
	"OPENAI_WORKLOAD_IDENTITY_CONTEXT", "OPENAI_API_KEY", "CODEX_API_KEY", "CODEX_ACCESS_TOKEN",
	"CODEX_CONNECTORS_TOKEN", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
	"AZURE_CLIENT_SECRET", "AZURE_FEDERATED_TOKEN_FILE", "GOOGLE_APPLICATION_CREDENTIALS",
	// outpost's
	"OUTPOST_CONNECTION_TOKEN", "CODEX_EXEC_SERVER_CONNECTION_TOKEN", "OUTPOST_JOIN_TOKEN",
	"OUTPOST_TOKEN", "OUTPOST_ETCD_PASSWORD",
}

// prepareHTTPRequest judges params in codex's order (method, URL, each
// header's name, environment value and value) and builds the request.
//
// valueEnvVar is resolved from baseEnv, the environment every command of
// this executor inherits from (Config.BaseEnv), not from wherever the
// executor's own variables might differ: a client that may send
// http/request may also start a command with envPolicy inherit "all" and
// read any of these values, so a header can carry nothing the client
// could not already read.
func prepareHTTPRequest(p protocol.HTTPRequestParams, baseEnv []string) (*outRequest, error) {
	if !validToken(p.Method) {
		return nil, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "http/request method is invalid: invalid HTTP method")
	}
	u, err := parseHTTPURL(p.URL)
	if err != nil {
		return nil, err
	}
	req := &outRequest{method: p.Method, url: u, header: http.Header{}, body: p.Body}
	size := 0
	for _, h := range p.Headers {
		if !validToken(h.Name) {
			return nil, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "http/request header name is invalid: invalid HTTP header name")
		}
		value := h.Value
		if h.ValueEnvVar != nil {
			v, err := headerFromEnv(h.Name, *h.ValueEnvVar, baseEnv)
			if err != nil {
				return nil, err
			}
			value += v
		}
		if !validHeaderValue(value) {
			return nil, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "http/request header value is invalid for %s: failed to parse header value", h.Name)
		}
		if size += len(h.Name) + len(value); size > maxHTTPRequestHeaderBytes {
			return nil, protocol.KindErrorf(protocol.KindTooLarge, protocol.CodeInvalidParams, "http/request headers exceed %d bytes", maxHTTPRequestHeaderBytes)
		}
		switch name := http.CanonicalHeaderKey(h.Name); name {
		case "Host":
			req.host = value
		case "Content-Length":
			// net/http sends the body's own length; a second, different
			// one would make the request ambiguous.
		default:
			req.header.Add(name, value)
		}
	}
	if u.User != nil {
		// Credentials in the URL become Basic authorization, as codex's
		// client does, and leave the URL: they are never logged, echoed
		// in an error or sent on in a Referer.
		if req.header.Get("Authorization") == "" {
			pw, _ := u.User.Password()
			r := http.Request{Header: http.Header{}}
			r.SetBasicAuth(u.User.Username(), pw)
			req.header.Set("Authorization", r.Header.Get("Authorization"))
		}
		u.User = nil
	}
	// What codex sends when the caller does not: Accept */*, and no
	// User-Agent (net/http would add its own unless the value is empty).
	if _, ok := req.header["Accept"]; !ok {
		req.header.Set("Accept", "*/*")
	}
	if _, ok := req.header["User-Agent"]; !ok {
		req.header["User-Agent"] = []string{""}
	}
	return req, nil
}

// headerFromEnv resolves a header's valueEnvVar, with codex's messages.
func headerFromEnv(header, name string, baseEnv []string) (string, error) {
	for _, denied := range httpHeaderEnvDenylist {
		if strings.EqualFold(denied, name) {
			return "", protocol.KindErrorf(protocol.KindPermission, protocol.CodeInvalidParams, "http/request header %s cannot use executor environment variable %s", header, name)
		}
	}
	v, ok := lookupEnv(baseEnv, name)
	if !ok {
		return "", protocol.KindErrorf(protocol.KindNotFound, protocol.CodeInvalidParams, "http/request header %s requires executor environment variable %s", header, name)
	}
	if v == "" {
		return "", protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "http/request header %s requires a non-empty executor environment variable %s", header, name)
	}
	return v, nil
}

// lookupEnv is name's value in a KEY=VALUE list (the last one wins, as
// for a process), and whether it is there at all.
func lookupEnv(env []string, name string) (string, bool) {
	if name == "" {
		return "", false
	}
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// parseHTTPURL parses an absolute http or https URL, with codex's
// messages where net/url and codex's URL parser agree on the fault.
func parseHTTPURL(s string) (*url.URL, error) {
	invalid := func(why string) error {
		return protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "http/request url is invalid: %s", why)
	}
	u, err := url.Parse(s)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if strings.Contains(err.Error(), "invalid port") {
			return nil, invalid("invalid port number")
		}
		return nil, invalid(err.Error())
	}
	if u.Scheme == "" {
		return nil, invalid("relative URL without a base")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "http/request only supports http and https URLs, got %s", u.Scheme)
	}
	if u.Hostname() == "" {
		return nil, invalid("empty host")
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n > 65535 {
			return nil, invalid("invalid port number")
		}
	}
	return u, nil
}

// validToken reports whether s is an HTTP token (RFC 9110), what a method
// and a header name must be.
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		switch {
		case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= '0' && b <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", b) >= 0:
		default:
			return false
		}
	}
	return true
}

// validHeaderValue reports whether a request header value may be sent:
// no control characters but tab (codex's HeaderValue::from_str rule,
// which lets bytes past ASCII through).
func validHeaderValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if b := s[i]; b != '\t' && (b < ' ' || b == 0x7f) {
			return false
		}
	}
	return true
}
