// Package executor is outpost's exec-server: it serves remote clients the
// process methods (start, stream output, write stdin, signal, resize,
// terminate, resume after a dropped connection) and the fs/* methods.
//
// A Server owns sessions. A connection calls initialize to open a session
// (or re-attach a detached one), then drives it through the method table
// in conn.go, shared by every codec; conn.go also schedules the
// connection's writes (replies first, then each process's events, round
// robin). Processes belong to the session, not the connection: when the
// connection drops, the session detaches and its processes keep running
// for Config.DetachedTTL, their output retained (bounded) for a later
// process/read. The front ends are listen.go (ws:// and stdio, the codex
// stack), native.go (tcp:// and unix:// behind Noise and the multiplexer) and
// join.go (an executor joined to a relay).
//
// What runs processes and keeps their output is package engine
// (Config.Backend); the fs/* methods are package remotefs, one
// remotefs.Session per session. This package prepares a start (path
// mapping, environment, sandbox policy) and serves both to clients.
//
// Bounds: Config.MaxSessions sessions; Config.MaxProcessesPerSession
// processes per session (running, starting, or closed and retained; a full
// table evicts its oldest closed process before refusing a start); per
// process, what the engine bounds (engine.Retention, a stdin queue, at most
// four goroutines) and, with metrics or tracing on, one waiter; per
// connection, Config.MaxConcurrentReads long polls and fs calls and
// maxPendingReplies queued replies; per session, Config.MaxFileHandles open
// files.
package executor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"go.opentelemetry.io/otel/trace"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/outpost-exec/outpost/engine"
	"github.com/outpost-exec/outpost/identity"
	"github.com/outpost-exec/outpost/internal/uuid"
	"github.com/outpost-exec/outpost/pathmap"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/remotefs"
	"github.com/outpost-exec/outpost/sandbox"
	"github.com/outpost-exec/outpost/transport"
)

// Config configures a Server. Start from DefaultConfig.
type Config struct {
	// Backend starts the processes (default engine.NewLocalBackend()).
	Backend engine.Backend
	Logger  *zap.Logger
	// MaxSessions bounds live sessions, attached or detached (default 1024).
	MaxSessions int
	// MaxProcessesPerSession bounds one session's process table (default
	// 1024). Closed processes stay readable for ClosedRetention, but a full
	// table gives up the oldest closed one rather than refuse a start.
	MaxProcessesPerSession int
	// DetachedTTL is how long a detached session's processes keep running
	// before they are killed (default 5 min).
	DetachedTTL time.Duration
	// ClosedRetention is how long a closed process stays readable before
	// its id is forgotten and may be reused (default 30 s).
	ClosedRetention time.Duration
	// MaxConcurrentReads bounds in-flight process/read long polls per
	// connection (default 32).
	MaxConcurrentReads int
	// DefaultCwd is the cwd of a start request without one (default: the
	// executor's working directory).
	DefaultCwd string
	// BaseEnv is what an envPolicy inherits from (default: os.Environ()).
	BaseEnv []string
	// Version is reported by environment/info.
	Version string
	// SandboxCaps reports what this machine can enforce (default:
	// sandbox.Probe, run once).
	SandboxCaps func() sandbox.Capabilities
	// SandboxLimits are the resource limits of sandboxed commands.
	SandboxLimits sandbox.Limits
	// SandboxUser is the host id sandboxed commands run as when the
	// executor runs as root (default sandbox.DefaultUser, 65534:65534):
	// root inside their user namespace, never uid 0 on the host. A
	// non-root executor runs them as itself and must leave it nil.
	SandboxUser *sandbox.User
	// SandboxHidden are the executor's own secrets — its state directory,
	// the client configuration, its Unix listener sockets, a co-located
	// relay's state — hidden (access none) from every sandboxed command and
	// every fs call judged by a policy (default DefaultHiddenPaths()).
	SandboxHidden []string
	// PathMappings translate client path prefixes to executor ones
	// (client /workspace → executor /srv/ws/42) for cwd and sandbox roots.
	PathMappings []pathmap.Mapping
	// MaxFileBytes bounds a whole-file fs/readFile or fs/writeFile (default
	// 64 MiB); larger files go through fs/open or fs/create and blocks.
	MaxFileBytes int64
	// MaxFileHandles bounds a session's open fs handles (default 64).
	MaxFileHandles int
	// MessageReadBytes bounds the partly read messages of every
	// connection together, past the first 64 KiB of each (a
	// transport.ReadBudget; default 256 MiB, four messages of the largest
	// size; 0 selects it, else at least protocol.MaxMessageBytes, so one
	// message of the largest size always fits). A message past it is
	// dropped and refused (KindExhausted). See readbudget.go.
	MessageReadBytes int64
	// Metrics, if set, counts processes for Prometheus.
	Metrics *Metrics
	// TracerProvider, if set, records OpenTelemetry spans for handshakes
	// and processes, joining the client's trace when it sends W3C trace
	// context (see package internal/tracing).
	TracerProvider trace.TracerProvider
}

// DefaultConfig returns the default configuration with an engine.LocalBackend.
func DefaultConfig() Config {
	cwd, _ := os.Getwd()
	return Config{
		Backend:                engine.NewLocalBackend(),
		Logger:                 zap.NewNop(),
		MaxSessions:            1024,
		MaxProcessesPerSession: 1024,
		MaxFileBytes:           64 << 20,
		MaxFileHandles:         64,
		MessageReadBytes:       transport.DefaultProcessReadBytes,
		DetachedTTL:            5 * time.Minute,
		ClosedRetention:        30 * time.Second,
		MaxConcurrentReads:     32,
		DefaultCwd:             cwd,
		BaseEnv:                os.Environ(),
		Version:                "dev",
		SandboxCaps:            sandbox.Probe,
		SandboxLimits:          sandbox.DefaultLimits(),
		SandboxHidden:          DefaultHiddenPaths(),
	}
}

// DefaultHiddenPaths are the secrets every executor hides from sandboxes:
// the default state directory (executor and relay keys, the token
// database) and the client configuration directory (client key, pins).
func DefaultHiddenPaths() []string {
	var out []string
	for _, d := range []string{identity.DefaultStateDir(), identity.DefaultConfigDir(), identity.SystemStateDir} {
		if d != "" && !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// Validate reports the first invalid setting.
func (c Config) Validate() error {
	switch {
	case c.Backend == nil:
		return errors.New("executor: Backend is required")
	case c.MaxSessions < 1:
		return errors.New("executor: MaxSessions must be at least 1")
	case c.MaxProcessesPerSession < 1:
		return errors.New("executor: MaxProcessesPerSession must be at least 1")
	case c.MaxFileBytes < 1:
		return errors.New("executor: MaxFileBytes must be positive")
	case c.MaxFileHandles < 1:
		return errors.New("executor: MaxFileHandles must be at least 1")
	case c.DetachedTTL <= 0:
		return errors.New("executor: DetachedTTL must be positive")
	case c.ClosedRetention <= 0:
		return errors.New("executor: ClosedRetention must be positive")
	case c.MaxConcurrentReads < 1:
		return errors.New("executor: MaxConcurrentReads must be at least 1")
	case c.MessageReadBytes != 0 && c.MessageReadBytes < protocol.MaxMessageBytes:
		return fmt.Errorf("executor: MessageReadBytes must be at least %d (or 0 for the default)", protocol.MaxMessageBytes)
	case c.SandboxUser != nil && c.SandboxUser.UID == 0:
		return fmt.Errorf("executor: SandboxUser: %w", sandbox.ErrRootSandboxUser)
	case c.SandboxUser != nil && os.Geteuid() != 0 && c.SandboxUser.UID != os.Geteuid():
		return fmt.Errorf("executor: SandboxUser %s: only an executor running as root can run sandboxed commands as another user", c.SandboxUser)
	}
	for _, h := range c.SandboxHidden {
		if !filepath.IsAbs(h) {
			return fmt.Errorf("executor: SandboxHidden: %q is not absolute", h)
		}
	}
	if lb, ok := c.Backend.(*engine.LocalBackend); ok {
		if err := lb.Retention.Validate(); err != nil {
			return fmt.Errorf("executor: %w", err)
		}
	}
	return nil
}

// Server is the exec-server: a registry of sessions shared by all
// connections, so a session can move from a dropped connection to a new one.
type Server struct {
	cfg Config
	log *zap.Logger

	mapper *pathmap.Mapper
	files  remotefs.Config // each session's file system

	// watchers are the goroutines that log (and count) each process's
	// end: one per live process; Shutdown waits for them.
	watchers sync.WaitGroup

	mu       sync.Mutex
	sessions map[string]*Session
	closing  bool

	// reads bounds every connection's partly read messages together
	// (Config.MessageReadBytes).
	reads *transport.ReadBudget

	// early is the strike register of early data (early.go), one for
	// every native listener and relay the server serves: a message 1
	// recorded on one path must not be accepted on another.
	early *earlyGuard
}

// translate maps a client path (URI or absolute) to a native path.
func (s *Server) translate(p string) (string, error) { return s.mapper.ToExecutor(p) }

// NewServer validates cfg and returns a Server.
func NewServer(cfg Config) (*Server, error) {
	if err := platformSupported(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.BaseEnv == nil {
		cfg.BaseEnv = os.Environ()
	}
	if cfg.DefaultCwd == "" {
		cfg.DefaultCwd, _ = os.Getwd()
	}
	// Its real path: a sandboxed start without a cwd works there, and a
	// workspace is named by its real path (see sandbox.ErrSymlinkedWorkspace).
	if real, err := filepath.EvalSymlinks(cfg.DefaultCwd); err == nil {
		cfg.DefaultCwd = real
	}
	if cfg.SandboxCaps == nil {
		cfg.SandboxCaps = sandbox.Probe
	}
	if cfg.SandboxUser == nil && os.Geteuid() == 0 {
		u := sandbox.DefaultUser
		cfg.SandboxUser = &u
	}
	if cfg.SandboxUser != nil && os.Geteuid() != 0 && cfg.SandboxUser.UID == os.Geteuid() {
		cfg.SandboxUser = nil // itself: nothing to map
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	mapper, err := pathmap.NewMapper(cfg.PathMappings...)
	if err != nil {
		return nil, fmt.Errorf("executor: path mappings: %w", err)
	}
	files := remotefs.Config{Paths: mapper, Hidden: cfg.SandboxHidden, MaxFileBytes: cfg.MaxFileBytes, MaxFileHandles: cfg.MaxFileHandles}
	cfg.MessageReadBytes = cmp.Or(cfg.MessageReadBytes, transport.DefaultProcessReadBytes)
	reads := transport.NewReadBudget("executor", cfg.MessageReadBytes, nil)
	return &Server{cfg: cfg, log: cfg.Logger, sessions: make(map[string]*Session), mapper: mapper, files: files, reads: reads, early: newEarlyGuard(nil)}, nil
}

// Config returns the server's configuration.
func (s *Server) Config() Config { return s.cfg }

// ErrShuttingDown refuses new sessions during shutdown.
var ErrShuttingDown = errors.New("executor is shutting down")

// newSession creates and registers a session attached to nothing yet.
func (s *Server) newSession() (*Session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return nil, protocol.Errorf(protocol.CodeInvalidRequest, "%v", ErrShuttingDown)
	}
	if len(s.sessions) >= s.cfg.MaxSessions {
		return nil, protocol.Errorf(protocol.CodeInvalidRequest, "too many sessions on this executor (limit %d)", s.cfg.MaxSessions)
	}
	id := uuid.New()
	sess := &Session{id: id, srv: s, files: remotefs.NewSession(s.files, id), procs: make(map[string]*procEntry)}
	s.sessions[sess.id] = sess
	return sess, nil
}

// OpenSession opens a session that no connection is attached to, for a
// caller that embeds the executor and drives processes through the
// Session's methods (the benchmarks measure starts so). It never detaches,
// so it does not expire: it ends with Shutdown. Connections open theirs
// with initialize.
func (s *Server) OpenSession() (*Session, error) { return s.newSession() }

func (s *Server) lookup(id string) *Session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessions[id]
}

func (s *Server) remove(sess *Session) {
	s.mu.Lock()
	if s.sessions[sess.id] == sess {
		delete(s.sessions, sess.id)
	}
	s.mu.Unlock()
}

// SessionCount returns the number of live sessions.
func (s *Server) SessionCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions)
}

// Shutdown refuses new sessions, terminates every process of every session
// (TERM, then KILL after the backend's grace) and waits until they have
// closed or ctx is done, when the rest are killed. Then it waits, within
// ctx, until connected clients have been sent each process's exit and
// close events; close the listeners after it, not before (StopAccepting
// first keeps new connections out meanwhile).
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	sessions := make([]*Session, 0, len(s.sessions))
	for _, sess := range s.sessions {
		sessions = append(sessions, sess)
	}
	s.mu.Unlock()
	// Sandbox helpers started ahead of commands die with it: none will
	// serve a command of this server now.
	if b, ok := s.cfg.Backend.(interface{ Close() }); ok {
		b.Close()
	}
	var procs []engine.Process
	for _, sess := range sessions {
		procs = append(procs, sess.end(false)...)
	}
	for _, p := range procs {
		if !p.Terminate() {
			// Exited, but something it started may still hold its
			// output open: end the whole group now.
			p.Kill()
		}
	}
	for _, p := range procs {
		select {
		case <-p.Log().Closed():
		case <-ctx.Done():
			for _, p := range procs {
				p.Kill()
			}
			return ctx.Err()
		}
	}
	// Their end is logged and counted before Shutdown returns.
	logged := make(chan struct{})
	go func() { s.watchers.Wait(); close(logged) }()
	select {
	case <-logged:
	case <-ctx.Done():
		return ctx.Err()
	}
	// Flush: connected clients get every process's exit and close events
	// before the caller closes the connections.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for _, p := range procs {
		for p.Log().Subscribers() > 0 {
			select {
			case <-tick.C:
			case <-ctx.Done():
				return fmt.Errorf("executor shutdown: exit events not yet delivered: %w", ctx.Err())
			}
		}
	}
	return nil
}
