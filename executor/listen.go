package executor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/zap"

	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/transport"
)

// ListenURL is a parsed --listen URL.
type ListenURL struct {
	Scheme string // "ws" or "stdio"
	Addr   string // IP:PORT for ws
}

// DefaultListenURL is the listen URL when none is given.
const DefaultListenURL = "ws://127.0.0.1:0"

// ParseListenURL accepts ws://IP:PORT (an IP literal, not a name) and
// stdio (or stdio://), with codex's error messages: a thin wrapper over
// transport.ParseURL.
func ParseListenURL(s string) (ListenURL, error) {
	if s == "stdio" || s == "stdio://" {
		return ListenURL{Scheme: transport.SchemeStdio}, nil
	}
	u, err := transport.ParseURL(s, transport.SchemeWS)
	if err != nil && transport.URLErrorScheme(err) == "" {
		return ListenURL{}, &UnsupportedListenError{URL: s}
	}
	ap, aerr := netip.ParseAddrPort(u.Addr)
	if err != nil || aerr != nil || u.Path != "" {
		return ListenURL{}, fmt.Errorf("invalid websocket --listen URL `%s`; expected `ws://IP:PORT`", s)
	}
	return ListenURL{Scheme: transport.SchemeWS, Addr: ap.String()}, nil
}

// UnsupportedListenError is a --listen URL of a scheme the codex front
// does not serve; its message is codex's. A front end that also serves
// other schemes names them with Expect.
type UnsupportedListenError struct {
	URL    string
	Expect string // default "`ws://IP:PORT` or `stdio`"
}

func (e *UnsupportedListenError) Error() string {
	expect := e.Expect
	if expect == "" {
		expect = "`ws://IP:PORT` or `stdio`"
	}
	return fmt.Sprintf("unsupported --listen URL `%s`; expected %s", e.URL, expect)
}

// WSConfig configures the WebSocket front. The zero value is usable:
// WSHandler and ListenWS fill its zero fields from DefaultWSConfig.
type WSConfig struct {
	// Token, when non-empty, is required as "Authorization: Bearer <token>"
	// on the upgrade; /readyz stays open (default "": no token).
	Token string
	// TokenSHA256, when set, is the SHA-256 digest of the required bearer
	// token instead (codex's --ws-token-sha256).
	TokenSHA256 []byte
	// PingInterval is the keepalive interval: a ping every interval, and a
	// peer that does not answer within the same interval is disconnected,
	// its session detached (default 30 s).
	PingInterval time.Duration
	// MaxMessageBytes caps one inbound message (default
	// protocol.MaxMessageBytes); larger ones are refused with an error.
	MaxMessageBytes int64
}

// DefaultWSConfig returns the default configuration of the WebSocket
// front.
func DefaultWSConfig() WSConfig {
	return WSConfig{PingInterval: 30 * time.Second, MaxMessageBytes: protocol.MaxMessageBytes}
}

// withDefaults fills every zero field that has a default from
// DefaultWSConfig.
func (c WSConfig) withDefaults() WSConfig {
	d := DefaultWSConfig()
	c.PingInterval = cmp.Or(c.PingInterval, d.PingInterval)
	c.MaxMessageBytes = cmp.Or(c.MaxMessageBytes, d.MaxMessageBytes)
	return c
}

// Validate reports the first invalid field. It takes the configuration
// as it is: a zero field is invalid here, though WSHandler would fill it.
func (c WSConfig) Validate() error {
	switch {
	case c.PingInterval <= 0:
		return errors.New("executor: WSConfig.PingInterval must be positive")
	case c.MaxMessageBytes < 1:
		return errors.New("executor: WSConfig.MaxMessageBytes must be at least 1")
	}
	if err := c.auth().Validate(); err != nil {
		return fmt.Errorf("executor: WSConfig.TokenSHA256: %w", err)
	}
	return nil
}

func (c WSConfig) auth() transport.WSAuth {
	return transport.WSAuth{Token: c.Token, TokenSHA256: c.TokenSHA256}
}

// WSHandler serves codex's JSON-RPC lite over WebSocket at "/" and a
// readiness probe at "/readyz". Requests carrying an Origin header are
// refused with 403: a browser page must not reach an executor. cfg is
// validated, its zero fields filled from DefaultWSConfig.
func (s *Server) WSHandler(ctx context.Context, cfg WSConfig) (http.Handler, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		closing := s.closing
		s.mu.Unlock()
		if closing {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		if !cfg.auth().Allow(w, r) {
			return
		}
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{
			InsecureSkipVerify: true, // Origin is refused above
			CompressionMode:    websocket.CompressionDisabled,
		})
		if err != nil {
			s.log.Debug("websocket upgrade failed", zap.Error(err))
			return
		}
		connCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		go keepalive(connCtx, c, cfg.PingInterval, cancel)
		// Partly read messages count against the executor's budget, as on
		// the native transport (a WebSocket connection is one stream).
		frames := transport.NewWSFrames(c, cfg.MaxMessageBytes)
		frames.SetReadBudget(s.reads)
		err = s.ServeConn(connCtx, transport.NewJSONConn(frames))
		if err != nil && !isClosedErr(err) {
			s.log.Debug("websocket connection ended", zap.Error(err))
		}
	})
	return mux, nil
}

func keepalive(ctx context.Context, c *websocket.Conn, every time.Duration, dead func()) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, every)
		err := c.Ping(pctx)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				c.CloseNow()
				dead()
			}
			return
		}
	}
}

func isClosedErr(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, context.Canceled) ||
		websocket.CloseStatus(err) != -1
}

// WSListener serves the WebSocket front on a listener.
type WSListener struct {
	srv    *Server
	ln     net.Listener
	http   *http.Server
	cancel context.CancelFunc
	done   <-chan struct{}
	once   sync.Once
}

// ListenWS binds addr (IP:PORT) and starts serving; cfg is validated,
// its zero fields filled from DefaultWSConfig.
func (s *Server) ListenWS(addr string, cfg WSConfig) (*WSListener, error) {
	ctx, cancel := context.WithCancel(context.Background())
	h, err := s.WSHandler(ctx, cfg)
	if err != nil {
		cancel()
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		cancel()
		return nil, err
	}
	l := &WSListener{srv: s, ln: ln, cancel: cancel}
	l.http, l.done = transport.ServeHTTP(ln, h, zap.NewStdLog(s.log))
	return l, nil
}

// URL is the bound ws:// URL.
func (l *WSListener) URL() string { return "ws://" + l.ln.Addr().String() }

// Addr is the bound address.
func (l *WSListener) Addr() net.Addr { return l.ln.Addr() }

// StopAccepting closes the port; open connections go on until Close
// (Server.Shutdown flushes them in between).
func (l *WSListener) StopAccepting() error {
	if err := l.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}

// Close stops accepting and ends every connection (their sessions detach).
func (l *WSListener) Close() error {
	l.once.Do(func() {
		l.cancel()
		l.http.Close()
	})
	<-l.done
	return nil
}

// ServeStdio serves one connection over r and w, one JSON message per
// line, until r ends.
func (s *Server) ServeStdio(ctx context.Context, r io.Reader, w io.Writer) error {
	frames := transport.NewLineFrames(r, w, nil, 0)
	frames.SetReadBudget(s.reads)
	err := s.ServeConn(ctx, transport.NewJSONConn(frames))
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}
