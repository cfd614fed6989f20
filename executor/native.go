package executor

// The native transport: tcp:// or unix:// → Noise (the executor responds;
// IK for clients that pinned its key, XX for first contact) → yamux. The
// client opens a control stream carrying msgpack RPC (the same method
// table as the WebSocket front); the executor opens one stream per
// followed process, starting with a process/events header and carrying
// that process's notifications in seq order, then closes it after
// process/closed.
//
// Bounds: MaxConnections connections and MaxHandshakes handshakes in
// progress per listener; MuxConfig.MaxInboundStreams control streams per
// connection (more are reset); one stream and one goroutine per followed
// process.

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/flynn/noise"
	"github.com/hashicorp/yamux"
	"go.uber.org/zap"

	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/transport"
)

// NativePurpose is the Noise purpose of client↔executor links.
const NativePurpose = "exec"

// NativeOptions configures a native listener.
type NativeOptions struct {
	// Key is the executor's static key.
	Key noise.DHKey
	// Authorize, when set, decides whether a client key may connect
	// (the --authorized-clients allow-list); refused clients learn nothing.
	Authorize func(clientKey []byte) error
	Mux       transport.MuxConfig
	// MaxConnections bounds open connections (default 1024);
	// MaxHandshakes bounds handshakes in progress (default 64), so a flood
	// of silent connections cannot starve real clients.
	MaxConnections int
	MaxHandshakes  int
	// HandshakeTimeout bounds each handshake (default 10 s).
	HandshakeTimeout time.Duration
}

// NativeListener serves the native transport on a listener.
type NativeListener struct {
	srv  *Server
	acc  *transport.Acceptor
	opts NativeOptions
	url  string
	hs   chan struct{}
}

// ParseNativeURL splits tcp://HOST:PORT or unix:///path into a network
// and an address.
func ParseNativeURL(s string) (network, addr string, err error) {
	if rest, ok := strings.CutPrefix(s, "tcp://"); ok {
		rest, _, _ = strings.Cut(rest, "#")
		if _, _, err := net.SplitHostPort(rest); err != nil {
			return "", "", fmt.Errorf("invalid tcp URL `%s`; expected `tcp://HOST:PORT`", s)
		}
		return "tcp", rest, nil
	}
	if rest, ok := strings.CutPrefix(s, "unix://"); ok {
		rest, _, _ = strings.Cut(rest, "#")
		if !strings.HasPrefix(rest, "/") {
			return "", "", fmt.Errorf("invalid unix URL `%s`; expected `unix:///absolute/path`", s)
		}
		return "unix", rest, nil
	}
	return "", "", fmt.Errorf("unsupported URL `%s`; expected `tcp://HOST:PORT` or `unix:///path`", s)
}

// ListenNative binds a tcp:// or unix:// URL and serves the native
// transport on it.
func (s *Server) ListenNative(url string, opts NativeOptions) (*NativeListener, error) {
	network, addr, err := ParseNativeURL(url)
	if err != nil {
		return nil, err
	}
	if opts.Mux == (transport.MuxConfig{}) {
		opts.Mux = transport.DefaultMuxConfig()
	}
	if err := opts.Mux.Validate(); err != nil {
		return nil, err
	}
	if opts.MaxConnections <= 0 {
		opts.MaxConnections = 1024
	}
	if opts.MaxHandshakes <= 0 {
		opts.MaxHandshakes = 64
	}
	if network == "unix" {
		// A stale socket from a previous run is replaced; anything else
		// at that path is left alone and the bind fails.
		if fi, err := os.Lstat(addr); err == nil && fi.Mode()&os.ModeSocket != 0 {
			os.Remove(addr)
		}
	}
	ln, err := net.Listen(network, addr)
	if err != nil {
		return nil, err
	}
	if network == "unix" {
		os.Chmod(addr, 0o600)
	}
	l := &NativeListener{srv: s, opts: opts, hs: make(chan struct{}, opts.MaxHandshakes)}
	if network == "tcp" {
		l.url = "tcp://" + ln.Addr().String()
	} else {
		l.url = "unix://" + addr
	}
	l.acc = transport.Serve(ln, opts.MaxConnections, l.serve)
	return l, nil
}

// URL is the bound URL (without the key fingerprint).
func (l *NativeListener) URL() string { return l.url }

// Addr is the bound address.
func (l *NativeListener) Addr() net.Addr { return l.acc.Addr() }

// Close stops accepting and closes every connection (their sessions
// detach) and waits for them to wind down.
func (l *NativeListener) Close() error { return l.acc.Close() }

// StopAccepting closes the port; open connections go on until Close.
func (l *NativeListener) StopAccepting() error { return l.acc.StopAccepting() }

func (l *NativeListener) serve(ctx context.Context, c net.Conn) {
	select {
	case l.hs <- struct{}{}:
	case <-ctx.Done():
		return
	}
	cfg := transport.NoiseConfig{Static: l.opts.Key, Purpose: NativePurpose, AllowXX: true, HandshakeTimeout: l.opts.HandshakeTimeout}
	cfg.Authorize = func(peer, payload []byte) error {
		if l.opts.Authorize != nil {
			return l.opts.Authorize(peer)
		}
		return nil
	}
	start := time.Now()
	nc, err := transport.NoiseResponder(ctx, c, cfg)
	<-l.hs
	if err != nil {
		l.srv.log.Info("handshake failed", zap.Stringer("remote", c.RemoteAddr()), zap.Error(err))
		return
	}
	ctx = withHandshake(ctx, handshakeInfo{start: start, end: time.Now(), via: c.LocalAddr().Network()})
	sess, err := transport.MuxServer(nc, l.opts.Mux)
	if err != nil {
		l.srv.log.Warn("mux setup failed", zap.Error(err))
		return
	}
	defer sess.Close()
	l.srv.ServeMux(ctx, sess, l.opts.Mux.MaxInboundStreams)
}

// ServeMux serves a yamux session: every stream the client opens is a
// control stream with a session of its own. It returns when the yamux
// session ends.
func (s *Server) ServeMux(ctx context.Context, sess *yamux.Session, maxStreams int) {
	if maxStreams <= 0 {
		maxStreams = transport.DefaultMuxConfig().MaxInboundStreams
	}
	slots := make(chan struct{}, maxStreams)
	var wg sync.WaitGroup
	defer wg.Wait()
	go func() {
		select {
		case <-ctx.Done():
			sess.Close()
		case <-sess.CloseChan():
		}
	}()
	for {
		st, err := sess.AcceptStream()
		if err != nil {
			return
		}
		select {
		case slots <- struct{}{}:
		default:
			s.log.Warn("too many streams on one connection; resetting the newest", zap.Int("limit", maxStreams))
			st.Close()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			defer st.Close()
			lanes := &streamLanes{open: func() (io.ReadWriteCloser, error) { return sess.OpenStream() }, log: s.log}
			s.serveConn(ctx, transport.NewMsgpackConn(st, 0), lanes)
		}()
	}
}

// streamLanes pushes each followed process's events on a stream of its own.
type streamLanes struct {
	open func() (io.ReadWriteCloser, error)
	log  *zap.Logger

	mu     sync.Mutex
	lanes  map[*Subscription]io.Closer
	closed bool
	done   chan struct{} // closed by shutdown
	wg     sync.WaitGroup
}

// follow subscribes (holding) and returns the function that starts the
// lane once the reply that created it has been queued.
func (s *streamLanes) follow(ctx context.Context, sessionID, id string, log *EventLog, afterSeq uint64, fromNow bool) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	if s.lanes == nil {
		s.lanes = make(map[*Subscription]io.Closer)
		s.done = make(chan struct{})
	}
	var sub *Subscription
	if fromNow {
		sub = log.SubscribeNow(true, nil)
	} else {
		sub = log.Subscribe(afterSeq, true, nil)
	}
	s.lanes[sub] = nil
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.closed {
			return // shutdown already closed sub
		}
		s.wg.Add(1)
		go s.run(ctx, sessionID, id, sub)
	}
}

func (s *streamLanes) run(ctx context.Context, sessionID, id string, sub *Subscription) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.lanes, sub)
		s.mu.Unlock()
		sub.Close()
	}()
	st, err := s.open()
	if err != nil {
		s.log.Debug("opening an event stream failed", zap.String("process", id), zap.Error(err))
		return
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		st.Close()
		return
	}
	s.lanes[sub] = st
	s.mu.Unlock()
	defer st.Close()
	mc := transport.NewMsgpackConn(st, 0)
	var batch []transport.Notification
	if err := mc.WriteNotification(ctx, protocol.MethodProcessEvents, &protocol.EventsStreamHeader{SessionID: sessionID, ProcessID: id}); err != nil {
		return
	}
	for {
		events, gap, done := sub.Next(laneTurnEvents, laneTurnBytes)
		if gap != nil {
			s.log.Warn("pushed output was evicted before it could be sent; readers see a gap",
				zap.String("process", id), zap.Uint64("fromSeq", gap.FromSeq), zap.Uint64("toSeq", gap.ToSeq))
		}
		if len(events) > 0 {
			batch = batch[:0]
			for i := range events {
				batch = append(batch, transport.Notification{Method: eventMethod(events[i].Kind), Params: eventParams(id, &events[i])})
			}
			if err := mc.WriteNotifications(ctx, batch); err != nil {
				return
			}
		}
		if done {
			return
		}
		if len(events) == 0 {
			select {
			case <-sub.Ready():
			case <-s.done:
				return
			case <-ctx.Done():
				return
			}
		}
	}
}

// shutdown closes every lane's stream and waits for the lanes to end.
func (s *streamLanes) shutdown() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	if s.done != nil {
		close(s.done)
	}
	for sub, st := range s.lanes {
		if st != nil {
			st.Close()
		}
		sub.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}
