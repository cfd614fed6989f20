package client

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/transport"
)

// EventBuffer bounds the pushed events buffered per process. When a
// process's buffer is full the connection stops reading, which makes the
// executor slow that process down (backpressure), not drop its output.
const EventBuffer = 1024

// Session is an initialized connection to an exec-server.
type Session struct {
	rpc *RPC
	id  string

	mu     sync.Mutex
	procs  map[string]*Process
	nextID atomic.Int64
}

// Connect dials url, sends initialize (resuming resumeID if non-empty)
// and initialized.
func Connect(ctx context.Context, url string, opts DialOptions) (*Session, error) {
	s := &Session{procs: make(map[string]*Process)}
	rpc, err := DialWS(ctx, url, opts, s.route)
	if err != nil {
		return nil, err
	}
	s.rpc = rpc
	var res protocol.InitializeResult
	if err := rpc.Call(ctx, protocol.MethodInitialize, protocol.InitializeParams{ClientName: "outpost"}, &res); err != nil {
		rpc.Close()
		return nil, fmt.Errorf("initialize: %w", err)
	}
	s.id = res.SessionID
	if err := rpc.Notify(ctx, protocol.MethodInitialized, struct{}{}); err != nil {
		rpc.Close()
		return nil, fmt.Errorf("initialized: %w", err)
	}
	return s, nil
}

// ID is the executor's session id.
func (s *Session) ID() string { return s.id }

// RPC exposes the underlying connection.
func (s *Session) RPC() *RPC { return s.rpc }

// Close closes the connection; the executor detaches the session.
func (s *Session) Close() error { return s.rpc.Close() }

func (s *Session) route(method string, params transport.Params) {
	var ev Event
	var pid string
	switch method {
	case protocol.MethodProcessOutput:
		var n protocol.OutputNotification
		if params.Decode(&n) != nil {
			return
		}
		pid, ev = n.ProcessID, Event{Kind: "output", Seq: n.Seq, Stream: n.Stream, Data: n.Chunk}
	case protocol.MethodProcessExited:
		var n protocol.ExitedNotification
		if params.Decode(&n) != nil {
			return
		}
		pid, ev = n.ProcessID, Event{Kind: "exited", Seq: n.Seq, ExitCode: n.ExitCode}
	case protocol.MethodProcessClosed:
		var n protocol.ClosedNotification
		if params.Decode(&n) != nil {
			return
		}
		pid, ev = n.ProcessID, Event{Kind: "closed", Seq: n.Seq}
	default:
		return
	}
	s.mu.Lock()
	p := s.procs[pid]
	s.mu.Unlock()
	if p == nil {
		return
	}
	select {
	case p.events <- ev:
	case <-s.rpc.Done():
	}
	if ev.Kind == "closed" {
		s.mu.Lock()
		if s.procs[pid] == p {
			delete(s.procs, pid)
		}
		s.mu.Unlock()
		close(p.events)
	}
}

// Event is a pushed process event.
type Event struct {
	Kind     string // "output", "exited", "closed"
	Seq      uint64
	Stream   protocol.Stream
	Data     []byte
	ExitCode int32
}

// Process is a remote process.
type Process struct {
	s      *Session
	id     string
	events chan Event
	writes atomic.Int64
}

// Start starts a process. An empty ProcessID is filled in.
func (s *Session) Start(ctx context.Context, params protocol.ExecParams) (*Process, error) {
	if params.ProcessID == "" {
		params.ProcessID = "p" + strconv.FormatInt(s.nextID.Add(1), 10)
	}
	if params.Env == nil {
		params.Env = map[string]string{}
	}
	p := &Process{s: s, id: params.ProcessID, events: make(chan Event, EventBuffer)}
	// Register before starting so no early notification is missed.
	s.mu.Lock()
	if s.procs[p.id] != nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("process %s is already running in this session", p.id)
	}
	s.procs[p.id] = p
	s.mu.Unlock()
	var res protocol.StartResult
	if err := s.rpc.Call(ctx, protocol.MethodProcessStart, params, &res); err != nil {
		s.mu.Lock()
		if s.procs[p.id] == p {
			delete(s.procs, p.id)
		}
		s.mu.Unlock()
		return nil, err
	}
	return p, nil
}

// ID is the process id.
func (p *Process) ID() string { return p.id }

// Events delivers the process's pushed events in seq order; it is closed
// after the closed event.
func (p *Process) Events() <-chan Event { return p.events }

// Result is a finished process's outcome.
type Result struct {
	ExitCode int32
	Stdout   []byte
	Stderr   []byte // empty for a tty (all output is in Stdout)
}

// Wait consumes the events until the process closes.
func (p *Process) Wait(ctx context.Context) (Result, error) {
	var out, errb bytes.Buffer
	var res Result
	for {
		select {
		case ev, ok := <-p.events:
			if !ok {
				res.Stdout, res.Stderr = out.Bytes(), errb.Bytes()
				return res, nil
			}
			switch ev.Kind {
			case "output":
				if ev.Stream == protocol.StreamStderr {
					errb.Write(ev.Data)
				} else {
					out.Write(ev.Data)
				}
			case "exited":
				res.ExitCode = ev.ExitCode
			}
		case <-ctx.Done():
			return res, ctx.Err()
		case <-p.s.rpc.Done():
			return res, p.s.rpc.Err()
		}
	}
}

// Write writes data to the process's stdin; closeStdin closes it after.
func (p *Process) Write(ctx context.Context, data []byte, closeStdin bool) (protocol.WriteStatus, error) {
	id := p.id + "-w" + strconv.FormatInt(p.writes.Add(1), 10)
	var res protocol.WriteResult
	err := p.s.rpc.Call(ctx, protocol.MethodProcessWrite, protocol.WriteParams{ProcessID: p.id, Chunk: data, WriteID: &id, CloseStdin: closeStdin}, &res)
	return res.Status, err
}

// Signal sends a signal to the process group.
func (p *Process) Signal(ctx context.Context, sig protocol.Signal) error {
	return p.s.rpc.Call(ctx, protocol.MethodProcessSignal, protocol.SignalParams{ProcessID: p.id, Signal: string(sig)}, nil)
}

// Terminate stops the process (TERM, then KILL after a grace).
func (p *Process) Terminate(ctx context.Context) (bool, error) {
	var res protocol.TerminateResult
	err := p.s.rpc.Call(ctx, protocol.MethodProcessTerminate, protocol.TerminateParams{ProcessID: p.id}, &res)
	return res.Running, err
}

// Resize resizes the process's PTY.
func (p *Process) Resize(ctx context.Context, rows, cols uint16) error {
	return p.s.rpc.Call(ctx, protocol.MethodProcessResize, protocol.ResizeParams{ProcessID: p.id, Rows: rows, Cols: cols}, nil)
}

// Read long-polls the retained output.
func (p *Process) Read(ctx context.Context, afterSeq uint64, maxBytes *uint64, waitMs uint64) (protocol.ReadResult, error) {
	var res protocol.ReadResult
	err := p.s.rpc.Call(ctx, protocol.MethodProcessRead, protocol.ReadParams{ProcessID: p.id, AfterSeq: &afterSeq, MaxBytes: maxBytes, WaitMs: &waitMs}, &res)
	return res, err
}
