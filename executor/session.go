package executor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/outpost-exec/outpost/engine"
	"github.com/outpost-exec/outpost/internal/errkind"
	"github.com/outpost-exec/outpost/pathmap"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/remotefs"
	"github.com/outpost-exec/outpost/sandbox"
)

// Session owns a table of processes keyed by client-chosen ids, and its
// file system (the fs/* handles it opened). It is attached to at most one
// connection, which receives its notifications.
type Session struct {
	id    string
	srv   *Server
	files *remotefs.Session // ended with the session

	mu       sync.Mutex
	procs    map[string]*procEntry
	attached *attachment
	expiry   *time.Timer
	ended    bool
}

// procEntry is a process table slot: a Starting placeholder (proc nil)
// or a started process. start identifies the start attempt, so a failed
// or cancelled start removes only its own placeholder.
type procEntry struct {
	start *struct{ _ byte }
	proc  engine.Process
	// closedAt is when the process closed (zero while it runs), under
	// Session.mu: a full table gives up its oldest closed process first.
	closedAt time.Time
}

// attachment is one connection's hold on a session.
type attachment struct {
	sink  eventSink
	ended chan struct{} // closed when the connection detaches or is evicted
}

// eventSink receives the pushed events of a session's processes.
type eventSink interface {
	// follow starts pushing proc's events after seq afterSeq.
	follow(sessionID, id string, proc engine.Process, afterSeq uint64, fromNow bool)
}

// ID returns the session id.
func (s *Session) ID() string { return s.id }

// MaxProcessIDBytes bounds a client-chosen process id.
const MaxProcessIDBytes = 256

// attach makes sink the session's connection. A session attached
// elsewhere refuses.
func (s *Session) attach(sink eventSink) (*attachment, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return nil, protocol.KindErrorf(protocol.KindUnknownSession, protocol.CodeInvalidRequest, "unknown session id %s", s.id)
	}
	if s.attached != nil {
		return nil, protocol.KindErrorf(protocol.KindUnavailable, protocol.CodeSessionAlreadyAttached, "session %s is already attached to another connection", s.id)
	}
	if s.expiry != nil {
		s.expiry.Stop()
		s.expiry = nil
	}
	a := &attachment{sink: sink, ended: make(chan struct{})}
	s.attached = a
	for id, e := range s.procs {
		if e.proc != nil {
			sink.follow(s.id, id, e.proc, 0, true)
		}
	}
	return a, nil
}

// detach ends a's hold; the session's processes keep running for the TTL.
func (s *Session) detach(a *attachment) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.attached != a || a == nil {
		return
	}
	s.attached = nil
	close(a.ended)
	if s.ended {
		return
	}
	ttl := s.srv.cfg.DetachedTTL
	s.expiry = time.AfterFunc(ttl, func() {
		s.mu.Lock()
		still := s.attached == nil && !s.ended
		s.mu.Unlock()
		if still {
			s.srv.log.Info("detached session expired; killing its processes", zap.String("session", s.id), zap.Duration("ttl", ttl))
			for _, p := range s.end(true) {
				p.Kill()
			}
		}
	})
}

// end removes the session from the server and returns its processes. With
// onlyDetached it does nothing if a connection re-attached meanwhile.
func (s *Session) end(onlyDetached bool) []engine.Process {
	s.mu.Lock()
	if s.ended || (onlyDetached && s.attached != nil) {
		s.mu.Unlock()
		return nil
	}
	s.ended = true
	if s.expiry != nil {
		s.expiry.Stop()
	}
	var procs []engine.Process
	for _, e := range s.procs {
		if e.proc != nil {
			procs = append(procs, e.proc)
		}
	}
	clear(s.procs)
	// Under s.mu, so no fs/open or fs/create succeeds once the session
	// has ended.
	s.files.End()
	s.mu.Unlock()
	s.srv.remove(s)
	return procs
}

func (s *Session) validateStart(p *protocol.ExecParams) error {
	switch {
	case p.ProcessID == "":
		return protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "processId must not be empty")
	case len(p.ProcessID) > MaxProcessIDBytes:
		return protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "processId must be at most %d bytes", MaxProcessIDBytes)
	case len(p.Argv) == 0:
		return protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "argv must not be empty")
	case p.Argv[0] == "":
		return protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "argv[0] must not be empty")
	case p.EnforceManagedNetwork || p.ManagedNetwork != nil:
		return protocol.KindErrorf(protocol.KindUnsupported, protocol.CodeInvalidRequest, "managed network cannot be enforced on this executor: not supported")
	}
	for i, a := range p.Argv {
		if strings.ContainsRune(a, 0) {
			return protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "argv[%d] contains a NUL byte", i)
		}
	}
	if p.Arg0 != nil && strings.ContainsRune(*p.Arg0, 0) {
		return protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "arg0 contains a NUL byte")
	}
	return validateStartOptions(p)
}

// prepare turns start params into a Spec on this machine.
func (s *Session) prepare(p *protocol.ExecParams) (engine.Spec, error) {
	dir, err := pathmap.NativeDir(p.Cwd, s.srv.cfg.DefaultCwd, s.srv.translate)
	if err != nil {
		if errors.Is(err, pathmap.ErrForeignPath) {
			return engine.Spec{}, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "cwd URI `%s` is not valid on this exec-server host: %v", p.Cwd, err).WithParam(protocol.ParamCwd)
		}
		// A missing cwd is not_found like a missing program: the param
		// tells them apart.
		return engine.Spec{}, protocol.KindErrorf(errKind(err, protocol.KindInvalid), protocol.CodeInvalidParams, "%v", err).WithParam(protocol.ParamCwd)
	}
	env, err := engine.ChildEnv(p.EnvPolicy, p.Env, s.srv.cfg.BaseEnv)
	if err != nil {
		return engine.Spec{}, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "%v", err)
	}
	spec := engine.Spec{Argv: p.Argv, Dir: dir, Env: env, Tty: p.Tty, PipeStdin: p.PipeStdin, Rows: p.Rows, Cols: p.Cols}
	if p.Arg0 != nil {
		spec.Arg0 = *p.Arg0
	}
	if p.Sandbox == nil {
		return spec, nil // no sandbox context: run natively
	}
	return s.sandboxed(p, spec)
}

// sandboxed rewrites spec to run under the sandbox helper. A policy this
// executor cannot enforce is refused; it never runs unsandboxed.
func (s *Session) sandboxed(p *protocol.ExecParams, spec engine.Spec) (engine.Spec, error) {
	raw, err := json.Marshal(p.Sandbox)
	if err != nil {
		return engine.Spec{}, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "invalid params for process/start: sandbox: %v", err)
	}
	sctx, err := sandbox.ParseContext(raw)
	if err != nil {
		return engine.Spec{}, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "invalid params for process/start: %v", err)
	}
	req := sandbox.Request{Argv: spec.Argv, Arg0: spec.Arg0, Dir: spec.Dir, Env: spec.Env, Policy: sctx.Policy,
		Limits: s.srv.cfg.SandboxLimits, Translate: s.srv.translate, User: s.srv.cfg.SandboxUser, Hidden: s.srv.cfg.SandboxHidden,
		TempDir: envValue(spec.Env, "TMPDIR")}
	if sctx.Codex {
		// codex's project roots are its workspaceRoots, none meaning none.
		req.ExactProjectRoots = true
		for _, r := range sctx.WorkspaceRoots {
			n, err := s.srv.translate(r)
			if err != nil {
				return engine.Spec{}, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "invalid params for process/start: sandbox workspaceRoots: %v", err)
			}
			req.ProjectRoots = append(req.ProjectRoots, n)
		}
	}
	caps := s.srv.cfg.SandboxCaps()
	prep, err := sandbox.Prepare(req, caps)
	if err != nil {
		if errors.Is(err, sandbox.ErrCannotEnforce) {
			return engine.Spec{}, protocol.KindErrorf(protocol.KindUnsupported, protocol.CodeInvalidRequest, "%v", err)
		}
		return engine.Spec{}, protocol.KindErrorf(errKind(err, protocol.KindInvalid), protocol.CodeInvalidParams, "invalid params for process/start: %v", err)
	}
	spec.Argv, spec.Arg0, spec.Env, spec.Path, spec.Dir = prep.Argv, prep.Arg0, prep.Env, prep.Path, prep.Dir
	spec.Sandboxed, spec.SandboxType = prep.SandboxType == sandbox.TypeLinux, prep.SandboxType
	if spec.Sandboxed {
		spec.SandboxSetup = prep.Setup
	}
	if spec.Sandboxed {
		spec.Classify = prep.Resolved.Classify
	}
	return spec, nil
}

// envValue is KEY's value in a KEY=VALUE list, "" if absent.
func envValue(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], key+"="); ok {
			return v
		}
	}
	return ""
}

// Start starts a process under p.ProcessID. Two starts with one id give
// exactly one success; a terminate that arrives while the process is
// starting cancels the start.
func (s *Session) Start(ctx context.Context, p protocol.ExecParams) (res protocol.StartResult, err error) {
	ctx, span := s.startSpan(ctx, &p)
	defer func() { endSpan(span, err) }()
	if err := s.validateStart(&p); err != nil {
		return protocol.StartResult{}, err
	}
	spec, err := s.prepare(&p)
	if err != nil {
		return protocol.StartResult{}, err
	}
	id := p.ProcessID
	entry := &procEntry{start: new(struct{ _ byte })}
	s.mu.Lock()
	switch {
	case s.ended:
		s.mu.Unlock()
		return protocol.StartResult{}, protocol.KindErrorf(protocol.KindUnknownSession, protocol.CodeInvalidRequest, "session %s has ended", s.id)
	case s.procs[id] != nil:
		s.mu.Unlock()
		return protocol.StartResult{}, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidRequest, "process %s already exists", id)
	case len(s.procs) >= s.srv.cfg.MaxProcessesPerSession && !s.evictOldestClosedLocked():
		s.mu.Unlock()
		return protocol.StartResult{}, protocol.KindErrorf(protocol.KindExhausted, protocol.CodeInvalidRequest,
			"too many processes in this session (limit %d running or starting)", s.srv.cfg.MaxProcessesPerSession)
	}
	s.procs[id] = entry
	s.mu.Unlock()

	proc, err := s.srv.cfg.Backend.Start(ctx, spec)
	started := time.Now()

	s.mu.Lock()
	mine := s.procs[id] == entry
	if err != nil {
		if mine {
			delete(s.procs, id)
		}
		s.mu.Unlock()
		// By what the error wraps: a missing program (exec.ErrNotFound)
		// or working directory is not_found, a sandbox this machine cannot
		// enforce unsupported.
		kind := errKind(err, protocol.KindInternal)
		s.srv.log.Info("process start failed", s.auditFields(ctx, id, p.Argv, spec.SandboxType, zap.String("kind", string(kind)))...)
		return protocol.StartResult{}, protocol.KindErrorf(kind, protocol.CodeInternal, "%v", err)
	}
	if !mine || s.ended {
		s.mu.Unlock()
		proc.Kill()
		return protocol.StartResult{}, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidRequest, "process %s start was cancelled", id)
	}
	entry.proc = proc
	pid := 0
	if pp, ok := proc.(interface{ Pid() int }); ok {
		pid = pp.Pid()
	}
	m := s.srv.cfg.Metrics
	pspan := s.processSpan(ctx, pid, spec.SandboxType)
	log := s.srv.log
	log.Info("process started", s.auditFields(ctx, id, p.Argv, spec.SandboxType, append(metadataFields(p.Metadata), zap.Int("pid", pid))...)...)
	// One goroutine per live process; the process limits bound them.
	m.started()
	s.srv.watchers.Add(1)
	go func() {
		defer s.srv.watchers.Done()
		<-proc.Log().Closed()
		snap := proc.Log().Snapshot()
		m.exited(snap)
		if lp, ok := proc.(interface{ LimitHits() (int, int) }); ok && m != nil {
			m.limitHits(lp.LimitHits())
		}
		if pspan != nil {
			finishProcessSpan(pspan, snap)
		}
		fields := []zap.Field{zap.String("session", s.id), zap.String("process", id), zap.Int("pid", pid),
			zap.Bool("exited", snap.Exited), zap.Int32("exit_code", snap.ExitCode), zap.Int32("signal", snap.Signal),
			zap.Duration("duration", time.Since(started))}
		if snap.Limit != "" {
			fields = append(fields, zap.String("limit", snap.Limit))
		}
		if snap.SandboxDenied {
			fields = append(fields, zap.Bool("sandbox_denied", true))
		}
		log.Info("process exited", fields...)
	}()
	if s.attached != nil {
		s.attached.sink.follow(s.id, id, proc, 0, false)
	}
	s.mu.Unlock()
	go s.evictAfterClose(id, entry)
	return protocol.StartResult{ProcessID: id, SandboxType: reportedSandboxType(spec.SandboxType), Pid: pid}, nil
}

// auditFields are the fields of a process start's log line: the session,
// the process id, the client key's fingerprint when the connection has one,
// the sandbox mode and the sha256 of the argv. The argv itself may hold
// secrets: it is logged only when the logger is at debug level. The
// environment never is.
func (s *Session) auditFields(ctx context.Context, id string, argv []string, sandboxType string, more ...zap.Field) []zap.Field {
	sandboxMode := sandboxType
	if sandboxMode == "" {
		sandboxMode = "none"
	}
	fields := []zap.Field{zap.String("session", s.id), zap.String("process", id)}
	if fp := clientFingerprint(ctx); fp != "" {
		fields = append(fields, zap.String("client", fp))
	}
	fields = append(fields, zap.String("sandbox", sandboxMode), zap.String("argv_sha256", argvDigest(argv)))
	if s.srv.log.Core().Enabled(zapcore.DebugLevel) {
		fields = append(fields, zap.Strings("argv", argv))
	}
	return append(fields, more...)
}

// argvDigest is the hex sha256 of argv, each argument followed by a NUL
// (so ["a b"] and ["a", "b"] differ).
func argvDigest(argv []string) string {
	h := sha256.New()
	for _, a := range argv {
		h.Write([]byte(a))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// StartProcess is Start for a caller in this process (one that embeds the
// executor, as the benchmarks do): it returns the started process itself,
// not only its start result.
func (s *Session) StartProcess(ctx context.Context, p protocol.ExecParams) (engine.Process, error) {
	if _, err := s.Start(ctx, p); err != nil {
		return nil, err
	}
	e := s.lookup(p.ProcessID)
	if e == nil {
		// Closed and evicted already (a full table gives up closed
		// processes first).
		return nil, protocol.KindErrorf(protocol.KindNotFound, protocol.CodeInvalidRequest, "process %s was evicted", p.ProcessID)
	}
	return e.proc, nil
}

func (s *Session) evictAfterClose(id string, e *procEntry) {
	<-e.proc.Log().Closed()
	s.mu.Lock()
	e.closedAt = time.Now()
	s.mu.Unlock()
	time.AfterFunc(s.srv.cfg.ClosedRetention, func() {
		s.mu.Lock()
		if s.procs[id] == e {
			delete(s.procs, id)
		}
		s.mu.Unlock()
	})
}

// evictOldestClosedLocked frees the slot of the process that closed
// first, so a client running many short commands is limited by what runs,
// not by what it ran in the last ClosedRetention. It reports false when
// every slot holds a running or starting process. O(slots), only when full.
func (s *Session) evictOldestClosedLocked() bool {
	var oldestID string
	var oldest *procEntry
	for id, e := range s.procs {
		if !e.closedAt.IsZero() && (oldest == nil || e.closedAt.Before(oldest.closedAt)) {
			oldestID, oldest = id, e
		}
	}
	if oldest == nil {
		return false
	}
	delete(s.procs, oldestID)
	return true
}

// lookup returns the entry for id (nil if unknown).
func (s *Session) lookup(id string) *procEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.procs[id]
	if e == nil {
		return nil
	}
	return &procEntry{start: e.start, proc: e.proc}
}

// Read answers process/read.
func (s *Session) Read(ctx context.Context, p protocol.ReadParams, cancel <-chan struct{}) (protocol.ReadResult, error) {
	e := s.lookup(p.ProcessID)
	if e == nil {
		return protocol.ReadResult{}, protocol.KindErrorf(protocol.KindNotFound, protocol.CodeInvalidRequest, "unknown process id %s", p.ProcessID)
	}
	if e.proc == nil {
		return protocol.ReadResult{}, protocol.KindErrorf(protocol.KindUnavailable, protocol.CodeInvalidRequest, "process id %s is starting", p.ProcessID)
	}
	req := engine.ReadRequest{MaxBytes: -1, Cancel: cancel}
	if p.AfterSeq != nil {
		req.AfterSeq = *p.AfterSeq
	}
	if p.MaxBytes != nil && *p.MaxBytes < 1<<62 {
		req.MaxBytes = int64(*p.MaxBytes)
	}
	if p.WaitMs != nil {
		req.Wait = time.Duration(min(*p.WaitMs, uint64(24*time.Hour/time.Millisecond))) * time.Millisecond
	}
	res, err := e.proc.Log().Read(ctx, req)
	if errors.Is(err, engine.ErrReadCancelled) {
		return res, protocol.KindErrorf(protocol.KindUnavailable, protocol.CodeInvalidRequest, "%v", err)
	}
	return res, err
}

// Write answers process/write.
func (s *Session) Write(p protocol.WriteParams) (protocol.WriteResult, error) {
	writeID := ""
	if p.WriteID != nil {
		if *p.WriteID == "" {
			return protocol.WriteResult{}, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "writeId must not be empty")
		}
		writeID = *p.WriteID
	}
	e := s.lookup(p.ProcessID)
	switch {
	case e == nil:
		return protocol.WriteResult{Status: protocol.WriteUnknownProcess}, nil
	case e.proc == nil:
		return protocol.WriteResult{Status: protocol.WriteStarting}, nil
	}
	st, err := e.proc.Write(p.Chunk, writeID, p.CloseStdin)
	if err != nil {
		return protocol.WriteResult{}, protocol.KindErrorf(errKind(err, protocol.KindInternal), protocol.CodeInternal, "failed to write to process stdin: %v", err)
	}
	return protocol.WriteResult{Status: st}, nil
}

// Signal answers process/signal: a no-op for unknown or starting processes.
func (s *Session) Signal(p protocol.SignalParams) error {
	sig, ok := protocol.ParseSignal(p.Signal)
	if !ok {
		return protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "unknown signal %q; expected one of %v", p.Signal, protocol.Signals)
	}
	e := s.lookup(p.ProcessID)
	if e == nil || e.proc == nil {
		return nil
	}
	if err := e.proc.Signal(sig); err != nil {
		return protocol.KindErrorf(errKind(err, protocol.KindInternal), protocol.CodeInternal, "failed to signal process: %v", err)
	}
	return nil
}

// Terminate answers process/terminate. Terminating a starting process
// cancels its start.
func (s *Session) Terminate(p protocol.TerminateParams) protocol.TerminateResult {
	s.mu.Lock()
	e := s.procs[p.ProcessID]
	if e != nil && e.proc == nil {
		delete(s.procs, p.ProcessID)
		s.mu.Unlock()
		return protocol.TerminateResult{Running: true}
	}
	s.mu.Unlock()
	if e == nil {
		return protocol.TerminateResult{Running: false}
	}
	return protocol.TerminateResult{Running: e.proc.Terminate()}
}

// Resize answers process/resize.
func (s *Session) Resize(p protocol.ResizeParams) error {
	if p.Rows == 0 || p.Cols == 0 {
		return protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "rows and cols must be positive")
	}
	e := s.lookup(p.ProcessID)
	switch {
	case e == nil:
		return protocol.KindErrorf(protocol.KindNotFound, protocol.CodeInvalidRequest, "unknown process id %s", p.ProcessID)
	case e.proc == nil:
		return protocol.KindErrorf(protocol.KindUnavailable, protocol.CodeInvalidRequest, "process id %s is starting", p.ProcessID)
	}
	if err := e.proc.Resize(p.Rows, p.Cols); err != nil {
		if errors.Is(err, engine.ErrNotTTY) {
			return protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidRequest, "process %s is not a tty", p.ProcessID)
		}
		return protocol.KindErrorf(errKind(err, protocol.KindInternal), protocol.CodeInternal, "%v", fmt.Errorf("resize: %w", err))
	}
	return nil
}

// errKind is the kind of an error from the system, the backend or the
// sandbox package, decided by what it wraps (errors.Is), never by its text;
// fallback when nothing says more. The engine's own errors are told here,
// the rest by errkind.Of.
func errKind(err error, fallback protocol.Kind) protocol.Kind {
	switch {
	case errors.Is(err, engine.ErrNotTTY):
		return protocol.KindInvalid
	case errors.Is(err, engine.ErrStdinQueueFull):
		return protocol.KindExhausted
	case errors.Is(err, exec.ErrNotFound):
		return protocol.KindNotFound
	}
	return errkind.Of(err, fallback)
}
