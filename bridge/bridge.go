// Package bridge lets a codex client use an outpost executor it cannot
// reach directly. It serves codex's exec-server protocol — JSON-RPC lite
// over WebSocket or stdio, exactly as `outpost executor serve` does —
// and forwards every request over outpost's native transport (Noise IK end
// to end with the executor's key pinned, the multiplexer, msgpack), straight to a
// tcp:// or unix:// executor or through a relay:
//
//	codex ──ws://──► bridge ──client.Remote (Noise IK, mux)──► [relay] ──► executor
//
// # Sessions
//
// A codex connection's `initialize` opens a bridge session: the bridge
// dials an upstream client.Remote of its own for it (Config.Dial), which
// holds one executor session, and answers with a session id of its own
// (the executor's never reaches codex). When the WebSocket drops, the
// session is detached, not ended: its upstream connection and processes
// stay for Config.DetachedTTL, and an `initialize` with `resumeSessionId`
// re-attaches it — the process notifications that had not been written to
// the old connection are written to the new one, in order, and everything
// older can be read back with `process/read` (forwarded to the executor's
// retention). A session attached elsewhere refuses with -32010; one that
// expired or failed is unknown (-32600). An expiring session terminates
// its processes on the executor before it closes the upstream connection.
//
// Underneath, client.Remote survives what it can: a dropped upstream
// connection or a relay restart is resumed (the same executor session,
// each process replayed from its last delivered event, exactly once and in
// order), invisibly to codex.
//
// # Requests
//
// One front end: the bridge serves initialize and process/* itself — it
// keeps their state, the sessions and the processes whose events it
// forwards and resumes — and forwards every other request as codex wrote
// it (client.Remote.CallCodex: codex/call on the native transport,
// PROTOCOL.md 4.4), so a method the executor gains (fs/walk,
// http/request, environmentConfig/read, …) passes through without a change
// here, with the executor's result or error (code, message, kind) back
// unchanged; a method the executor lacks is its -32601. The executor's
// other notifications (fs/missingChanged, http/request/bodyDelta) reach
// codex through the session's queue, in the executor's order. process/start
// too is sent as codex wrote it (client.Remote.StartProcessCodex: the
// executor decodes and judges every field, its sandbox object included, and
// its result comes back as it sent it); the bridge reads only the process
// id, and then forwards that process's events as codex notifications —
// process/output (base64 chunk), process/exited and process/closed, with
// the shapes the executor's own JSON front uses — in seq order, each once,
// after the reply to the start.
//
// As on the executor, requests that change a process (start, write,
// signal, terminate, resize) run one at a time in arrival order, while
// process/read (which may long-poll) and the forwarded methods run beside
// them. `process/write` keeps codex's writeId, so a write retried after an
// upstream reconnect is applied once; reads and other idempotent requests
// are retried across reconnects (client.Idempotent, and CallCodex's
// read-only methods), the rest fail with an error naming the disconnect.
//
// codex connects over a WebSocket (Handler, Listen) — the upgrade checked
// by transport.WSAuth, as the executor's ws listener checks it — or over
// stdin and stdout (ServeStdio), as a program codex starts.
//
// # Failure
//
// When the upstream connection is lost for good (client.Remote gives up
// resuming), every process of the session that has not closed gets a
// process/closed notification (with no process/exited before it: its end
// is unknown), requests in flight get -32603 errors naming the cause, and
// the WebSocket is closed with status 1011 and the reason. A single process
// whose output was evicted on the executor while the upstream connection
// was down (client.ErrOutputLost) is followed on by process/read from
// after the gap, which is logged; codex sees the seq jump, as it would
// from codex's own server.
//
// # Backpressure and bounds
//
// Nothing is dropped to make room. A session's notifications pass through
// one queue of Config.EventQueue (128) events, filled by one forwarder per
// process and drained by the attached connection's writer, which writes
// replies first. Blocked forwarders are served in turn (a channel's
// waiting senders are first in, first out), so a process with a flood of
// output delays another's next event by at most the queue plus one event
// per other process, never starves it. When codex reads slowly (or the session is detached) the
// queue fills, the forwarders stop reading their client.Process, whose
// bounded buffer (client.EventBuffer) fills, and the executor slows those
// processes down — their output waits, it is not evicted.
//
//   - Wrong bearer tokens: Config.MaxFailedTokens (20) from one address
//     (IPv4, or IPv6 /64) within Config.FailureWindow (1 min), and the
//     address is refused with HTTP 429 for the rest of the window, even
//     with the right token (transport.WSAuth; at most
//     admission.DefaultMaxEntries, 16,384, addresses tracked).
//   - WebSocket connections: Config.MaxConnections (128); more are refused
//     with HTTP 503. Each has a reader, a writer, an in-order worker, a
//     keepalive, 256 queued replies, 64 queued in-order requests and
//     Config.MaxConcurrentCalls (32) concurrent process/read and fs/*
//     calls (a goroutine each); the reader waits when these are full.
//   - Sessions: Config.MaxSessions (64), attached or detached; when full,
//     the longest-detached session is ended to make room, and if none is
//     detached initialize is refused. Each has one upstream client.Remote
//     and a goroutine watching it.
//   - Processes: Config.MaxProcessesPerSession (1024) not yet closed per
//     session (the executor's own limit applies too), one forwarder
//     goroutine each; a closed process leaves the bridge's table at once
//     (the executor keeps it readable for its closed retention).
//   - Memory per process: client.EventBuffer (1024) events held by the
//     client library plus one in its forwarder; per session the queue.
//   - Detached sessions live Config.DetachedTTL (5m).
//   - Messages: 64 MiB (protocol.MaxMessageBytes) each way; a result too
//     large for one JSON message becomes an error, as on the executor.
//     Partly read messages from codex: Config.MessageReadBytes (256 MiB)
//     for all connections together, past the first 64 KiB of each
//     (transport.ReadBudget); a message past it is dropped as it arrives
//     and its request refused, KindExhausted.
package bridge

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"
	"go.uber.org/zap"

	"github.com/outpost-exec/outpost/client"
	"github.com/outpost-exec/outpost/internal/admission"
	"github.com/outpost-exec/outpost/internal/uuid"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/transport"
)

// Defaults of Config's bounds.
const (
	DefaultMaxConnections         = 128
	DefaultMaxSessions            = 64
	DefaultMaxProcessesPerSession = 1024
	DefaultDetachedTTL            = 5 * time.Minute
	DefaultEventQueue             = 128
	DefaultMaxConcurrentCalls     = 32
	DefaultPingInterval           = 30 * time.Second
	DefaultDialTimeout            = 20 * time.Second
	DefaultMaxFailedTokens        = admission.DefaultMaxFailures
	DefaultFailureWindow          = admission.DefaultWindow
)

const (
	// maxPendingReplies bounds the replies queued for a connection's writer.
	maxPendingReplies = 256
	// serialQueue bounds the in-order requests waiting for the worker.
	serialQueue = 64
	// serialTimeout bounds one in-order request; it is not cut short when
	// codex disconnects, so a start the executor performed is tracked.
	serialTimeout = 2 * time.Minute
	// failFlush bounds how long a failing session waits for its last
	// notifications to be written before the WebSocket is closed.
	failFlush = 5 * time.Second
	// endTerminate bounds the terminates an ending session sends.
	endTerminate = 3 * time.Second
	// watchInterval is how often a session checks its upstream connection.
	watchInterval = 250 * time.Millisecond
)

// Config configures a Bridge. Start from DefaultConfig and set Dial; New
// fills any other field left zero from DefaultConfig.
type Config struct {
	// Dial opens the upstream connection of a new session; clientName is
	// what codex sent in initialize (for the executor's logs). Required.
	Dial func(ctx context.Context, clientName string) (*client.Remote, error)
	// Token, when non-empty, is required as "Authorization: Bearer
	// <token>" on the WebSocket upgrade; /readyz stays open (default "":
	// no token).
	Token string
	// TokenSHA256, when set, is the SHA-256 digest of the required bearer
	// token instead (codex's --ws-token-sha256).
	TokenSHA256 []byte
	// Logger logs (default zap.NewNop()).
	Logger *zap.Logger

	// MaxConnections bounds codex's WebSocket connections (default 128).
	MaxConnections int
	// MaxSessions bounds sessions, attached or detached (default 64).
	MaxSessions int
	// MaxProcessesPerSession bounds a session's processes not yet closed
	// (default 1024).
	MaxProcessesPerSession int
	// DetachedTTL is how long a detached session lives (default 5 min).
	DetachedTTL time.Duration
	// EventQueue is the length of a session's event queue (default 128).
	EventQueue int
	// MaxConcurrentCalls bounds a connection's concurrent process/read and
	// fs/* calls (default 32).
	MaxConcurrentCalls int
	// PingInterval is the WebSocket keepalive interval (default 30 s).
	PingInterval time.Duration
	// DialTimeout bounds dialing a session's upstream connection (default
	// 20 s).
	DialTimeout time.Duration
	// MaxMessageBytes caps one inbound message (default
	// protocol.MaxMessageBytes).
	MaxMessageBytes int64
	// MessageReadBytes bounds the partly read messages of all connections
	// together, past the first 64 KiB of each (default 256 MiB, four
	// messages of the largest size; at least MaxMessageBytes). Without it
	// MaxConnections connections could each hold a message of
	// MaxMessageBytes half sent: 8 GiB.
	MessageReadBytes int64
	// MaxFailedTokens wrong bearer tokens from one source address within
	// FailureWindow make the bridge refuse that address (429) for the
	// rest of the window (defaults 20 per minute; see transport.WSAuth for
	// what counts). Only with a Token or TokenSHA256.
	MaxFailedTokens int
	FailureWindow   time.Duration

	// now replaces time.Now for FailureWindow (tests).
	now func() time.Time
}

// DefaultConfig returns the default configuration, without the Dial it
// needs.
func DefaultConfig() Config {
	return Config{
		Logger:                 zap.NewNop(),
		MaxConnections:         DefaultMaxConnections,
		MaxSessions:            DefaultMaxSessions,
		MaxProcessesPerSession: DefaultMaxProcessesPerSession,
		DetachedTTL:            DefaultDetachedTTL,
		EventQueue:             DefaultEventQueue,
		MaxConcurrentCalls:     DefaultMaxConcurrentCalls,
		PingInterval:           DefaultPingInterval,
		DialTimeout:            DefaultDialTimeout,
		MaxMessageBytes:        protocol.MaxMessageBytes,
		MessageReadBytes:       transport.DefaultProcessReadBytes,
		MaxFailedTokens:        DefaultMaxFailedTokens,
		FailureWindow:          DefaultFailureWindow,
	}
}

// withDefaults fills every zero field that has a default from
// DefaultConfig; the rest is left to Validate.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Logger == nil {
		c.Logger = d.Logger
	}
	c.MaxConnections = cmp.Or(c.MaxConnections, d.MaxConnections)
	c.MaxSessions = cmp.Or(c.MaxSessions, d.MaxSessions)
	c.MaxProcessesPerSession = cmp.Or(c.MaxProcessesPerSession, d.MaxProcessesPerSession)
	c.DetachedTTL = cmp.Or(c.DetachedTTL, d.DetachedTTL)
	c.EventQueue = cmp.Or(c.EventQueue, d.EventQueue)
	c.MaxConcurrentCalls = cmp.Or(c.MaxConcurrentCalls, d.MaxConcurrentCalls)
	c.PingInterval = cmp.Or(c.PingInterval, d.PingInterval)
	c.DialTimeout = cmp.Or(c.DialTimeout, d.DialTimeout)
	c.MaxMessageBytes = cmp.Or(c.MaxMessageBytes, d.MaxMessageBytes)
	c.MessageReadBytes = cmp.Or(c.MessageReadBytes, d.MessageReadBytes)
	c.MaxFailedTokens = cmp.Or(c.MaxFailedTokens, d.MaxFailedTokens)
	c.FailureWindow = cmp.Or(c.FailureWindow, d.FailureWindow)
	return c
}

// Validate reports the first invalid field. It takes the configuration
// as it is: a zero field is invalid here, though New would fill it.
func (c Config) Validate() error {
	switch {
	case c.Dial == nil:
		return errors.New("bridge: Dial is required")
	case c.MaxConnections < 1:
		return errors.New("bridge: MaxConnections must be at least 1")
	case c.MaxSessions < 1:
		return errors.New("bridge: MaxSessions must be at least 1")
	case c.MaxProcessesPerSession < 1:
		return errors.New("bridge: MaxProcessesPerSession must be at least 1")
	case c.DetachedTTL <= 0:
		return errors.New("bridge: DetachedTTL must be positive")
	case c.EventQueue < 1:
		return errors.New("bridge: EventQueue must be at least 1")
	case c.MaxConcurrentCalls < 1:
		return errors.New("bridge: MaxConcurrentCalls must be at least 1")
	case c.PingInterval <= 0:
		return errors.New("bridge: PingInterval must be positive")
	case c.DialTimeout <= 0:
		return errors.New("bridge: DialTimeout must be positive")
	case c.MaxMessageBytes < 1:
		return errors.New("bridge: MaxMessageBytes must be at least 1")
	case c.MessageReadBytes < c.MaxMessageBytes:
		return errors.New("bridge: MessageReadBytes must be at least MaxMessageBytes")
	case c.MaxFailedTokens < 1:
		return errors.New("bridge: MaxFailedTokens must be at least 1")
	case c.FailureWindow <= 0:
		return errors.New("bridge: FailureWindow must be positive")
	}
	if err := (transport.WSAuth{Token: c.Token, TokenSHA256: c.TokenSHA256}).Validate(); err != nil {
		return fmt.Errorf("bridge: TokenSHA256: %w", err)
	}
	return nil
}

// Bridge serves codex connections and forwards them to an executor.
type Bridge struct {
	cfg    Config
	log    *zap.Logger
	ctx    context.Context // the bridge's life
	cancel context.CancelFunc
	wg     sync.WaitGroup // sessions ending
	connWG sync.WaitGroup // connections being served
	// reads bounds partly read messages (Config.MessageReadBytes).
	reads *transport.ReadBudget
	// auth is the upgrade check, its failure table included.
	auth transport.WSAuth

	mu       sync.Mutex
	sessions map[string]*session
	dialing  int
	conns    int
	closed   bool
}

// New validates cfg, its zero fields filled from DefaultConfig, and
// returns a Bridge.
func New(cfg Config) (*Bridge, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	failures, err := admission.New(admission.Config{MaxFailures: cfg.MaxFailedTokens, Window: cfg.FailureWindow, Now: cfg.now})
	if err != nil {
		return nil, fmt.Errorf("bridge: %w", err)
	}
	auth := transport.WSAuth{Token: cfg.Token, TokenSHA256: cfg.TokenSHA256, Failures: failures}
	ctx, cancel := context.WithCancel(context.Background())
	return &Bridge{cfg: cfg, log: cfg.Logger, ctx: ctx, cancel: cancel, auth: auth, sessions: map[string]*session{}, reads: transport.NewReadBudget("bridge", cfg.MessageReadBytes, nil)}, nil
}

// Stats counts what the bridge holds now.
type Stats struct {
	Connections int // WebSocket connections
	Sessions    int // attached or detached
	Detached    int
	Processes   int // started through the bridge and not yet closed
	// Reconnects counts the upstream connections of the sessions held now
	// that dropped and were resumed (client.Remote.Reconnects).
	Reconnects int64
	// TokenFailures is the table of wrong bearer tokens: addresses in it
	// and refused now, wrong tokens recorded, 429 refusals, evictions.
	TokenFailures admission.Stats
}

// Stats reports what the bridge holds now.
func (b *Bridge) Stats() Stats {
	b.mu.Lock()
	st := Stats{Connections: b.conns, Sessions: len(b.sessions), TokenFailures: b.auth.Failures.Stats()}
	sessions := make([]*session, 0, len(b.sessions))
	for _, s := range b.sessions {
		sessions = append(sessions, s)
	}
	b.mu.Unlock()
	for _, s := range sessions {
		s.mu.Lock()
		if s.conn == nil {
			st.Detached++
		}
		st.Processes += len(s.procs)
		s.mu.Unlock()
		st.Reconnects += s.remote.Reconnects()
	}
	return st
}

// Close ends every connection and session (terminating their processes
// on the executor) and waits for them.
func (b *Bridge) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		b.wg.Wait()
		b.connWG.Wait()
		return nil
	}
	b.closed = true
	sessions := make([]*session, 0, len(b.sessions))
	for _, s := range b.sessions {
		sessions = append(sessions, s)
	}
	b.mu.Unlock()
	for _, s := range sessions {
		s.finish(errors.New("the bridge is shutting down"), false)
	}
	b.cancel()
	b.wg.Wait()
	b.connWG.Wait()
	return nil
}

// Handler serves codex's JSON-RPC lite over WebSocket at "/" and a
// readiness probe at "/readyz". As on the executor, requests carrying an
// Origin header are refused with 403 (a browser page must not reach it),
// and with Config.Token set the upgrade needs that bearer token (an
// address that sent Config.MaxFailedTokens wrong ones lately gets 429).
func (b *Bridge) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		closed := b.closed
		b.mu.Unlock()
		if closed {
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
		if !b.auth.Allow(w, r) {
			return
		}
		if !b.admit() {
			http.Error(w, "too many connections", http.StatusServiceUnavailable)
			return
		}
		defer b.release()
		ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{
			InsecureSkipVerify: true, // Origin is refused above
			CompressionMode:    websocket.CompressionDisabled,
		})
		if err != nil {
			b.log.Debug("websocket upgrade failed", zap.Error(err))
			return
		}
		b.serve(ws)
	})
	return mux
}

func (b *Bridge) admit() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || b.conns >= b.cfg.MaxConnections {
		return false
	}
	b.conns++
	b.connWG.Add(1) // under mu with closed false: never after Close's Wait began
	return true
}

func (b *Bridge) release() {
	b.mu.Lock()
	b.conns--
	b.mu.Unlock()
	b.connWG.Done()
}

// Listener serves the bridge on a TCP address.
type Listener struct {
	ln   net.Listener
	http *http.Server
	done <-chan struct{}
	once sync.Once
}

// Listen binds addr (IP:PORT) and serves the bridge on it.
func (b *Bridge) Listen(addr string) (*Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	l := &Listener{ln: ln}
	l.http, l.done = transport.ServeHTTP(ln, b.Handler(), zap.NewStdLog(b.log))
	return l, nil
}

// URL is the bound ws:// URL.
func (l *Listener) URL() string { return "ws://" + l.ln.Addr().String() }

// Addr is the bound address.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// Close stops accepting and closes the listener's connections (their
// sessions detach; Bridge.Close ends them).
func (l *Listener) Close() error {
	l.once.Do(func() { l.http.Close() })
	<-l.done
	return nil
}

// newSession dials the upstream connection of a new session, attached to
// c. When the session table is full, the longest-detached session makes
// room.
func (b *Bridge) newSession(ctx context.Context, c *conn, clientName string) (*session, error) {
	for {
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			return nil, protocol.KindErrorf(protocol.KindUnavailable, protocol.CodeInvalidRequest, "the bridge is shutting down")
		}
		if len(b.sessions)+b.dialing < b.cfg.MaxSessions {
			b.dialing++
			b.mu.Unlock()
			break
		}
		var victim *session
		for _, s := range b.sessions {
			s.mu.Lock()
			if s.conn == nil && !s.ending && (victim == nil || s.detachedAt.Before(victim.detachedAt)) {
				victim = s
			}
			s.mu.Unlock()
		}
		b.mu.Unlock()
		if victim == nil {
			return nil, protocol.KindErrorf(protocol.KindExhausted, protocol.CodeInvalidRequest, "too many sessions on this bridge (limit %d, all attached)", b.cfg.MaxSessions)
		}
		b.log.Info("session table full: ending the longest-detached session", zap.String("session", victim.id))
		victim.finish(errors.New("evicted to make room for a new session"), false)
	}
	dctx, cancel := context.WithTimeout(ctx, b.cfg.DialTimeout)
	remote, err := b.cfg.Dial(dctx, clientName)
	cancel()
	var info json.RawMessage
	if err == nil {
		info = fetchInfo(ctx, remote, b.log)
	}
	b.mu.Lock()
	b.dialing--
	if err == nil && b.closed {
		b.mu.Unlock()
		remote.Close()
		return nil, protocol.KindErrorf(protocol.KindUnavailable, protocol.CodeInvalidRequest, "the bridge is shutting down")
	}
	if err != nil {
		b.mu.Unlock()
		return nil, protocol.KindErrorf(protocol.KindUnavailable, protocol.CodeInternal, "cannot reach the executor: %v", err)
	}
	s := newSession(b, remote)
	s.info = info
	// codex's other notifications (fs/missingChanged,
	// http/request/bodyDelta, …) share the session's queue with process
	// events, in the executor's order.
	remote.OnCodexNotification(s.pushCodex)
	s.conn = c // attached before anyone can see it
	b.sessions[s.id] = s
	b.mu.Unlock()
	go s.watch()
	return s, nil
}

func (b *Bridge) lookup(id string) *session {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sessions[id]
}

func (b *Bridge) remove(s *session) {
	b.mu.Lock()
	if b.sessions[s.id] == s {
		delete(b.sessions, s.id)
	}
	b.mu.Unlock()
}

// note is one notification for codex.
type note struct {
	method string
	params any
}

// proc is a process started through the bridge.
type proc struct {
	id   string
	p    *client.Process // nil while starting
	last uint64          // seq of the last event forwarded (forwarder only)
}

// session is a bridge session: one upstream connection, its processes,
// and the queue of their notifications.
type session struct {
	b      *Bridge
	id     string
	remote *client.Remote
	log    *zap.Logger
	events chan note
	ctx    context.Context // ends with the session
	cancel context.CancelFunc
	dead   chan struct{} // closed when the session has ended
	// stopping is closed first thing when the session starts to end:
	// the executor's notifications are dropped from then on, so a flood
	// cannot hold the upstream reader while finish waits for the
	// replies to its terminates.
	stopping chan struct{}
	once     sync.Once
	fwd      sync.WaitGroup // forwarders

	mu         sync.Mutex
	conn       *conn // attached connection, nil while detached
	detachedAt time.Time
	expiry     *time.Timer
	procs      map[string]*proc
	carry      *note // taken from events but not written when a connection died
	ending     bool
	info       json.RawMessage // the executor's environment info, once asked
}

func newSession(b *Bridge, remote *client.Remote) *session {
	id := uuid.New()
	ctx, cancel := context.WithCancel(b.ctx)
	return &session{b: b, id: id, remote: remote, log: b.log.With(zap.String("session", id)),
		events: make(chan note, b.cfg.EventQueue), ctx: ctx, cancel: cancel, dead: make(chan struct{}), stopping: make(chan struct{}),
		procs: map[string]*proc{}, detachedAt: time.Now()}
}

// attach makes c the session's connection.
func (s *session) attach(c *conn) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.ending:
		return protocol.KindErrorf(protocol.KindUnknownSession, protocol.CodeInvalidRequest, "unknown session id %s", s.id)
	case s.conn != nil:
		return protocol.KindErrorf(protocol.KindUnavailable, protocol.CodeSessionAlreadyAttached, "session %s is already attached to another connection", s.id)
	}
	if s.expiry != nil {
		s.expiry.Stop()
		s.expiry = nil
	}
	s.conn = c
	return nil
}

// detach ends c's hold; the session lives on for the detached TTL.
func (s *session) detach(c *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != c {
		return
	}
	s.conn = nil
	s.detachedAt = time.Now()
	if s.ending {
		return
	}
	ttl := s.b.cfg.DetachedTTL
	s.expiry = time.AfterFunc(ttl, func() {
		s.mu.Lock()
		still := s.conn == nil && !s.ending
		s.mu.Unlock()
		if still {
			s.log.Info("detached session expired; terminating its processes", zap.Duration("ttl", ttl))
			s.finish(fmt.Errorf("detached for %s", ttl), false)
		}
	})
}

func (s *session) takeCarry() *note {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.carry
	s.carry = nil
	return n
}

func (s *session) putCarry(n note) {
	s.mu.Lock()
	s.carry = &n
	s.mu.Unlock()
}

// push queues a notification for codex, waiting while the queue is full;
// false once the session has ended.
func (s *session) push(n note) bool {
	select {
	case s.events <- n:
		return true
	case <-s.dead:
		return false
	}
}

// pushCodex queues one of the executor's other notifications, waiting
// while the queue is full (the executor's stream slows down); dropped once
// the session is ending.
func (s *session) pushCodex(method string, params json.RawMessage) {
	select {
	case s.events <- note{method: method, params: params}:
	case <-s.stopping:
	case <-s.dead:
	}
}

// watch notices an upstream connection given up while nothing is in
// flight.
func (s *session) watch() {
	t := time.NewTicker(watchInterval)
	defer t.Stop()
	for {
		select {
		case <-s.dead:
			return
		case <-t.C:
		}
		if err := s.remote.Err(); err != nil {
			s.finish(err, true)
			return
		}
	}
}

// finish ends the session once. With lost (the upstream connection was
// given up) codex is told: its processes close, and the WebSocket is
// closed with the cause. Otherwise (expiry, eviction, shutdown) the
// processes are terminated on the executor.
func (s *session) finish(cause error, lost bool) {
	s.once.Do(func() {
		close(s.stopping)
		s.mu.Lock()
		s.ending = true
		if s.expiry != nil {
			s.expiry.Stop()
		}
		c := s.conn
		var live []string
		for id, p := range s.procs {
			if p.p != nil {
				live = append(live, id)
			}
		}
		s.mu.Unlock()
		s.b.remove(s)
		s.b.wg.Add(1)
		go func() {
			defer s.b.wg.Done()
			if lost {
				s.log.Warn("the executor connection was lost; failing the session's processes", zap.Error(cause), zap.Int("processes", len(live)))
				if c != nil {
					// Let the forwarders queue their process/closed; the
					// writer writes them before the close (drainThenClose).
					waitGroup(&s.fwd, failFlush)
				}
			} else {
				s.terminate(live)
			}
			close(s.dead)
			s.cancel()
			s.remote.Close()
			if c != nil {
				reason := "outpost bridge: session ended: " + cause.Error()
				code := websocket.StatusGoingAway
				if lost {
					reason = "outpost bridge: the executor connection was lost: " + cause.Error()
					code = websocket.StatusInternalError
					c.drainThenClose(code, reason)
				} else {
					c.closeWith(code, reason)
				}
			}
			s.fwd.Wait()
		}()
	})
}

// terminate stops the given processes on the executor (best effort,
// bounded in time and concurrency).
func (s *session) terminate(ids []string) {
	if len(ids) == 0 || s.remote.Err() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), endTerminate)
	defer cancel()
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			s.remote.Call(ctx, protocol.MethodProcessTerminate, protocol.TerminateParams{ProcessID: id}, nil)
		}()
	}
	wg.Wait()
}

func waitGroup(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// call forwards one request upstream. Executor errors pass through; a
// given-up upstream connection fails the session.
func (s *session) call(ctx context.Context, method string, params, result any) error {
	err := s.remote.Call(ctx, method, params, result)
	if err == nil {
		return nil
	}
	return s.upstreamError(method, err)
}

func (s *session) upstreamError(method string, err error) *protocol.Error {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return pe
	}
	if uerr := s.remote.Err(); uerr != nil && !errors.Is(uerr, client.ErrClosed) {
		s.finish(uerr, true)
		return protocol.KindErrorf(protocol.KindUnavailable, protocol.CodeInternal, "%s: the executor connection was lost: %v", method, uerr)
	}
	select {
	case <-s.dead:
		return protocol.KindErrorf(protocol.KindUnknownSession, protocol.CodeInvalidRequest, "%s: session %s has ended", method, s.id)
	default:
	}
	return protocol.KindErrorf(protocol.KindInternal, protocol.CodeInternal, "%s: %v", method, err)
}

// start starts a process upstream and its forwarder, which waits for gate
// (the reply written) before pushing events.
func (s *session) start(ctx context.Context, p protocol.ExecParams, raw json.RawMessage, gate, connDone <-chan struct{}) (any, error) {
	if p.ProcessID == "" {
		return nil, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "processId must not be empty")
	}
	entry := &proc{id: p.ProcessID}
	s.mu.Lock()
	switch {
	case s.ending:
		s.mu.Unlock()
		return nil, protocol.KindErrorf(protocol.KindUnknownSession, protocol.CodeInvalidRequest, "session %s has ended", s.id)
	case s.procs[p.ProcessID] != nil:
		s.mu.Unlock()
		return nil, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidRequest, "process %s already exists", p.ProcessID)
	case len(s.procs) >= s.b.cfg.MaxProcessesPerSession:
		s.mu.Unlock()
		return nil, protocol.KindErrorf(protocol.KindExhausted, protocol.CodeInvalidRequest, "too many processes in this bridge session (limit %d not yet closed)", s.b.cfg.MaxProcessesPerSession)
	}
	s.procs[p.ProcessID] = entry
	s.mu.Unlock()
	cp, res, err := s.remote.StartProcessCodex(ctx, p, raw)
	if err != nil {
		s.forget(entry)
		return nil, s.upstreamError(protocol.MethodProcessStart, err)
	}
	s.mu.Lock()
	if s.ending {
		// The session ended while the executor was starting it (and
		// finish did not see it): stop it rather than leave it running.
		s.mu.Unlock()
		s.forget(entry)
		tctx, cancel := context.WithTimeout(context.Background(), endTerminate)
		s.remote.Call(tctx, protocol.MethodProcessTerminate, protocol.TerminateParams{ProcessID: p.ProcessID}, nil)
		cancel()
		return nil, protocol.KindErrorf(protocol.KindUnknownSession, protocol.CodeInvalidRequest, "session %s has ended", s.id)
	}
	entry.p = cp
	s.fwd.Add(1) // under mu, with ending false: never after finish's Wait
	s.mu.Unlock()
	go s.forward(entry, gate, connDone)
	return res, nil
}

func (s *session) forget(p *proc) {
	s.mu.Lock()
	if s.procs[p.id] == p {
		delete(s.procs, p.id)
	}
	s.mu.Unlock()
}

// forward pushes a process's events to codex in seq order.
func (s *session) forward(pr *proc, gate, connDone <-chan struct{}) {
	defer s.fwd.Done()
	defer s.forget(pr)
	select {
	case <-gate:
	case <-connDone:
	case <-s.dead:
	}
	closed := false
	for ev := range pr.p.Events() {
		n, ok := eventNote(pr.id, ev)
		if !ok {
			continue // EventFailed: handled below
		}
		if !s.push(n) {
			for range pr.p.Events() {
				// the session ended and closes the Remote, which ends this
			}
			return
		}
		pr.last = ev.Seq
		closed = ev.Kind == client.EventClosed
	}
	if closed {
		return
	}
	cause := pr.p.Err()
	if s.ended() {
		return
	}
	if uerr := s.remote.Err(); uerr != nil {
		s.push(note{protocol.MethodProcessClosed, &protocol.ClosedNotification{ProcessID: pr.id, Seq: pr.last + 1}})
		s.finish(uerr, true)
		return
	}
	s.poll(pr, cause)
}

func (s *session) ended() bool {
	select {
	case <-s.dead:
		return true
	default:
		return false
	}
}

// eventNote turns a client event into its codex notification, through
// protocol's one mapping (as the executor's JSON front writes it).
func eventNote(id string, ev client.Event) (note, bool) {
	var pe protocol.Event
	switch ev.Kind {
	case client.EventOutput:
		pe = protocol.Event{Kind: protocol.EventOutput, Seq: ev.Seq, Stream: ev.Stream, Data: ev.Data}
	case client.EventExited:
		pe = protocol.Event{Kind: protocol.EventExited, Seq: ev.Seq, ExitCode: ev.ExitCode, Signal: ev.Signal, SandboxDenied: ev.SandboxDenied, Limit: ev.Limit}
	case client.EventClosed:
		pe = protocol.Event{Kind: protocol.EventClosed, Seq: ev.Seq}
	default:
		return note{}, false
	}
	return note{pe.Kind.Method(), pe.Params(id)}, true
}

// poll follows a process whose pushed events failed while the upstream
// connection lives on (its output was evicted while the connection was
// down): process/read from the last event forwarded, past the gap.
func (s *session) poll(pr *proc, cause error) {
	s.log.Warn("a process's pushed events failed; following it by process/read", zap.String("process", pr.id), zap.Error(cause))
	const readBytes, readWaitMs = 4 << 20, 10000
	for {
		after, maxBytes, wait := pr.last, uint64(readBytes), uint64(readWaitMs)
		var res protocol.ReadResult
		ctx, cancel := context.WithTimeout(s.ctx, 2*readWaitMs*time.Millisecond)
		err := s.remote.Call(ctx, protocol.MethodProcessRead, protocol.ReadParams{ProcessID: pr.id, AfterSeq: &after, MaxBytes: &maxBytes, WaitMs: &wait}, &res)
		cancel()
		if s.ended() {
			return
		}
		if err != nil {
			var pe *protocol.Error
			if uerr := s.remote.Err(); uerr != nil {
				s.push(note{protocol.MethodProcessClosed, &protocol.ClosedNotification{ProcessID: pr.id, Seq: pr.last + 1}})
				s.finish(uerr, true)
				return
			} else if errors.As(err, &pe) {
				// The executor no longer knows it (its closed retention
				// ended): nothing more will come.
				s.log.Warn("a followed process is gone on the executor", zap.String("process", pr.id), zap.Error(err))
				s.push(note{protocol.MethodProcessClosed, &protocol.ClosedNotification{ProcessID: pr.id, Seq: pr.last + 1}})
				return
			}
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if res.Gap != nil {
			s.log.Warn("process output was evicted on the executor before the bridge could forward it",
				zap.String("process", pr.id), zap.Uint64("fromSeq", res.Gap.FromSeq), zap.Uint64("toSeq", res.Gap.ToSeq))
		}
		notes, seqs := readNotes(pr.id, res, after)
		for i, n := range notes {
			if !s.push(n) {
				return
			}
			pr.last = seqs[i]
			if n.method == protocol.MethodProcessClosed {
				return
			}
		}
		if len(notes) == 0 && res.Gap != nil && res.Gap.ToSeq > pr.last {
			pr.last = res.Gap.ToSeq
		}
	}
}

// readNotes turns a process/read result into notifications after seq
// after, in seq order (protocol's one mapping, the signal included).
func readNotes(id string, res protocol.ReadResult, after uint64) ([]note, []uint64) {
	var notes []note
	var seqs []uint64
	for _, ev := range res.Events() {
		if ev.Seq <= after {
			continue
		}
		notes = append(notes, note{ev.Kind.Method(), ev.Params(id)})
		seqs = append(seqs, ev.Seq)
	}
	return notes, seqs
}

// connection lifecycle, as on the executor
const (
	stateNew = iota
	stateInitialized
	stateReady
)

// reply is one queued response.
type reply struct {
	id     transport.ID
	result any
	err    *protocol.Error
	// attach: once this reply (to initialize) is written, the writer
	// starts writing the session's notifications.
	attach *session
	// written, if set, is closed once the reply has been written.
	written chan struct{}
}

// conn is one codex connection: a WebSocket, or the bridge's stdin and
// stdout (ServeStdio).
type conn struct {
	b      *Bridge
	ws     *websocket.Conn // nil on stdio
	pipe   io.Closer       // stdio: closing it ends the connection
	mc     *transport.JSONConn
	ctx    context.Context
	cancel context.CancelFunc

	state   int
	sess    *session // set by the reader at initialize
	replies chan *reply
	serial  chan *transport.Message
	sem     chan struct{}
	calls   sync.WaitGroup
	// closing asks the writer to write what its session has queued and
	// then close the WebSocket (at most one request).
	closing chan closeMsg

	closeOnce sync.Once
}

type closeMsg struct {
	code   websocket.StatusCode
	reason string
}

func (b *Bridge) serve(ws *websocket.Conn) {
	ctx, cancel := context.WithCancel(b.ctx)
	frames := transport.NewWSFrames(ws, b.cfg.MaxMessageBytes)
	frames.SetReadBudget(b.reads)
	c := b.newConn(ctx, cancel, transport.NewJSONConn(frames))
	c.ws = ws
	go c.keepalive()
	c.run()
}

// ServeStdio serves one codex connection on r and w — JSON-RPC lite, one
// message a line, as codex speaks to an exec-server it starts as a
// program (its environments.toml `program`) — until r ends, ctx is done
// or the bridge closes. The session detaches when it ends, as a dropped
// WebSocket's does (nothing can resume it: a stdio program lives as long
// as its one connection), and lives DetachedTTL. w is closed at the end.
func (b *Bridge) ServeStdio(ctx context.Context, r io.Reader, w io.WriteCloser) error {
	if !b.admit() {
		return errors.New("bridge: shutting down or at its connection limit")
	}
	defer b.release()
	cctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	// Read through a pipe: closing it ends the reader at once, whatever r
	// is — an inherited stdin in blocking mode is not interrupted by its
	// own Close. The copying goroutine ends when r does (one at most).
	pr, pw := io.Pipe()
	go func() {
		_, err := io.Copy(pw, r)
		pw.CloseWithError(err)
	}()
	pipe := closers{w, pr}
	frames := transport.NewLineFrames(pr, w, pipe, int(b.cfg.MaxMessageBytes))
	frames.SetReadBudget(b.reads)
	c := b.newConn(cctx, cancel, transport.NewJSONConn(frames))
	c.pipe = pipe
	c.run()
	return nil
}

// closers closes each of its members once.
type closers []io.Closer

func (cs closers) Close() error {
	var first error
	for _, c := range cs {
		if err := c.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (b *Bridge) newConn(ctx context.Context, cancel context.CancelFunc, mc *transport.JSONConn) *conn {
	return &conn{
		b: b, ctx: ctx, cancel: cancel, mc: mc,
		replies: make(chan *reply, maxPendingReplies),
		serial:  make(chan *transport.Message, serialQueue),
		sem:     make(chan struct{}, b.cfg.MaxConcurrentCalls),
		closing: make(chan closeMsg, 1),
	}
}

// run serves the connection until it ends.
func (c *conn) run() {
	b := c.b
	writerDone := make(chan struct{})
	go func() { defer close(writerDone); c.writeLoop() }()
	serialDone := make(chan struct{})
	go func() { defer close(serialDone); c.serialLoop() }()
	// A closed connection must unblock the reader, which waits in a read
	// of the WebSocket or of stdin.
	stopUnblock := context.AfterFunc(c.ctx, c.closeNow)
	defer stopUnblock()
	err := c.readLoop()
	if err != nil && !isClosedErr(err) {
		b.log.Debug("codex connection ended", zap.Error(err))
	}
	// Wind down: in-order requests finish (a start the executor made is
	// tracked), long polls are cancelled, the writer stops, and the
	// session detaches with its queue intact.
	close(c.serial)
	<-serialDone
	c.cancel()
	c.calls.Wait()
	<-writerDone
	c.closeNow()
	if c.sess != nil {
		c.sess.detach(c)
	}
}

// closeNow closes the transport at once.
func (c *conn) closeNow() {
	if c.ws != nil {
		c.ws.CloseNow()
		return
	}
	c.pipe.Close()
}

// drainThenClose has the writer write the notifications its session has
// queued and then close the WebSocket; a writer that does not get to it
// within failFlush is overtaken.
func (c *conn) drainThenClose(code websocket.StatusCode, reason string) {
	select {
	case c.closing <- closeMsg{code, reason}:
	default:
	}
	select {
	case <-c.ctx.Done():
	case <-time.After(failFlush):
		c.closeWith(code, reason)
	}
}

// closeWith closes the WebSocket with a status and reason (at most 123
// bytes, cut at a character boundary), waiting for the close handshake
// (at most 10 s), and then ends the connection.
func (c *conn) closeWith(code websocket.StatusCode, reason string) {
	c.closeOnce.Do(func() {
		if len(reason) > 123 {
			reason = reason[:123]
			for !utf8.ValidString(reason) {
				reason = reason[:len(reason)-1]
			}
		}
		if c.ws != nil {
			c.ws.Close(code, reason)
		} else {
			c.pipe.Close() // stdio has no close status: codex sees the end
		}
		c.cancel()
	})
}

func (c *conn) keepalive() {
	t := time.NewTicker(c.b.cfg.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(c.ctx, c.b.cfg.PingInterval)
		err := c.ws.Ping(pctx)
		cancel()
		if err != nil {
			if c.ctx.Err() == nil {
				c.ws.CloseNow()
				c.cancel()
			}
			return
		}
	}
}

func isClosedErr(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, context.Canceled) ||
		websocket.CloseStatus(err) != -1
}

// enqueue queues a reply for the writer; dropped if the connection ends.
func (c *conn) enqueue(r *reply) {
	select {
	case c.replies <- r:
	case <-c.ctx.Done():
	}
}

func (c *conn) replyErr(id transport.ID, e *protocol.Error) {
	c.enqueue(&reply{id: id, err: e})
}

func (c *conn) readLoop() error {
	for {
		m, err := c.mc.ReadMessage(c.ctx)
		if err != nil {
			var me *transport.MalformedError
			if errors.As(err, &me) {
				// A request dropped for want of read budget is answered
				// under its own id, so codex is not left waiting.
				kind := protocol.KindInvalid
				if errors.Is(err, transport.ErrReadBudgetExhausted) {
					kind = protocol.KindExhausted
				}
				c.replyErr(me.ReplyID(), protocol.KindErrorf(kind, protocol.CodeInvalidRequest, "%v", me))
				continue
			}
			return err
		}
		switch m.Kind {
		case transport.KindRequest:
			c.request(m)
		case transport.KindNotification:
			if m.Method == protocol.MethodInitialized {
				if c.state == stateInitialized {
					c.state = stateReady
					continue
				}
				c.replyErr(transport.MalformedID, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidRequest, "initialized notification is only valid once, after initialize"))
				continue
			}
			c.replyErr(transport.MalformedID, protocol.KindErrorf(protocol.KindUnsupported, protocol.CodeMethodNotFound, "unknown notification %q", m.Method))
		case transport.KindResponse:
			c.replyErr(transport.MalformedID, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidRequest, "unexpected response (id %s): this executor sends no requests", m.ID))
		}
	}
}

// method is one entry of the bridge's method table: the methods it
// serves itself, because it keeps their state (processes, whose events it
// forwards and resumes). Every other method — fs/*, environment/*,
// http/request, and any the executor gains — is forwarded as codex wrote
// it (forwardCodex), so the bridge needs no change when the executor
// gains one.
type method struct {
	family string // for lifecycle error messages
	// concurrent methods (process/read) run beside the in-order ones.
	concurrent bool
	call       func(ctx context.Context, s *session, m *transport.Message) (any, error)
}

// methods is the bridge's own method table.
var methods = map[string]method{
	protocol.MethodProcessStart:     {family: "exec"}, // see conn.serialLoop
	protocol.MethodProcessRead:      {family: "exec", concurrent: true, call: forward[protocol.ReadParams, protocol.ReadResult]},
	protocol.MethodProcessWrite:     {family: "exec", call: forward[protocol.WriteParams, protocol.WriteResult]},
	protocol.MethodProcessSignal:    {family: "exec", call: forward[protocol.SignalParams, protocol.Empty]},
	protocol.MethodProcessTerminate: {family: "exec", call: forward[protocol.TerminateParams, protocol.TerminateResult]},
	protocol.MethodProcessResize:    {family: "exec", call: forward[protocol.ResizeParams, protocol.Empty]},
}

// codexMethod is the table entry of a method the bridge forwards as it
// is (conn.forwardCodex): beside the in-order ones, as the executor runs
// fs/* calls.
func codexMethod(name string) method {
	return method{family: familyOf(name), concurrent: true}
}

// familyOf names a method's family in lifecycle errors, as the executor
// does.
func familyOf(name string) string {
	switch {
	case strings.HasPrefix(name, "fs/"):
		return "fs"
	case strings.HasPrefix(name, "process/"):
		return "exec"
	case name == protocol.MethodEnvironmentInfo:
		return "environment info"
	}
	return name
}

// forward decodes the params (required) into P, calls the same method
// upstream and returns the result as R.
func forward[P, R any](ctx context.Context, s *session, m *transport.Message) (any, error) {
	var p P
	if err := decode(m, &p, true); err != nil {
		return nil, err
	}
	var r R
	if err := s.call(ctx, m.Method, p, &r); err != nil {
		return nil, err
	}
	return r, nil
}

// decode fills v from m's params, with the executor's errors for bad
// params; required says absent params are an error.
func decode(m *transport.Message, v any, required bool) error {
	if m.Params == nil || m.Params.Absent() {
		if required {
			return protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "invalid params for %s: params are required", m.Method)
		}
		return nil
	}
	if err := m.Params.Decode(v); err != nil {
		var b64 base64.CorruptInputError
		if errors.As(err, &b64) {
			return protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "invalid params for %s: chunk is not valid base64: %v", m.Method, err)
		}
		return protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "invalid params for %s: %v", m.Method, err)
	}
	return nil
}

func (c *conn) request(m *transport.Message) {
	if m.Method == protocol.MethodInitialize {
		res, err := c.initialize(m)
		if err != nil {
			c.answer(m.ID, nil, err)
			return
		}
		c.enqueue(&reply{id: m.ID, result: res, attach: c.sess})
		return
	}
	meth, ok := methods[m.Method]
	if !ok {
		meth = codexMethod(m.Method)
	}
	switch c.state {
	case stateNew:
		c.replyErr(m.ID, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidRequest, "client must call initialize before using %s methods", meth.family))
		return
	case stateInitialized:
		c.replyErr(m.ID, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidRequest, "client must send initialized before using %s methods", meth.family))
		return
	}
	if !meth.concurrent {
		select {
		case c.serial <- m:
		case <-c.ctx.Done():
		}
		return
	}
	select {
	case c.sem <- struct{}{}:
	case <-c.ctx.Done():
		return
	}
	c.calls.Add(1)
	go func() {
		defer func() { <-c.sem; c.calls.Done() }()
		if meth.call == nil { // forwarded as codex wrote it
			c.forwardCodex(m)
			return
		}
		res, err := meth.call(c.ctx, c.sess, m)
		if c.ctx.Err() != nil {
			return // the connection is gone; nobody waits for this reply
		}
		c.answer(m.ID, res, err)
	}()
}

// forwardCodex sends a request upstream with its params as codex wrote
// them and answers with the executor's result as it sent it. The answer
// is queued before any notification the executor sent after it is
// passed on (client.Remote.CallCodexThen), so codex sees them in the
// executor's order: an http/request's reply before its body deltas.
func (c *conn) forwardCodex(m *transport.Message) {
	var raw json.RawMessage
	if m.Params != nil && !m.Params.Absent() {
		if err := m.Params.Decode(&raw); err != nil {
			c.answer(m.ID, nil, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "invalid params for %s: %v", m.Method, err))
			return
		}
	}
	s := c.sess
	s.remote.CallCodexThen(c.ctx, m.Method, raw, func(res json.RawMessage, err error) {
		if c.ctx.Err() != nil {
			return // the connection is gone; nobody waits for this reply
		}
		if err != nil {
			c.answer(m.ID, nil, s.upstreamError(m.Method, err))
			return
		}
		c.answer(m.ID, res, nil)
	})
}

func (c *conn) answer(id transport.ID, res any, err error) {
	if err != nil {
		var pe *protocol.Error
		if !errors.As(err, &pe) {
			pe = protocol.KindErrorf(protocol.KindInternal, protocol.CodeInternal, "%v", err)
		}
		c.replyErr(id, pe)
		return
	}
	c.enqueue(&reply{id: id, result: res})
}

// serialLoop runs the in-order requests one at a time. They are not cut
// short when codex disconnects: a start the executor performed must be
// tracked by the session.
func (c *conn) serialLoop() {
	for m := range c.serial {
		ctx, cancel := context.WithTimeout(c.b.ctx, serialTimeout)
		if m.Method == protocol.MethodProcessStart {
			// The params go to the executor as codex wrote them (it
			// decodes and judges them, fields outpost's types lack
			// included); the bridge reads only the process id.
			var id struct {
				ProcessID string `json:"processId"`
			}
			var raw json.RawMessage
			r := &reply{id: m.ID, written: make(chan struct{})}
			res, err := any(nil), decode(m, &id, true)
			if err == nil {
				err = m.Params.Decode(&raw)
			}
			if err == nil {
				res, err = c.sess.start(ctx, protocol.ExecParams{ProcessID: id.ProcessID}, raw, r.written, c.ctx.Done())
			}
			if err != nil {
				c.answer(m.ID, nil, err)
			} else {
				r.result = res
				c.enqueue(r)
			}
		} else {
			res, err := methods[m.Method].call(ctx, c.sess, m)
			c.answer(m.ID, res, err)
		}
		cancel()
	}
}

func (c *conn) initialize(m *transport.Message) (any, error) {
	if c.state != stateNew {
		return nil, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidRequest, "initialize may only be sent once per connection")
	}
	var p protocol.InitializeParams
	if err := decode(m, &p, false); err != nil {
		return nil, err
	}
	var s *session
	if p.ResumeSessionID != nil {
		s = c.b.lookup(*p.ResumeSessionID)
		if s == nil {
			return nil, protocol.KindErrorf(protocol.KindUnknownSession, protocol.CodeInvalidRequest, "unknown session id %s", *p.ResumeSessionID)
		}
		if err := s.attach(c); err != nil {
			return nil, err
		}
	} else {
		var err error
		if s, err = c.b.newSession(c.ctx, c, p.ClientName); err != nil {
			return nil, err
		}
	}
	c.sess, c.state = s, stateInitialized
	s.log.Debug("session attached", zap.String("client", p.ClientName), zap.Bool("resumed", p.ResumeSessionID != nil))
	return initializeResult{SessionID: s.id, EnvironmentInfo: s.environmentInfo()}, nil
}

// initializeResult is initialize's answer: the bridge's session id and the
// executor's environment info as the executor sent it (codex 0.171 then
// need not ask environment/info).
type initializeResult struct {
	SessionID       string          `json:"sessionId"`
	EnvironmentInfo json.RawMessage `json:"environmentInfo,omitempty"`
}

// environmentInfo is the executor's environment info, asked once when
// the session was made; nil when it could not be had (codex then asks
// environment/info itself, which is forwarded and fails with the cause).
func (s *session) environmentInfo() json.RawMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.info
}

// fetchInfo asks the executor for its environment info, at most
// infoTimeout: a slow executor delays only its own session's initialize.
func fetchInfo(ctx context.Context, remote *client.Remote, log *zap.Logger) json.RawMessage {
	ctx, cancel := context.WithTimeout(ctx, infoTimeout)
	defer cancel()
	info, err := remote.CallCodex(ctx, protocol.MethodEnvironmentInfo, nil)
	if err != nil || string(info) == "null" {
		log.Debug("environment info unavailable for initialize", zap.Error(err))
		return nil
	}
	return info
}

// infoTimeout bounds the environment info fetched for initialize.
const infoTimeout = 10 * time.Second

// writeLoop writes replies first, then the attached session's
// notifications, until the connection ends.
func (c *conn) writeLoop() {
	var sess *session
	var events chan note
	for {
		select {
		case r := <-c.replies:
			if !c.writeReply(r) {
				return
			}
			if r.attach != nil {
				sess, events = r.attach, r.attach.events
				if n := sess.takeCarry(); n != nil && !c.writeNote(sess, *n) {
					return
				}
			}
			continue
		default:
		}
		select {
		case r := <-c.replies:
			if !c.writeReply(r) {
				return
			}
			if r.attach != nil {
				sess, events = r.attach, r.attach.events
				if n := sess.takeCarry(); n != nil && !c.writeNote(sess, *n) {
					return
				}
			}
		case n := <-events:
			if !c.writeNote(sess, n) {
				return
			}
		case cm := <-c.closing:
			for {
				select {
				case n := <-events:
					if !c.writeNote(sess, n) {
						return
					}
					continue
				default:
				}
				break
			}
			c.closeWith(cm.code, cm.reason)
			return
		case <-c.ctx.Done():
			return
		}
	}
}

// writeNote writes one notification; one that could not be written is
// kept for the session's next connection.
func (c *conn) writeNote(s *session, n note) bool {
	if err := c.mc.WriteNotification(c.ctx, n.method, n.params); err != nil {
		s.putCarry(n)
		c.fail()
		return false
	}
	return true
}

func (c *conn) writeReply(r *reply) bool {
	var err error
	if r.err != nil {
		err = c.mc.WriteError(c.ctx, r.id, r.err)
	} else {
		err = c.mc.WriteResult(c.ctx, r.id, r.result)
		if errors.Is(err, transport.ErrMessageTooLarge) {
			// Refused before anything was written: answer with an error,
			// as the executor does.
			err = c.mc.WriteError(c.ctx, r.id, protocol.KindErrorf(protocol.KindTooLarge, protocol.CodeInvalidRequest,
				"the result is too large for one message on this connection (%v); read large files with fs/open and fs/readBlock", err))
		}
	}
	if r.written != nil {
		close(r.written)
	}
	if err != nil {
		c.fail()
		return false
	}
	return true
}

// fail ends a connection whose writes fail, unblocking the reader.
func (c *conn) fail() {
	c.cancel()
	c.closeNow()
}
