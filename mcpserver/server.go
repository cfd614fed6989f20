package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/outpost-exec/outpost/client"
	"github.com/outpost-exec/outpost/pathmap"
)

// Server is the MCP server: one tool set over the configured executors,
// with the handles of each MCP session kept apart.
type Server struct {
	cfg   Config
	mcp   *mcp.Server
	conns map[string]*conn
	order []string // executor ids as configured

	mu       sync.Mutex
	sessions map[*mcp.ServerSession]*session
	closed   bool
	ending   sync.WaitGroup // sessions whose processes are being terminated

	standalone chan struct{} // HTTP requests in flight without a session
}

// New builds a Server; cfg's zero fields are filled from DefaultConfig
// first.
func New(cfg Config) (*Server, error) {
	cfg.fill()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, conns: map[string]*conn{}, sessions: map[*mcp.ServerSession]*session{}, standalone: make(chan struct{}, cfg.MaxSessions)}
	for _, e := range cfg.Executors {
		s.conns[e.ID] = &conn{ex: e}
		s.order = append(s.order, e.ID)
	}
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: cfg.Name, Title: "outpost: remote executors", Version: cfg.Version}, &mcp.ServerOptions{
		Instructions: instructions,
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}},
	})
	s.mcp.AddReceivingMiddleware(s.auditMiddleware)
	s.addTools()
	return s, nil
}

const instructions = "Runs commands and edits files on remote machines (outpost executors) through an end-to-end encrypted relay. " +
	"Use run for a command that finishes; start, read, write_stdin and terminate for one that keeps running (a server, a watcher, an interactive program). " +
	"Relative paths are relative to the workspace. Commands run sandboxed (workspace-write on the workspace unless told otherwise)."

// MCP returns the SDK server, for a transport of the caller's own.
func (s *Server) MCP() *mcp.Server { return s.mcp }

// ServeStdio serves one MCP session on in and out (newline-delimited
// JSON-RPC, as an agent that launched `outpost mcp` speaks it) until the
// client closes in or ctx ends.
func (s *Server) ServeStdio(ctx context.Context, in io.ReadCloser, out io.WriteCloser) error {
	err := s.mcp.Run(ctx, &mcp.IOTransport{Reader: in, Writer: out, MaxLineLength: MaxMessageBytes})
	if errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// HTTPOptions configure the Streamable HTTP handler.
type HTTPOptions struct {
	// Token, when set, is the bearer token every request must carry
	// (Authorization: Bearer …).
	Token string
	// SessionTimeout closes a session idle this long (default 30 min); its
	// processes are terminated.
	SessionTimeout time.Duration
}

// HTTPHandler serves MCP's Streamable HTTP transport. Beyond the bearer
// token, the SDK refuses a request to a loopback address whose Host is
// not loopback (DNS rebinding), and a cross-origin browser request is
// refused before it reaches a tool (http.CrossOriginProtection: a web
// page must not drive a local server).
func (s *Server) HTTPHandler(opts HTTPOptions) http.Handler {
	if opts.SessionTimeout == 0 {
		opts.SessionTimeout = 30 * time.Minute
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.mcp }, &mcp.StreamableHTTPOptions{
		SessionTimeout:      opts.SessionTimeout,
		MaxRequestBodyBytes: MaxMessageBytes,
	})
	cop := http.NewCrossOriginProtection()
	return bearer(opts.Token, originCheck(s.sessionLimit(cop.Handler(h))))
}

// sessionLimit bounds what requests without Mcp-Session-Id may open.
// Under protocol versions before 2026-07-28 such a POST opens a session:
// refused with 503 while MaxSessions are open. From 2026-07-28 a request
// may stand alone (its session lives as long as the request): at most
// MaxSessions of those are served at once.
func (s *Server) sessionLimit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Header.Get("Mcp-Session-Id") != "" {
			next.ServeHTTP(w, r)
			return
		}
		busy := func(what string) {
			w.Header().Set("Retry-After", "5")
			http.Error(w, "outpost mcp: "+what, http.StatusServiceUnavailable)
		}
		if v := r.Header.Get("Mcp-Protocol-Version"); v >= "2026-07-28" {
			select {
			case s.standalone <- struct{}{}:
				defer func() { <-s.standalone }()
			default:
				busy(fmt.Sprintf("%d requests without a session are in flight, the most this server takes", cap(s.standalone)))
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		// Sessions that were sent initialize count against MaxSessions;
		// any other with an id (a probe's, on its way out) is bounded
		// too, at twice that.
		n, all := 0, 0
		for ss := range s.mcp.Sessions() {
			if ss.ID() == "" {
				continue
			}
			all++
			if ss.InitializeParams() != nil {
				n++
			}
		}
		if n >= s.cfg.MaxSessions || all >= 2*s.cfg.MaxSessions {
			busy(fmt.Sprintf("%d sessions are open, the most this server takes", n))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Close terminates every session's processes and closes the executor
// connections.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	sessions := make([]*session, 0, len(s.sessions))
	for _, ss := range s.sessions {
		sessions = append(sessions, ss)
	}
	s.sessions = map[*mcp.ServerSession]*session{}
	s.mu.Unlock()
	for _, ss := range sessions {
		ss.end()
	}
	// A session that closed just before (stdin's end, as ServeStdio
	// returns) may still be terminating its processes: they need the
	// connections a little longer.
	s.ending.Wait()
	for _, c := range s.conns {
		c.close()
	}
	return nil
}

// session returns the state of an MCP session, made on first use; it is
// ended (its processes terminated) when the session closes.
func (s *Server) session(ms *mcp.ServerSession) (*session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errorf(ErrUnavailable, "the server is shutting down")
	}
	if ss, ok := s.sessions[ms]; ok {
		return ss, nil
	}
	ss := newSession(s.cfg.MaxHandles)
	s.sessions[ms] = ss
	if ms != nil {
		go func() {
			ms.Wait()
			s.mu.Lock()
			_, mine := s.sessions[ms]
			if mine { // not already taken by Close
				delete(s.sessions, ms)
				s.ending.Add(1)
			}
			s.mu.Unlock()
			if mine {
				ss.end()
				s.ending.Done()
			}
		}()
	}
	return ss, nil
}

// conn is one executor's connection, dialled on first use.
type conn struct {
	ex Executor

	mu        sync.Mutex
	env       client.Environment
	workspace string // the executor's default cwd, once asked
}

// get returns a live connection, dialling when there is none or the last
// was given up.
func (c *conn) get(ctx context.Context) (client.Environment, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.env != nil {
		if r, ok := c.env.(interface{ Err() error }); !ok || r.Err() == nil {
			return c.env, nil
		}
		c.env.Close()
		c.env = nil
	}
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	env, err := c.ex.Dial(dctx)
	if err != nil {
		return nil, fmt.Errorf("%w: cannot reach executor %q: %w", ErrUnavailable, c.ex.ID, err)
	}
	c.env = env
	return env, nil
}

// defaultCwd is the executor's default working directory (its
// environment/info cwd).
func (c *conn) defaultCwd(ctx context.Context, env client.Environment) (string, error) {
	c.mu.Lock()
	ws := c.workspace
	c.mu.Unlock()
	if ws != "" {
		return ws, nil
	}
	info, err := env.Info(ctx)
	if err != nil {
		return "", fmt.Errorf("%w: executor %q: %w", ErrUnavailable, c.ex.ID, err)
	}
	ws, err = pathmap.Native(info.Cwd)
	if err != nil || info.Cwd == "" {
		return "", errorf(ErrUnavailable, "executor %q reports no usable working directory (%q); give the server a workspace", c.ex.ID, info.Cwd)
	}
	c.mu.Lock()
	c.workspace = ws
	c.mu.Unlock()
	return ws, nil
}

func (c *conn) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.env != nil {
		c.env.Close()
		c.env = nil
	}
}

// target is what a tool call resolved: the executor, its connection and
// the workspace.
type target struct {
	id        string
	env       client.Environment
	workspace string
}

// reach resolves a call's "executor" argument and connects.
func (s *Server) reach(ctx context.Context, id string) (target, error) {
	if id == "" {
		id = s.order[0]
	}
	c, ok := s.conns[id]
	if !ok {
		return target{id: id}, errorf(ErrUnknownExecutor, "unknown executor %q: this server may reach %v", id, s.order)
	}
	env, err := c.get(ctx)
	if err != nil {
		return target{id: id}, err
	}
	ws := s.cfg.Workspace
	if ws == "" {
		if ws, err = c.defaultCwd(ctx, env); err != nil {
			return target{id: id}, err
		}
	}
	return target{id: id, env: env, workspace: ws}, nil
}
