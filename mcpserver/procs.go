package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"

	"github.com/outpost-exec/outpost/client"
	"github.com/outpost-exec/outpost/protocol"
)

// session is one MCP session's handles.
type session struct {
	max int

	calls   chan struct{} // a token per call in flight
	control chan struct{} // the same for controlTools

	mu      sync.Mutex
	handles map[string]*handle
	next    int
	ended   bool
}

func newSession(max int) *session {
	return &session{max: max, handles: map[string]*handle{}, calls: make(chan struct{}, MaxConcurrentCalls), control: make(chan struct{}, MaxControlCalls)}
}

// add registers a process under a new handle. At the bound, the oldest
// finished handle is forgotten to make room; with every handle live, the
// start is refused (and the process terminated by the caller).
func (s *session) add(h *handle) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return errorf(ErrUnavailable, "the session has ended")
	}
	if len(s.handles) >= s.max {
		var oldest *handle
		for _, o := range s.handles {
			if o.finished() && (oldest == nil || o.seq < oldest.seq) {
				oldest = o
			}
		}
		if oldest == nil {
			return errorf(ErrTooManyHandles, "this session has %d running processes, the most it may hold: terminate one first", s.max)
		}
		delete(s.handles, oldest.id)
	}
	s.next++
	h.seq = s.next
	h.id = "h" + strconv.Itoa(s.next)
	s.handles[h.id] = h
	return nil
}

func (s *session) get(id string) (*handle, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.handles[id]
	if !ok {
		return nil, errorf(ErrUnknownHandle, "no process has handle %q in this session (see the list tool)", id)
	}
	return h, nil
}

func (s *session) all() []*handle {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*handle, 0, len(s.handles))
	for _, h := range s.handles {
		out = append(out, h)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].seq < out[j].seq })
	return out
}

// end terminates every live process of the session: nothing an agent
// started outlives its MCP session.
func (s *session) end() {
	s.mu.Lock()
	s.ended = true
	hs := make([]*handle, 0, len(s.handles))
	for _, h := range s.handles {
		hs = append(hs, h)
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, h := range hs {
		if h.finished() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), terminateTimeout)
			defer cancel()
			h.p.Terminate(ctx)
		}()
	}
	wg.Wait()
}

// handle is a started process and the output kept for read: the last
// HandleOutput bytes of stdout and stderr together, in arrival order.
type handle struct {
	id       string
	seq      int
	executor string
	argv     []string
	p        *client.Process
	started  time.Time

	mu               sync.Mutex
	buf              []byte // output from offset base
	base             int64
	changed          chan struct{} // closed and replaced on new output or the end
	exited           bool
	exitCode, signal int32
	done             bool
	err              error
}

func newHandle(executor string, argv []string, p *client.Process) *handle {
	h := &handle{executor: executor, argv: argv, p: p, started: time.Now(), changed: make(chan struct{})}
	go h.consume()
	return h
}

// consume reads the process's events until it closes.
func (h *handle) consume() {
	for ev := range h.p.Events() {
		h.mu.Lock()
		switch ev.Kind {
		case client.EventOutput:
			h.buf = append(h.buf, ev.Data...)
			if over := len(h.buf) - HandleOutput; over > 0 {
				h.buf = append(h.buf[:0:0], h.buf[over:]...)
				h.base += int64(over)
			}
		case client.EventExited:
			h.exited = true
			h.exitCode, h.signal = ev.ExitCode, ev.Signal
		}
		h.notifyLocked()
		h.mu.Unlock()
	}
	h.mu.Lock()
	h.done = true
	h.err = h.p.Err()
	h.notifyLocked()
	h.mu.Unlock()
}

func (h *handle) notifyLocked() {
	close(h.changed)
	h.changed = make(chan struct{})
}

func (h *handle) finished() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.done
}

type startArgs struct {
	commandArgs
	Tty bool `json:"tty,omitempty" jsonschema:"run on a pseudo-terminal (for programs that want one); stdout and stderr then arrive together"`
}

type startResult struct {
	Handle   string `json:"handle" jsonschema:"names the process in read, write_stdin, signal and terminate"`
	Pid      int    `json:"pid,omitempty" jsonschema:"the process id on the executor"`
	Executor string `json:"executor"`
	Sandbox  string `json:"sandbox"`
}

func (s *Server) start(ctx context.Context, req *mcp.CallToolRequest, in startArgs) (*mcp.CallToolResult, startResult, error) {
	argv, err := in.argv()
	if err != nil {
		note(ctx, in.Executor)
		return nil, startResult{}, err
	}
	sess, err := s.session(req.Session)
	if err != nil {
		return nil, startResult{}, err
	}
	t, err := s.reach(ctx, in.Executor)
	if err != nil {
		note(ctx, t.id, zap.Strings("argv", argv))
		return nil, startResult{}, err
	}
	cwd, err := resolvePath(t.workspace, in.Cwd)
	if err != nil {
		return nil, startResult{}, err
	}
	pol, mode, err := s.commandPolicy(in.Sandbox, in.Network, cwd, t.workspace)
	if err != nil {
		note(ctx, t.id, zap.Strings("argv", argv))
		return nil, startResult{}, err
	}
	env := in.Env
	if env == nil {
		env = map[string]string{}
	}
	// Not cut short by a cancellation: a start the executor acted on
	// must come back with its process, to be terminated below.
	sctx, cancelStart := context.WithTimeout(context.WithoutCancel(ctx), client.StartTimeout)
	defer cancelStart()
	p, err := t.env.Start(sctx, protocol.ExecParams{Argv: argv, Cwd: cwd, Env: env, EnvPolicy: &protocol.EnvPolicy{Inherit: protocol.InheritCore}, Sandbox: pol, Tty: in.Tty, PipeStdin: !in.Tty})
	if err != nil {
		err = fmt.Errorf("could not start %q on %s: %w", argv[0], t.id, err)
		note(ctx, t.id, zap.Strings("argv", argv), zap.String("sandbox", mode))
		return nil, startResult{}, err
	}
	h := newHandle(t.id, argv, p)
	if err := ctx.Err(); err != nil {
		tctx, cancel := context.WithTimeout(context.Background(), terminateTimeout)
		p.Terminate(tctx)
		cancel()
		return nil, startResult{}, err
	}
	if err := sess.add(h); err != nil {
		tctx, cancel := context.WithTimeout(context.Background(), terminateTimeout)
		p.Terminate(tctx)
		cancel()
		note(ctx, t.id, zap.Strings("argv", argv))
		return nil, startResult{}, err
	}
	note(ctx, t.id, zap.String("handle", h.id), zap.Strings("argv", argv), zap.String("sandbox", mode), zap.Int("pid", p.Pid()))
	out := startResult{Handle: h.id, Pid: p.Pid(), Executor: t.id, Sandbox: mode}
	return textResult(fmt.Sprintf("started %s as handle %s (pid %d) on %s, sandbox %s; read its output with read", argv[0], h.id, p.Pid(), t.id, mode)), out, nil
}

type readArgs struct {
	Handle   string `json:"handle" jsonschema:"the handle start returned"`
	Cursor   int64  `json:"cursor,omitempty" jsonschema:"where to read from: the cursor the last read returned; 0 for the start of the output"`
	WaitMs   int64  `json:"wait_ms,omitempty" jsonschema:"when nothing is new, wait up to this many milliseconds for output or the exit (at most 30000); default 0"`
	MaxBytes int    `json:"max_bytes,omitempty" jsonschema:"most bytes to return (default 262144, at most 524288)"`
}

type readResult struct {
	Output       string `json:"output" jsonschema:"stdout and stderr together, in the order they arrived, from the cursor on"`
	Cursor       int64  `json:"cursor" jsonschema:"pass this to the next read"`
	DroppedBytes int64  `json:"dropped_bytes,omitempty" jsonschema:"bytes between the cursor asked for and the oldest kept (only the last 1 MiB of output is kept)"`
	More         bool   `json:"more,omitempty" jsonschema:"more output is already waiting past max_bytes"`
	Running      bool   `json:"running" jsonschema:"the process has not exited"`
	ExitCode     *int   `json:"exit_code,omitempty" jsonschema:"the exit code, once it has exited"`
	Signal       int    `json:"signal,omitempty"`
	Error        string `json:"error,omitempty" jsonschema:"why the process was lost, if it was"`
}

func (s *Server) read(ctx context.Context, req *mcp.CallToolRequest, in readArgs) (*mcp.CallToolResult, readResult, error) {
	h, err := s.handle(req, in.Handle)
	if err != nil {
		return nil, readResult{}, err
	}
	wait := time.Duration(in.WaitMs) * time.Millisecond
	if in.WaitMs < 0 || wait > MaxWait {
		return nil, readResult{}, errorf(ErrInvalidArgument, "wait_ms %d: want 0 to %d", in.WaitMs, MaxWait.Milliseconds())
	}
	limit := DefaultReadBytes
	if in.MaxBytes < 0 || in.MaxBytes > MaxReadBytes {
		return nil, readResult{}, errorf(ErrInvalidArgument, "max_bytes %d: want 1 to %d", in.MaxBytes, MaxReadBytes)
	} else if in.MaxBytes > 0 {
		limit = in.MaxBytes
	}
	if in.Cursor < 0 {
		return nil, readResult{}, errorf(ErrInvalidArgument, "cursor %d is negative", in.Cursor)
	}
	var timer <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timer = t.C
	}
	for {
		h.mu.Lock()
		total := h.base + int64(len(h.buf))
		if in.Cursor > total {
			h.mu.Unlock()
			return nil, readResult{}, errorf(ErrInvalidArgument, "cursor %d is past the output's end (%d)", in.Cursor, total)
		}
		if in.Cursor < total || h.exited || h.done || timer == nil {
			out := h.readLocked(in.Cursor, limit)
			h.mu.Unlock()
			return textResult(renderRead(h.id, out)), out, nil
		}
		changed := h.changed
		h.mu.Unlock()
		select {
		case <-changed:
		case <-timer:
			timer = nil
		case <-ctx.Done():
			return nil, readResult{}, ctx.Err()
		}
	}
}

// readLocked returns up to limit bytes from cursor.
func (h *handle) readLocked(cursor int64, limit int) readResult {
	var out readResult
	if cursor < h.base {
		out.DroppedBytes = h.base - cursor
		cursor = h.base
	}
	data := h.buf[cursor-h.base:]
	if len(data) > limit {
		data = trimRunes(data[:limit])
		out.More = true
	}
	out.Output = validText(string(data))
	out.Cursor = cursor + int64(len(data))
	out.Running = !h.exited && !h.done
	if h.exited {
		code := int(h.exitCode)
		out.ExitCode, out.Signal = &code, int(h.signal)
	}
	if h.err != nil {
		out.Error = h.err.Error()
	}
	return out
}

func renderRead(id string, r readResult) string {
	var b strings.Builder
	if r.DroppedBytes > 0 {
		fmt.Fprintf(&b, "[%d bytes of older output were dropped]\n", r.DroppedBytes)
	}
	b.WriteString(r.Output)
	if r.Output != "" && !strings.HasSuffix(r.Output, "\n") {
		b.WriteByte('\n')
	}
	switch {
	case r.Error != "":
		fmt.Fprintf(&b, "[%s lost: %s]\n", id, r.Error)
	case r.Running:
		fmt.Fprintf(&b, "[%s running; next cursor %d]\n", id, r.Cursor)
	case r.ExitCode != nil:
		fmt.Fprintf(&b, "[%s exited with code %d", id, *r.ExitCode)
		if r.Signal != 0 {
			fmt.Fprintf(&b, ", signal %d", r.Signal)
		}
		fmt.Fprintf(&b, "; next cursor %d]\n", r.Cursor)
	}
	if r.More {
		b.WriteString("[more output waiting: read again from the cursor]\n")
	}
	return b.String()
}

// handle finds a handle of the caller's session.
func (s *Server) handle(req *mcp.CallToolRequest, id string) (*handle, error) {
	sess, err := s.session(req.Session)
	if err != nil {
		return nil, err
	}
	return sess.get(id)
}

type writeArgs struct {
	Handle string `json:"handle"`
	Data   string `json:"data,omitempty" jsonschema:"text to write to the process's stdin (include the newline a line-reading program waits for)"`
	Close  bool   `json:"close,omitempty" jsonschema:"close stdin after the data (end of input)"`
}

type writeResult struct {
	Written int  `json:"written"`
	Closed  bool `json:"closed"`
}

func (s *Server) writeStdin(ctx context.Context, req *mcp.CallToolRequest, in writeArgs) (*mcp.CallToolResult, writeResult, error) {
	h, err := s.handle(req, in.Handle)
	if err != nil {
		return nil, writeResult{}, err
	}
	if len(in.Data) > maxStdinBytes {
		return nil, writeResult{}, errorf(ErrInvalidArgument, "data is %d bytes, at most %d per call", len(in.Data), maxStdinBytes)
	}
	var out writeResult
	if in.Data != "" {
		st, err := h.p.Write(ctx, []byte(in.Data))
		if err != nil {
			return nil, writeResult{}, fmt.Errorf("writing to %s: %w", h.id, err)
		}
		if st == protocol.WriteStdinClosed {
			return nil, writeResult{}, errorf(ErrInvalidArgument, "%s's stdin is closed", h.id)
		}
		out.Written = len(in.Data)
	}
	if in.Close {
		if err := h.p.CloseStdin(ctx); err != nil {
			return nil, writeResult{}, fmt.Errorf("closing %s's stdin: %w", h.id, err)
		}
		out.Closed = true
	}
	note(ctx, h.executor, zap.String("handle", h.id), zap.Int("bytes", out.Written), zap.Bool("close", out.Closed))
	return textResult(fmt.Sprintf("wrote %d bytes to %s%s", out.Written, h.id, map[bool]string{true: " and closed its stdin"}[out.Closed])), out, nil
}

type signalArgs struct {
	Handle string `json:"handle"`
	Signal string `json:"signal" jsonschema:"INT (as Ctrl-C), TERM, HUP, QUIT or KILL; sent to the process's group"`
}

var signalNames = map[string]protocol.Signal{
	"INT": protocol.SignalInterrupt, "TERM": protocol.SignalTerminate, "HUP": protocol.SignalHangup,
	"QUIT": protocol.SignalQuit, "KILL": protocol.SignalKill,
}

func (s *Server) signal(ctx context.Context, req *mcp.CallToolRequest, in signalArgs) (*mcp.CallToolResult, struct{}, error) {
	h, err := s.handle(req, in.Handle)
	if err != nil {
		return nil, struct{}{}, err
	}
	sig, ok := signalNames[strings.TrimPrefix(strings.ToUpper(in.Signal), "SIG")]
	if !ok {
		return nil, struct{}{}, errorf(ErrInvalidArgument, "signal %q: want INT, TERM, HUP, QUIT or KILL", in.Signal)
	}
	if err := h.p.Signal(ctx, sig); err != nil {
		return nil, struct{}{}, fmt.Errorf("signalling %s: %w", h.id, err)
	}
	note(ctx, h.executor, zap.String("handle", h.id), zap.String("signal", string(sig)))
	return textResult(fmt.Sprintf("sent %s to %s", in.Signal, h.id)), struct{}{}, nil
}

type handleArgs struct {
	Handle string `json:"handle"`
}

type terminateResult struct {
	WasRunning bool `json:"was_running"`
}

func (s *Server) terminate(ctx context.Context, req *mcp.CallToolRequest, in handleArgs) (*mcp.CallToolResult, terminateResult, error) {
	h, err := s.handle(req, in.Handle)
	if err != nil {
		return nil, terminateResult{}, err
	}
	running, err := h.p.Terminate(ctx)
	if err != nil && !errors.Is(err, client.ErrClosed) {
		return nil, terminateResult{}, fmt.Errorf("terminating %s: %w", h.id, err)
	}
	note(ctx, h.executor, zap.String("handle", h.id), zap.Bool("wasRunning", running))
	msg := h.id + " had already exited"
	if running {
		msg = "terminated " + h.id + " (TERM, then KILL after the executor's grace)"
	}
	return textResult(msg), terminateResult{WasRunning: running}, nil
}

type procInfo struct {
	Handle    string   `json:"handle"`
	Argv      []string `json:"argv"`
	Executor  string   `json:"executor"`
	Pid       int      `json:"pid,omitempty"`
	Running   bool     `json:"running"`
	ExitCode  *int     `json:"exit_code,omitempty"`
	StartedAt string   `json:"started_at"`
}

type listResult struct {
	Processes []procInfo `json:"processes"`
}

func (s *Server) list(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, listResult, error) {
	sess, err := s.session(req.Session)
	if err != nil {
		return nil, listResult{}, err
	}
	out := listResult{Processes: []procInfo{}}
	var b strings.Builder
	for _, h := range sess.all() {
		h.mu.Lock()
		pi := procInfo{Handle: h.id, Argv: h.argv, Executor: h.executor, Pid: h.p.Pid(), Running: !h.exited && !h.done, StartedAt: h.started.UTC().Format(time.RFC3339)}
		if h.exited {
			code := int(h.exitCode)
			pi.ExitCode = &code
		}
		h.mu.Unlock()
		out.Processes = append(out.Processes, pi)
		state := "running"
		if pi.ExitCode != nil {
			state = fmt.Sprintf("exited %d", *pi.ExitCode)
		} else if !pi.Running {
			state = "lost"
		}
		fmt.Fprintf(&b, "%s  %s  %s  %s\n", pi.Handle, pi.Executor, state, strings.Join(pi.Argv, " "))
	}
	if len(out.Processes) == 0 {
		b.WriteString("no processes in this session\n")
	}
	return textResult(b.String()), out, nil
}

func textResult(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}
