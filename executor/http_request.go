package executor

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/sandbox"
	"github.com/outpost-exec/outpost/transport"
)

// http/request (protocol/http.go): codex's HTTP from the executor's
// network. The request runs in the executor's own process with net/http,
// as codex's runs in its exec-server; this file holds the handler and
// the per-connection state, http_request_params.go the params,
// http_request_redirect.go the sending and redirects, and
// http_request_stream.go the streamed body.
//
// Network policy. A command started without a sandbox context (the
// default every session's commands get: there is no executor-wide
// sandbox flag; a policy comes with each process/start) runs natively
// and has the executor's network, so an http/request, which carries no
// sandbox context either, gets the same network. The one case where
// commands have no network by default is an executor that itself runs
// confined without network (inside codex's or outpost's sandbox): the
// environment its commands inherit (Config.BaseEnv) then says so with
// CODEX_SANDBOX_NETWORK_DISABLED or OUTPOST_SANDBOX_NETWORK_DISABLED, and
// an http/request is refused with KindPermission instead of failing at
// socket(). A command's own sandbox policy with the network off confines
// that command, not the session, so it does not refuse http/request.

// Bounds of one connection's http/requests.
const (
	// maxHTTPInFlight bounds a connection's requests being sent plus its
	// streams still running; each holds one goroutine and one upstream
	// connection. A request past it is refused (KindExhausted), not
	// queued. Buffered requests also hold one of the connection's
	// MaxConcurrentReads slots while they wait.
	maxHTTPInFlight = 16
	// maxHTTPBufferedBody bounds a buffered response body: larger ones are
	// refused (KindTooLarge) rather than held; streamResponse has no
	// bound. With maxHTTPInFlight, buffered bodies hold at most 256 MiB of
	// one connection's memory. codex has no bound; 16 MiB is far past
	// the OAuth and MCP JSON answers buffered requests carry, and stays
	// well under protocol.MaxMessageBytes once in base64.
	maxHTTPBufferedBody = 16 << 20
	// httpDeltaBytes is the most body bytes one bodyDelta carries (codex's
	// client accepts up to protocol.MaxHTTPBodyDeltaBytes). A delta holds
	// its own copy until written, and the reply queue holds at most
	// maxPendingReplies messages, so a client that stops reading costs at
	// most 256 × 64 KiB = 16 MiB of queued deltas per connection, then the
	// stream waits (and its upstream server with it).
	httpDeltaBytes = 64 << 10
	// maxHTTPRequestHeaders and maxHTTPRequestHeaderBytes bound the
	// headers a request sends (names and values, environment values
	// included); maxHTTPResponseHeaderBytes what net/http reads of a
	// response's.
	maxHTTPRequestHeaders      = 256
	maxHTTPRequestHeaderBytes  = 256 << 10
	maxHTTPResponseHeaderBytes = 256 << 10
	// maxHTTPRequestIDBytes bounds a streamed request's id, which the
	// connection keeps while the stream runs.
	maxHTTPRequestIDBytes = 1024
	// httpDialTimeout bounds one TCP connect; timeoutMs, when given,
	// bounds the whole request.
	httpDialTimeout = 30 * time.Second
	// maxHTTPTimeoutMs is the longest timeoutMs a time.Duration holds
	// (292 years); a longer one is no timeout.
	maxHTTPTimeoutMs = uint64(math.MaxInt64 / int64(time.Millisecond))
)

// httpConn is one connection's http/request state. The zero value is
// ready; serverConn holds one.
type httpConn struct {
	mu       sync.Mutex
	inFlight int                 // requests being sent plus running streams, at most maxHTTPInFlight
	streams  map[string]struct{} // ids of running streams: at most maxHTTPInFlight
	tr       *http.Transport     // made on first use; idle connections close with the connection
}

// begin takes an in-flight slot and, for a stream, reserves its id: codex
// refuses an id that names a stream still running on the connection, so
// two streams' deltas can never be told apart wrongly.
func (h *httpConn) begin(id string, stream bool) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if stream {
		if _, busy := h.streams[id]; busy {
			return protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "http/request streamResponse requestId `%s` is already active", id)
		}
	}
	if h.inFlight >= maxHTTPInFlight {
		return protocol.KindErrorf(protocol.KindExhausted, protocol.CodeInvalidRequest,
			"too many http/requests in flight on this connection (limit %d, streams included): wait for one to finish", maxHTTPInFlight)
	}
	h.inFlight++
	if stream {
		if h.streams == nil {
			h.streams = make(map[string]struct{})
		}
		h.streams[id] = struct{}{}
	}
	return nil
}

// end gives back what begin took.
func (h *httpConn) end(c *serverConn, id string, stream bool) {
	h.mu.Lock()
	h.inFlight--
	if stream {
		delete(h.streams, id)
	}
	tr := h.tr
	h.mu.Unlock()
	if tr != nil && c.readCtx.Err() != nil {
		// The connection has gone: a request that finished after it
		// left its upstream connection idle; nothing will reuse it.
		tr.CloseIdleConnections()
	}
}

// transport is the connection's HTTP transport, made on first use.
// Upstream connections are reused across the connection's requests (a
// Streamable HTTP MCP session sends many) and closed with it.
func (h *httpConn) transport(c *serverConn) *http.Transport {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.tr == nil {
		h.tr = &http.Transport{
			// As codex: a proxy from the environment, never for loopback.
			Proxy:                  http.ProxyFromEnvironment,
			DialContext:            (&net.Dialer{Timeout: httpDialTimeout, KeepAlive: 30 * time.Second}).DialContext,
			ForceAttemptHTTP2:      true,
			MaxIdleConns:           maxHTTPInFlight,
			MaxIdleConnsPerHost:    maxHTTPInFlight,
			IdleConnTimeout:        90 * time.Second,
			TLSHandshakeTimeout:    10 * time.Second,
			ExpectContinueTimeout:  time.Second,
			MaxResponseHeaderBytes: maxHTTPResponseHeaderBytes,
		}
		context.AfterFunc(c.readCtx, h.tr.CloseIdleConnections)
	}
	return h.tr
}

// httpNetworkOff reports whether the commands of this executor have no
// network by default (see the package comment above): the environment
// they inherit marks it.
func httpNetworkOff(baseEnv []string) (string, bool) {
	for _, k := range []string{sandbox.EnvCodexSandboxNetworkOff, sandbox.EnvSandboxNetworkOff} {
		if v := envValue(baseEnv, k); v != "" && v != "0" {
			return k, true
		}
	}
	return "", false
}

// afterReplier is a result whose handler has work to start once its
// reply is queued (a streamed http/request's body): the request loop
// calls afterReply with whether the reply was queued, so nothing the work
// sends can overtake the reply, and work that will never be wanted is
// released.
type afterReplier interface {
	afterReply(queued bool)
}

// httpStreamReply is a streamed http/request's result: the status and
// headers, then the body as deltas once the reply is queued.
type httpStreamReply struct {
	protocol.HTTPRequestResult `msgpack:",inline"`
	stream                     *httpStream
}

func (r *httpStreamReply) afterReply(queued bool) {
	if queued {
		r.stream.start()
	} else {
		r.stream.abandon()
	}
}

// httpRequest serves http/request. It runs beside the read loop
// (longPoll): it waits on the network.
func (c *serverConn) httpRequest(m *transport.Message) (any, error) {
	p, err := decodeHTTPRequest(m)
	if err != nil {
		return nil, err
	}
	if p.StreamResponse && len(p.RequestID) > maxHTTPRequestIDBytes {
		return nil, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "http/request requestId must be at most %d bytes", maxHTTPRequestIDBytes)
	}
	h := &c.http
	if err := h.begin(p.RequestID, p.StreamResponse); err != nil {
		return nil, err
	}
	handedOff := false
	defer func() {
		if !handedOff {
			h.end(c, p.RequestID, p.StreamResponse)
		}
	}()
	req, err := prepareHTTPRequest(p, c.srv.cfg.BaseEnv)
	if err != nil {
		return nil, err
	}
	if name, off := httpNetworkOff(c.srv.cfg.BaseEnv); off {
		return nil, protocol.KindErrorf(protocol.KindPermission, protocol.CodeInvalidRequest,
			"http/request refused: the network is off for this executor's commands (%s is set in their environment), and http/request obeys the same policy", name)
	}

	ctx, cancel := context.WithCancel(c.readCtx)
	if p.TimeoutMs != nil && *p.TimeoutMs <= maxHTTPTimeoutMs {
		// The whole request: every redirect and the body, as codex's.
		// (Past maxHTTPTimeoutMs a Duration overflows: no bound, then.)
		cancel()
		ctx, cancel = context.WithTimeout(c.readCtx, time.Duration(*p.TimeoutMs)*time.Millisecond)
	}
	resp, err := sendHTTP(ctx, h.transport(c), req, p.RedirectPolicy != protocol.HTTPRedirectStop)
	if err != nil {
		cancel()
		return nil, httpSendError(ctx, p.TimeoutMs, err)
	}
	gunzip(resp)
	res := protocol.HTTPRequestResult{Status: resp.StatusCode, Headers: responseHeaders(resp), Body: []byte{}}
	if p.StreamResponse {
		handedOff = true
		s := &httpStream{c: c, id: p.RequestID, resp: resp, ctx: ctx, cancel: cancel, timeoutMs: p.TimeoutMs}
		return &httpStreamReply{HTTPRequestResult: res, stream: s}, nil
	}
	defer cancel()
	defer resp.Body.Close()
	body, err := readBufferedBody(resp)
	if err != nil {
		var pe *protocol.Error
		if errors.As(err, &pe) {
			return nil, pe
		}
		return nil, protocol.KindErrorf(protocol.KindUnavailable, protocol.CodeInternal, "failed to read http/request response body: %s", httpReadReason(ctx, p.TimeoutMs, err))
	}
	res.Body = body
	return res, nil
}

// gunzip decodes a gzip body net/http left encoded (the caller sent its
// own Accept-Encoding), as codex's client decodes every gzip body: the
// caller sees the bytes, without Content-Encoding or Content-Length.
// zstd, which codex also decodes, is not: outpost never offers it, so only
// a caller that asks for it gets it, encoded.
func gunzip(resp *http.Response) {
	if resp.Uncompressed || !strings.EqualFold(strings.TrimSpace(resp.Header.Get("Content-Encoding")), "gzip") {
		return
	}
	resp.Header.Del("Content-Encoding")
	resp.Header.Del("Content-Length")
	resp.ContentLength = -1
	resp.Uncompressed = true
	resp.Body = &lazyGzip{body: resp.Body}
}

// lazyGzip opens the gzip stream on the first read, so the handler does
// not wait on the body before it answers with the headers.
type lazyGzip struct {
	body io.ReadCloser
	zr   *gzip.Reader
	err  error
}

func (l *lazyGzip) Read(p []byte) (int, error) {
	if l.zr == nil && l.err == nil {
		l.zr, l.err = gzip.NewReader(l.body)
	}
	if l.err != nil {
		return 0, l.err
	}
	return l.zr.Read(p)
}

func (l *lazyGzip) Close() error { return l.body.Close() }

// readBufferedBody reads a whole body, at most maxHTTPBufferedBody bytes.
func readBufferedBody(resp *http.Response) ([]byte, error) {
	tooLarge := func() error {
		return protocol.KindErrorf(protocol.KindTooLarge, protocol.CodeInvalidRequest,
			"http/request response body exceeds %d bytes, the most a buffered request holds: use streamResponse", maxHTTPBufferedBody)
	}
	if resp.ContentLength > maxHTTPBufferedBody {
		return nil, tooLarge()
	}
	var buf bytes.Buffer
	if resp.ContentLength > 0 {
		buf.Grow(int(resp.ContentLength))
	}
	n, err := io.Copy(&buf, io.LimitReader(resp.Body, maxHTTPBufferedBody+1))
	if err != nil {
		return nil, err
	}
	if n > maxHTTPBufferedBody {
		return nil, tooLarge()
	}
	return buf.Bytes(), nil
}

// responseHeaders are a response's headers as codex sends them: names in
// lower case, values that are not visible ASCII left out (codex drops
// them too). net/http keeps headers in a map, so names come sorted, not
// in wire order; a repeated name keeps its values' order.
func responseHeaders(resp *http.Response) []protocol.HTTPHeader {
	out := []protocol.HTTPHeader{}
	for k, vs := range resp.Header {
		name := strings.ToLower(k)
		for _, v := range vs {
			if visibleASCII(v) {
				out = append(out, protocol.HTTPHeader{Name: name, Value: v})
			}
		}
	}
	if len(resp.TransferEncoding) > 0 {
		// net/http takes it out of the map; codex reports it.
		out = append(out, protocol.HTTPHeader{Name: "transfer-encoding", Value: strings.Join(resp.TransferEncoding, ", ")})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// visibleASCII reports whether a header value is tabs and printable
// ASCII only, what codex's HeaderValue::to_str accepts.
func visibleASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if b := s[i]; b != '\t' && (b < ' ' || b > '~') {
			return false
		}
	}
	return true
}

// httpSendError is the error of a request that got no response.
func httpSendError(ctx context.Context, timeoutMs *uint64, err error) error {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return pe
	}
	var re *redirectError
	if errors.As(err, &re) {
		return protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInternal, "http/request failed: %s", re.msg)
	}
	return protocol.KindErrorf(protocol.KindUnavailable, protocol.CodeInternal, "http/request failed: %s", httpReadReason(ctx, timeoutMs, err))
}

// httpReadReason says why a send or a body read failed: the request's own
// timeout by name, anything else as net/http puts it.
func httpReadReason(ctx context.Context, timeoutMs *uint64, err error) string {
	if timeoutMs != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Sprintf("timed out after %dms (timeoutMs)", *timeoutMs)
	}
	return err.Error()
}
