package executor

import (
	"context"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/outpost-exec/outpost/engine"
	"github.com/outpost-exec/outpost/pathmap"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/remotefs"
	"github.com/outpost-exec/outpost/transport"
)

// Per-connection output bounds.
const (
	// maxPendingReplies bounds replies queued for the writer; a handler
	// that would exceed it waits.
	maxPendingReplies = 256
	// maxPendingReplyBytes bounds the file data queued replies hold
	// (fs/readFile's and fs/readBlock's, allocated for the reply): a
	// handler whose reply would pass it waits until the writer has sent
	// enough, unless nothing is queued. Without it 256 replies of 64 MiB
	// files would be 16 GiB for one client that stops reading.
	maxPendingReplyBytes = 64 << 20
	// laneTurnEvents and laneTurnBytes bound what one process may send in
	// one turn of the writer's round robin, so a process with a flood of
	// output cannot delay another's events or any reply by more than one
	// turn.
	laneTurnEvents = 16
	laneTurnBytes  = 256 << 10
)

// connection lifecycle
const (
	stateNew         = iota // waiting for initialize
	stateInitialized        // initialize answered, waiting for initialized
	stateReady
)

// ServeConn serves one client connection until it ends or ctx is done. The
// connection's session (if any) is detached, not ended, when it returns.
func (s *Server) ServeConn(ctx context.Context, mc transport.MessageConn) error {
	return s.serveConn(ctx, mc, nil)
}

// serveConn serves one connection. Pushed events go through the
// connection's outbox, or, when streams is set (the native transport), to
// one stream per process.
func (s *Server) serveConn(ctx context.Context, mc transport.MessageConn, streams *streamLanes) error {
	ctx, cancel := context.WithCancel(ctx)
	readCtx, stopReads := context.WithCancel(ctx)
	c := &serverConn{
		srv:     s,
		mc:      mc,
		ctx:     ctx,
		cancel:  cancel,
		readCtx: readCtx,
		log:     s.log,
		reads:   make(chan struct{}, s.cfg.MaxConcurrentReads),
		out:     newOutbox(),
		streams: streams,
	}
	writerDone := make(chan error, 1)
	go func() {
		werr := c.writeLoop()
		// Nothing queued can be written any more: wake the handlers
		// waiting for room in the queue (a reply, a notification), or
		// the wind-down below would wait for them for ever once the
		// writer failed under a full queue.
		c.out.shutdown()
		writerDone <- werr
	}()
	err := c.readLoop()
	// Wind down: end long polls, detach the session (its processes keep
	// running), then let the writer flush the replies already queued.
	stopReads()
	if c.session != nil {
		c.session.detach(c.attach)
	}
	c.handlers.Wait()
	c.out.shutdown()
	c.closeMissingWatch() // after shutdown: a notification being handed over gives up
	if streams != nil {
		streams.shutdown()
	}
	drain := time.NewTimer(drainTimeout)
	var werr error
	select {
	case werr = <-writerDone:
	case <-drain.C:
		cancel()
		werr = <-writerDone
	}
	drain.Stop()
	cancel()
	mc.Close()
	if err == nil {
		err = werr
	}
	return err
}

// drainTimeout bounds how long a closing connection may spend flushing
// queued replies.
const drainTimeout = 5 * time.Second

type serverConn struct {
	srv     *Server
	mc      transport.MessageConn
	ctx     context.Context // the connection's life
	cancel  context.CancelFunc
	readCtx context.Context // long polls; ends when the read loop does
	log     *zap.Logger

	state    int
	initErr  *protocol.Error // why initialize failed, if it did: later requests say so
	session  *Session
	attach   *attachment
	reads    chan struct{} // semaphore for concurrent long polls
	handlers sync.WaitGroup
	out      *outbox
	http     httpConn // http/request's streams and transport
	// fs/watchMissing's, made on first use (watch.go)
	missing *remotefs.MissingWatcher

	streams *streamLanes // native transport: a stream per process

	parkedMu sync.Mutex
	parked   []func() // starts lanes added by the request being handled
}

func (c *serverConn) readLoop() error {
	for {
		m, err := c.mc.ReadMessage(c.ctx)
		if err != nil {
			var me *transport.MalformedError
			if errors.As(err, &me) {
				// A request dropped part way (a read budget's) is
				// answered under its own id, so its caller is not left
				// waiting; anything else under MalformedID.
				if !c.out.reply(outMsg{id: me.ReplyID(), err: protocol.KindErrorf(malformedKind(me), protocol.CodeInvalidRequest, "%v", me)}) {
					return nil
				}
				continue
			}
			if c.ctx.Err() != nil {
				return nil
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
				c.out.reply(outMsg{id: transport.MalformedID, err: protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidRequest, "initialized notification is only valid once, after initialize")})
				continue
			}
			c.out.reply(outMsg{id: transport.MalformedID, err: protocol.KindErrorf(protocol.KindUnsupported, protocol.CodeMethodNotFound, "unknown notification %q", m.Method)})
		case transport.KindResponse:
			c.out.reply(outMsg{id: transport.MalformedID, err: protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidRequest, "unexpected response (id %s): this executor sends no requests", m.ID)})
		}
	}
}

// malformedKind is the kind of an undecodable message's refusal: too
// large, dropped for want of read budget (exhausted), or invalid.
func malformedKind(err error) protocol.Kind {
	switch {
	case errors.Is(err, transport.ErrMessageTooLarge):
		return protocol.KindTooLarge
	case errors.Is(err, transport.ErrReadBudgetExhausted):
		return protocol.KindExhausted
	}
	return protocol.KindInvalid
}

// sessionRefusal gives newSession's refusal its kind when it has none:
// unavailable while the server shuts down, exhausted when it holds its
// most sessions. (newSession, in server.go, builds it without a kind;
// once it passes one, this adds nothing.)
func (s *Server) sessionRefusal(err error) error {
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.Kind() != "" {
		return err
	}
	s.mu.Lock()
	closing := s.closing
	s.mu.Unlock()
	kind := protocol.KindExhausted
	if closing {
		kind = protocol.KindUnavailable
	}
	return protocol.KindErrorf(kind, pe.Code, "%s", pe.Message)
}

// method is one entry of the method table shared by every codec.
type method struct {
	family string // for lifecycle error messages
	// longPoll methods may wait; they run beside the read loop.
	longPoll bool
	call     func(c *serverConn, m *transport.Message) (any, error)
}

var methods map[string]method

func init() {
	methods = map[string]method{
		protocol.MethodInitialize:       {family: "initialize", call: (*serverConn).initialize},
		protocol.MethodProcessStart:     {family: "exec", call: (*serverConn).processStart},
		protocol.MethodProcessRead:      {family: "exec", call: (*serverConn).processRead, longPoll: true},
		protocol.MethodProcessWrite:     {family: "exec", call: (*serverConn).processWrite},
		protocol.MethodProcessSignal:    {family: "exec", call: (*serverConn).processSignal},
		protocol.MethodProcessTerminate: {family: "exec", call: (*serverConn).processTerminate},
		protocol.MethodProcessResize:    {family: "exec", call: (*serverConn).processResize},
		protocol.MethodEnvironmentInfo:  {family: "environment info", call: (*serverConn).environmentInfo},
		// On the network: beside the read loop.
		protocol.MethodHTTPRequest: {family: "http", call: (*serverConn).httpRequest, longPoll: true},
		// envconfig*.go, discover*.go; the last two read files: beside the read loop.
		protocol.MethodEnvironmentStatus:      {family: "environment status", call: (*serverConn).environmentStatus},
		protocol.MethodEnvironmentConfigRead:  {family: "environment config", longPoll: true, call: (*serverConn).environmentConfigRead},
		protocol.MethodCapabilitiesDiscoverV2: {family: "capability discovery", longPoll: true, call: (*serverConn).capabilitiesDiscoverV2},
	}
	// fs methods do disk I/O: they run beside the read loop (bounded by
	// MaxConcurrentReads), so a large read does not stall other requests.
	fsMethod := func(name string, call func(c *serverConn, m *transport.Message) (any, error)) {
		methods[name] = method{family: "fs", longPoll: true, call: call}
	}
	fsMethod(protocol.MethodFsReadFile, fsCall((*remotefs.Session).ReadFile))
	fsMethod(protocol.MethodFsWriteFile, fsCall((*remotefs.Session).WriteFile))
	fsMethod(protocol.MethodFsCreateDirectory, fsCall((*remotefs.Session).CreateDirectory))
	fsMethod(protocol.MethodFsGetMetadata, fsCall((*remotefs.Session).GetMetadata))
	fsMethod(protocol.MethodFsCanonicalize, fsCall((*remotefs.Session).Canonicalize))
	fsMethod(protocol.MethodFsReadDirectory, fsCall((*remotefs.Session).ReadDirectory))
	fsMethod(protocol.MethodFsRemove, fsCall((*remotefs.Session).Remove))
	fsMethod(protocol.MethodFsCopy, fsCall((*remotefs.Session).Copy))
	fsMethod(protocol.MethodFsOpen, fsCall((*remotefs.Session).Open))
	fsMethod(protocol.MethodFsReadBlock, fsCall((*remotefs.Session).ReadBlock))
	fsMethod(protocol.MethodFsClose, fsCall((*remotefs.Session).Close))
	fsMethod(protocol.MethodFsCreate, fsCall((*remotefs.Session).Create))
	fsMethod(protocol.MethodFsWriteBlock, fsCall((*remotefs.Session).WriteBlock))
	fsMethod(protocol.MethodFsHash, fsCall((*remotefs.Session).Hash))
	fsMethod(protocol.MethodFsCreateSymlink, fsCall((*remotefs.Session).CreateSymlink))
	fsMethod(protocol.MethodFsWalk, fsCall((*remotefs.Session).Walk))
	// On the read loop, in arrival order, as watchIds are judged (watch.go).
	methods[protocol.MethodFsWatchMissing] = method{family: "fs", call: (*serverConn).fsWatchMissing}
}

// fsCall adapts a method of the session's file system to the method
// table: decode the params (required), call.
func fsCall[P any](f func(*remotefs.Session, P) (any, error)) func(c *serverConn, m *transport.Message) (any, error) {
	return func(c *serverConn, m *transport.Message) (any, error) {
		var p P
		if err := decode(m, &p, true); err != nil {
			return nil, err
		}
		return f(c.session.files, p)
	}
}

func (c *serverConn) request(m *transport.Message) {
	wrapped := false
	if m.Method == protocol.MethodCodexCall {
		inner, err := c.unwrapCodexCall(m)
		if err != nil {
			c.out.reply(outMsg{id: m.ID, err: err})
			return
		}
		m, wrapped = inner, true
	}
	meth, ok := methods[m.Method]
	if !ok {
		c.out.reply(outMsg{id: m.ID, err: protocol.KindErrorf(protocol.KindUnsupported, protocol.CodeMethodNotFound, "method `%s` is not implemented by this executor", m.Method)})
		return
	}
	if m.Method != protocol.MethodInitialize {
		switch c.state {
		case stateNew:
			if c.initErr != nil {
				// A client that pipelines its first request behind
				// initialize learns why it was refused: initialize's
				// error, with its kind. Nothing runs.
				c.out.reply(outMsg{id: m.ID, err: protocol.KindErrorf(c.initErr.Kind(), protocol.CodeInvalidRequest, "initialize failed on this connection, so %s was not run: %s", m.Method, c.initErr.Message)})
				return
			}
			c.out.reply(outMsg{id: m.ID, err: protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidRequest, "client must call initialize before using %s methods", meth.family)})
			return
		case stateInitialized:
			c.out.reply(outMsg{id: m.ID, err: protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidRequest, "client must send initialized before using %s methods", meth.family)})
			return
		}
	}
	run := func() {
		defer func() {
			// A handler bug must cost one request, not the executor.
			if p := recover(); p != nil {
				c.log.Error("method handler panicked", zap.String("method", m.Method), zap.Any("panic", p), zap.Stack("stack"))
				c.out.reply(outMsg{id: m.ID, err: protocol.KindErrorf(protocol.KindInternal, protocol.CodeInternal, "internal error handling %s", m.Method)})
				c.unparkAll()
			}
		}()
		res, err := meth.call(c, m)
		queued := false
		if ar, ok := res.(afterReplier); ok {
			// Its work starts once the reply is queued, or is released.
			defer func() { ar.afterReply(queued) }()
		}
		if wrapped && err == nil {
			res, err = codexResult(m.Method, res)
		}
		if meth.longPoll && c.readCtx.Err() != nil {
			return // the connection is closing; nobody waits for this reply
		}
		if err != nil {
			var pe *protocol.Error
			if !errors.As(err, &pe) {
				pe = protocol.KindErrorf(errKind(err, protocol.KindInternal), protocol.CodeInternal, "%v", err)
			}
			if m.Method == protocol.MethodInitialize && c.state == stateNew {
				c.initErr = pe // initialize runs on the read loop: no race
			}
			c.out.reply(outMsg{id: m.ID, err: pe})
			c.unparkAll()
			return
		}
		queued = c.out.reply(outMsg{id: m.ID, result: res})
		c.unparkAll()
	}
	if !meth.longPoll {
		run()
		return
	}
	select {
	case c.reads <- struct{}{}:
	case <-c.ctx.Done():
		return
	}
	c.handlers.Add(1)
	go func() {
		defer func() { <-c.reads; c.handlers.Done() }()
		run()
	}()
}

// decode fills v from m's params; required says absent params are an error.
func decode(m *transport.Message, v any, required bool) error {
	if m.Params == nil || m.Params.Absent() {
		if required {
			return protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "invalid params for %s: params are required", m.Method)
		}
		return nil
	}
	if err := m.Params.Decode(v); err != nil {
		var pe *protocol.Error
		if errors.As(err, &pe) {
			// A params type judged the value itself (ExecParams' codex
			// shapes): its code and codex's own words, as they are.
			return pe
		}
		var b64 base64.CorruptInputError
		if errors.As(err, &b64) {
			// encoding/json does not name the field: name the binary
			// fields a method has.
			if m.Method == protocol.MethodFsWriteFile {
				// codex's code and wording for this one.
				return protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidRequest, "fs/writeFile requires valid base64 dataBase64: %v", err)
			}
			return protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "invalid params for %s: chunk is not valid base64: %v", m.Method, err)
		}
		return protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "invalid params for %s: %v", m.Method, err)
	}
	return nil
}

func requireProcessID(method, id string) error {
	if id == "" {
		return protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "invalid params for %s: processId is required", method)
	}
	return nil
}

func (c *serverConn) initialize(m *transport.Message) (any, error) {
	if c.state != stateNew {
		return nil, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidRequest, "initialize may only be sent once per connection")
	}
	var p protocol.InitializeParams
	if err := decode(m, &p, false); err != nil {
		return nil, err
	}
	if p.ProtocolVersion != 0 && p.ProtocolVersion != protocol.Version {
		return nil, protocol.KindErrorf(protocol.KindUnsupported, protocol.CodeInvalidRequest,
			"this executor speaks outpost protocol version %d, the client %d: upgrade the older side", protocol.Version, p.ProtocolVersion)
	}
	var sess *Session
	if p.ResumeSessionID != nil {
		sess = c.srv.lookup(*p.ResumeSessionID)
		if sess == nil {
			return nil, protocol.KindErrorf(protocol.KindUnknownSession, protocol.CodeInvalidRequest, "unknown session id %s", *p.ResumeSessionID)
		}
	} else {
		var err error
		if sess, err = c.srv.newSession(); err != nil {
			return nil, c.srv.sessionRefusal(err)
		}
	}
	a, err := sess.attach(c)
	if err != nil {
		return nil, err
	}
	c.session, c.attach, c.state = sess, a, stateInitialized
	c.traceHandshake(p)
	c.log.Debug("session attached", zap.String("session", sess.id), zap.String("client", p.ClientName), zap.Bool("resumed", p.ResumeSessionID != nil))
	info := EnvironmentInfo(c.srv.cfg)
	res := protocol.InitializeResult{SessionID: sess.id, EnvironmentInfo: &info}
	if p.ProtocolVersion != 0 {
		res.ProtocolVersion = protocol.Version
	}
	return res, nil
}

func (c *serverConn) processStart(m *transport.Message) (any, error) {
	var p protocol.ExecParams
	if err := decode(m, &p, true); err != nil {
		return nil, err
	}
	return c.session.Start(c.ctx, p)
}

func (c *serverConn) processRead(m *transport.Message) (any, error) {
	var p protocol.ReadParams
	if err := decode(m, &p, true); err != nil {
		return nil, err
	}
	if err := requireProcessID(m.Method, p.ProcessID); err != nil {
		return nil, err
	}
	return c.session.Read(c.readCtx, p, c.attach.ended)
}

func (c *serverConn) processWrite(m *transport.Message) (any, error) {
	var p protocol.WriteParams
	if err := decode(m, &p, true); err != nil {
		return nil, err
	}
	if err := requireProcessID(m.Method, p.ProcessID); err != nil {
		return nil, err
	}
	return c.session.Write(p)
}

func (c *serverConn) processSignal(m *transport.Message) (any, error) {
	var p protocol.SignalParams
	if err := decode(m, &p, true); err != nil {
		return nil, err
	}
	if err := requireProcessID(m.Method, p.ProcessID); err != nil {
		return nil, err
	}
	if err := c.session.Signal(p); err != nil {
		return nil, err
	}
	return protocol.Empty{}, nil
}

func (c *serverConn) processTerminate(m *transport.Message) (any, error) {
	var p protocol.TerminateParams
	if err := decode(m, &p, true); err != nil {
		return nil, err
	}
	if err := requireProcessID(m.Method, p.ProcessID); err != nil {
		return nil, err
	}
	return c.session.Terminate(p), nil
}

func (c *serverConn) processResize(m *transport.Message) (any, error) {
	var p protocol.ResizeParams
	if err := decode(m, &p, true); err != nil {
		return nil, err
	}
	if err := requireProcessID(m.Method, p.ProcessID); err != nil {
		return nil, err
	}
	if err := c.session.Resize(p); err != nil {
		return nil, err
	}
	return protocol.Empty{}, nil
}

func (c *serverConn) environmentInfo(*transport.Message) (any, error) {
	return EnvironmentInfo(c.srv.cfg), nil
}

// EnvironmentInfo describes this executor for environment/info and
// initialize. Paths are file: URIs, as codex 0.171 requires.
func EnvironmentInfo(cfg Config) protocol.EnvironmentInfo {
	name, shell := executorShell()
	info := protocol.EnvironmentInfo{
		Shell:                protocol.Shell{Name: name, Path: shell},
		ExecutorVersion:      cfg.Version,
		ProviderID:           "outpost:" + cfg.Version,
		Cwd:                  pathmap.URI(cfg.DefaultCwd),
		PlatformOS:           runtime.GOOS,
		PrependPathDirs:      []string{},
		TemporaryDirectories: []string{},
		TempDir:              pathmap.URI(absPath(os.TempDir())),
		Capabilities:         Capabilities(cfg),
	}
	// codex lists $TMPDIR (made absolute) when it is set, and nothing else.
	if t := os.Getenv("TMPDIR"); t != "" {
		info.TemporaryDirectories = []string{pathmap.URI(absPath(t))}
	}
	if home, err := os.UserHomeDir(); err == nil && filepath.IsAbs(home) {
		info.UserHomeDir = pathmap.URI(home)
	}
	return info
}

// absPath makes p absolute against this process's working directory, as
// codex's server does with a relative $TMPDIR: a URI must name an
// absolute path.
func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return "/"
}

// follow implements eventSink: push proc's events to this connection,
// once the reply of the request being handled has been queued.
func (c *serverConn) follow(sessionID, id string, proc engine.Process, afterSeq uint64, fromNow bool) {
	var start func()
	if c.streams != nil {
		start = c.streams.follow(c.ctx, sessionID, id, proc.Log(), afterSeq, fromNow)
	} else if ln := c.out.follow(id, proc.Log(), afterSeq, fromNow); ln != nil {
		start = func() { c.out.unpark(ln) }
	}
	if start != nil {
		c.parkedMu.Lock()
		c.parked = append(c.parked, start)
		c.parkedMu.Unlock()
	}
}

// notify queues a notification that is not a process event (the
// handler of fs/watchMissing or a streamed http/request sends them),
// waiting while the reply queue is full: a client that does not read
// holds its own handler, never the executor's memory. It reports false
// once the connection is closing.
func (c *serverConn) notify(method string, params any) bool {
	if c.streams != nil {
		// The native transport: as codex JSON inside codex/notification
		// (protocol/codex.go), for the front end that relays it to codex.
		raw, err := transport.MarshalJSON(params)
		if err != nil {
			c.log.Error("notification cannot be encoded", zap.String("method", method), zap.Error(err))
			return true
		}
		method, params = protocol.MethodCodexNotification, protocol.CodexNotification{Method: method, Params: raw}
	}
	return c.out.reply(outMsg{method: method, result: params})
}

// unparkAll starts the lanes parked while handling a request.
func (c *serverConn) unparkAll() {
	c.parkedMu.Lock()
	parked := c.parked
	c.parked = nil
	c.parkedMu.Unlock()
	for _, start := range parked {
		start()
	}
}

func (c *serverConn) writeLoop() error {
	for {
		msg, ln, ok := c.out.next(c.ctx)
		if !ok {
			return nil
		}
		if ln == nil {
			if err := c.writeMsg(msg); err != nil {
				c.fail()
				return err
			}
			continue
		}
		events, gap, done := ln.sub.Next(laneTurnEvents, laneTurnBytes)
		if gap != nil {
			c.log.Warn("pushed output was evicted before it could be sent; readers see a gap",
				zap.String("process", ln.id), zap.Uint64("fromSeq", gap.FromSeq), zap.Uint64("toSeq", gap.ToSeq))
		}
		for i := range events {
			if err := writeEvent(c.ctx, c.mc, ln.id, &events[i]); err != nil {
				c.out.finishTurn(ln, false, false)
				c.fail()
				return err
			}
		}
		c.out.finishTurn(ln, len(events) > 0, done)
	}
}

// fail ends a connection whose writes fail, unblocking the read loop.
func (c *serverConn) fail() {
	c.cancel()
	c.mc.Close()
}

func (c *serverConn) writeMsg(m outMsg) error {
	if m.method != "" {
		return c.mc.WriteNotification(c.ctx, m.method, m.result)
	}
	if m.err != nil {
		return c.mc.WriteError(c.ctx, m.id, m.err)
	}
	err := c.mc.WriteResult(c.ctx, m.id, m.result)
	remotefs.ReleaseBlock(m.result) // written (or refused): its buffer is free
	if errors.Is(err, transport.ErrMessageTooLarge) {
		// Refused before anything was written (a 64 MiB file is 85 MiB in
		// base64): answer with an error rather than drop the connection,
		// which a resuming client would only retry.
		return c.mc.WriteError(c.ctx, m.id, protocol.KindErrorf(protocol.KindTooLarge, protocol.CodeInvalidRequest,
			"the result is too large for one message on this connection (%v); read large files with fs/open and fs/readBlock", err))
	}
	return err
}

// writeEvent sends one event as its notification.
func writeEvent(ctx context.Context, mc transport.MessageConn, id string, ev *engine.Event) error {
	return mc.WriteNotification(ctx, eventMethod(ev.Kind), eventParams(id, ev))
}

// eventMethod and eventParams are the notification of an event, as the
// protocol maps it.
func eventMethod(k engine.EventKind) string { return k.Method() }

func eventParams(id string, ev *engine.Event) any { return ev.Params(id) }

// outMsg is a queued reply, or, when method is set, a notification
// (params in result) that is not a process event: fs/missingChanged,
// http/request/bodyDelta. Both share the reply queue's bounds and order.
type outMsg struct {
	id     transport.ID
	method string
	result any
	err    *protocol.Error
	bytes  int // file data the result holds (replyBytes)
}

// replyBytes is the file data a result holds that was allocated for it;
// other results reference what the executor keeps anyway (process output
// in its retention buffers) or are small.
func replyBytes(result any) int {
	switch r := result.(type) {
	case protocol.FsReadBlockResult:
		return len(r.Chunk)
	case protocol.HTTPRequestResult:
		return len(r.Body)
	case protocol.HTTPBodyDelta:
		return len(r.Delta)
	case protocol.FsReadFileResult:
		return len(r.Data)
	case protocol.CodexCallResult:
		return len(r.Result)
	case protocol.CodexNotification:
		return len(r.Params)
	}
	return 0
}

// lane is one process's pushed events on one connection.
type lane struct {
	id     string
	sub    *engine.Subscription
	queued bool // in ready, or being served
	busy   bool // being served by the writer
	again  bool // woken while busy
	parked bool // not served until the reply that created it is queued
}

// outbox schedules a connection's writes: replies first, then one turn
// per process with events pending, round robin. Events are not copied
// into the outbox; a lane pulls them from its process's retention buffer
// when its turn comes, so the outbox holds at most maxPendingReplies
// replies and the set of lanes.
type outbox struct {
	mu      sync.Mutex
	notFull *sync.Cond
	replies []outMsg
	bytes   int // the replies' replyBytes together
	// answers counts the queued entries that are replies rather than
	// notifications, and notesInRow the notifications written since a
	// lane last had a turn: a stream of notifications (an endless
	// http/request body) yields to process events every laneTurnEvents,
	// while a queued reply still goes before any lane (a start's reply
	// before its own events).
	answers    int
	notesInRow int
	ready      []*lane
	lanes      map[*lane]struct{}
	wake       chan struct{}
	shutDown   bool
}

func newOutbox() *outbox {
	o := &outbox{wake: make(chan struct{}, 1), lanes: make(map[*lane]struct{})}
	o.notFull = sync.NewCond(&o.mu)
	return o
}

func (o *outbox) kick() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// reply queues a reply, waiting while the queue is full. It returns false
// once the outbox has shut down.
func (o *outbox) reply(m outMsg) bool {
	m.bytes = replyBytes(m.result)
	o.mu.Lock()
	for !o.shutDown && (len(o.replies) >= maxPendingReplies || len(o.replies) > 0 && o.bytes+m.bytes > maxPendingReplyBytes) {
		o.notFull.Wait()
	}
	if o.shutDown {
		o.mu.Unlock()
		return false
	}
	o.replies = append(o.replies, m)
	o.bytes += m.bytes
	if m.method == "" {
		o.answers++
	}
	o.mu.Unlock()
	o.kick()
	return true
}

// follow adds a parked lane for a process's events; unpark starts it. The
// lane holds the log: the process waits rather than evict what this
// connection has not yet sent.
func (o *outbox) follow(id string, log *engine.EventLog, afterSeq uint64, fromNow bool) *lane {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.shutDown {
		return nil
	}
	ln := &lane{id: id, parked: true}
	notify := func() { o.markReady(ln) }
	if fromNow {
		ln.sub = log.SubscribeNow(true, notify)
	} else {
		ln.sub = log.Subscribe(afterSeq, true, notify)
	}
	o.lanes[ln] = struct{}{}
	return ln
}

// unpark lets the writer serve ln, so a process's first notification
// never overtakes the reply to the request that started it.
func (o *outbox) unpark(ln *lane) {
	o.mu.Lock()
	ln.parked = false
	o.mu.Unlock()
	o.markReady(ln)
}

func (o *outbox) markReady(ln *lane) {
	o.mu.Lock()
	if ln.parked {
		o.mu.Unlock()
		return
	}
	if ln.busy {
		ln.again = true
		o.mu.Unlock()
		return
	}
	if ln.queued || o.shutDown {
		o.mu.Unlock()
		return
	}
	if _, live := o.lanes[ln]; !live {
		o.mu.Unlock()
		return
	}
	ln.queued = true
	o.ready = append(o.ready, ln)
	o.mu.Unlock()
	o.kick()
}

// next returns the next reply, or the next lane to serve.
func (o *outbox) next(ctx context.Context) (outMsg, *lane, bool) {
	for {
		o.mu.Lock()
		if len(o.replies) > 0 && !(o.answers == 0 && len(o.ready) > 0 && o.notesInRow >= laneTurnEvents) {
			m := o.replies[0]
			o.replies[0] = outMsg{}
			o.replies = o.replies[1:]
			o.bytes -= m.bytes
			if m.method == "" {
				o.answers--
			} else {
				o.notesInRow++
			}
			o.notFull.Broadcast() // a waiter may need bytes, not just a slot
			o.mu.Unlock()
			return m, nil, true
		}
		if o.shutDown {
			o.mu.Unlock()
			return outMsg{}, nil, false
		}
		if len(o.ready) > 0 {
			o.notesInRow = 0
			ln := o.ready[0]
			o.ready[0] = nil
			o.ready = o.ready[1:]
			ln.busy, ln.again = true, false
			o.mu.Unlock()
			return outMsg{}, ln, true
		}
		o.mu.Unlock()
		select {
		case <-o.wake:
		case <-ctx.Done():
			return outMsg{}, nil, false
		}
	}
}

// finishTurn requeues a lane that may have more to send, or retires a
// lane whose process has closed.
func (o *outbox) finishTurn(ln *lane, sent, done bool) {
	o.mu.Lock()
	ln.busy = false
	if done {
		delete(o.lanes, ln)
		ln.queued = false
		o.mu.Unlock()
		ln.sub.Close()
		return
	}
	if sent || ln.again {
		o.ready = append(o.ready, ln)
		o.mu.Unlock()
		o.kick()
		return
	}
	ln.queued = false
	o.mu.Unlock()
}

// shutdown drops queued work and releases every lane's hold.
func (o *outbox) shutdown() {
	o.mu.Lock()
	o.shutDown = true
	lanes := o.lanes
	o.lanes = map[*lane]struct{}{}
	o.ready = nil
	o.notFull.Broadcast()
	o.mu.Unlock()
	for ln := range lanes {
		ln.sub.Close()
	}
	o.kick()
}
