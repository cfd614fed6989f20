package protocol

// HTTP from the executor's network: codex's http/request, with which codex
// reaches Streamable HTTP MCP servers and OAuth endpoints from where the
// commands run. Names and fields are codex 0.171's.
//
// A buffered request answers with the status, headers and whole body. A
// streamed one (streamResponse) answers as soon as the headers arrive,
// with an empty body, and the body follows as http/request/bodyDelta
// notifications on the same connection: seq counts from 1, every delta
// but the last carries bytes, and the last has done set, no bytes, and
// error set when the body could not be read to its end.
//
// Errors: bad params are CodeInvalidParams (-32602), as codex has them; a
// request that could not be sent or whose buffered body could not be read
// is CodeInternal (-32603). outpost's own refusals (the network is off
// for commands, too many requests in flight, a buffered body past its
// bound) are CodeInvalidRequest (-32600) with KindPermission,
// KindExhausted and KindTooLarge.
const (
	MethodHTTPRequest = "http/request"
	// MethodHTTPRequestBodyDelta is the notification that carries a
	// streamed response body.
	MethodHTTPRequestBodyDelta = "http/request/bodyDelta"
)

// MaxHTTPBodyDeltaBytes is the most body bytes one bodyDelta may carry:
// codex's client refuses a larger delta.
const MaxHTTPBodyDeltaBytes = 1 << 20

// HTTPHeader is one header line. On a request, ValueEnvVar names a
// variable of the executor's environment whose value is appended to
// Value (which is then a prefix, like "Bearer "), so a credential the
// executor holds never crosses the wire; the capability httpHeaderEnvVars
// says the executor resolves it.
type HTTPHeader struct {
	Name        string  `json:"name" msgpack:"name"`
	Value       string  `json:"value" msgpack:"value"`
	ValueEnvVar *string `json:"valueEnvVar,omitempty" msgpack:"valueEnvVar,omitempty"`
}

// HTTPRedirectPolicy says whether the executor follows redirects.
type HTTPRedirectPolicy string

const (
	// HTTPRedirectFollow follows up to ten redirects (the default).
	HTTPRedirectFollow HTTPRedirectPolicy = "follow"
	// HTTPRedirectStop answers with the redirect response itself.
	HTTPRedirectStop HTTPRedirectPolicy = "stop"
)

// HTTPRequestParams are http/request's params.
type HTTPRequestParams struct {
	Method string `json:"method" msgpack:"method"`
	// URL is an absolute http:// or https:// URL.
	URL string `json:"url" msgpack:"url"`
	// Headers are sent in order; a name may repeat.
	Headers []HTTPHeader `json:"headers,omitempty" msgpack:"headers,omitempty"`
	// Body is the request body (none when nil).
	Body []byte `json:"bodyBase64,omitempty" msgpack:"bodyBase64,omitempty"`
	// TimeoutMs bounds the whole request, redirects and body included
	// (nil: no bound; 0 times out at once).
	TimeoutMs      *uint64            `json:"timeoutMs,omitempty" msgpack:"timeoutMs,omitempty"`
	RedirectPolicy HTTPRedirectPolicy `json:"redirectPolicy,omitempty" msgpack:"redirectPolicy,omitempty"`
	// RequestID names the body's deltas; a streamed request's id must not
	// be that of another stream still running on the connection.
	RequestID      string `json:"requestId" msgpack:"requestId"`
	StreamResponse bool   `json:"streamResponse,omitempty" msgpack:"streamResponse,omitempty"`
}

// HTTPRequestResult is http/request's result. Body is empty (never nil:
// it is "" on the wire) for a streamed request.
type HTTPRequestResult struct {
	Status  int          `json:"status" msgpack:"status"`
	Headers []HTTPHeader `json:"headers" msgpack:"headers"`
	Body    []byte       `json:"bodyBase64" msgpack:"bodyBase64"`
}

// HTTPBodyDelta is an http/request/bodyDelta notification's params.
type HTTPBodyDelta struct {
	RequestID string `json:"requestId" msgpack:"requestId"`
	// Seq counts a stream's deltas from 1.
	Seq   uint64 `json:"seq" msgpack:"seq"`
	Delta []byte `json:"deltaBase64" msgpack:"deltaBase64"`
	// Done marks the last delta, which carries no bytes.
	Done bool `json:"done" msgpack:"done"`
	// Error, on the last delta only, says why the body ended early.
	Error *string `json:"error" msgpack:"error"`
}
