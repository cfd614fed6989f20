package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os/exec"
	"strings"
	"time"

	"github.com/outpost-exec/outpost/protocol"
)

// Exec defaults.
const (
	DefaultExecTimeout = 10 * time.Second
	DefaultOutputCap   = 1 << 20
	DefaultDrain       = 2 * time.Second
	// StartTimeout bounds Exec's process/start, which its ctx does not
	// cut short.
	StartTimeout = 30 * time.Second
	// TimeoutExitCode is the exit code of a command stopped by its timeout.
	TimeoutExitCode = 124
)

// ExecRequest is a command to run to completion.
type ExecRequest struct {
	Argv []string
	Cwd  string // a path or file: URI on the executor; "" = its default
	// Env is the exact environment; with InheritEnv, an overlay on the
	// executor's core variables.
	Env        map[string]string
	InheritEnv bool
	// Sandbox is the sandbox policy (see the README), nil for none.
	Sandbox any
	// Stdin, when non-nil, is written to the command's stdin, then closed.
	Stdin []byte
	Tty   bool
	// Timeout stops the command (TERM to its group, KILL after the
	// executor's grace); 0 means DefaultExecTimeout, negative means none.
	// A cancelled ctx behaves like a timeout.
	Timeout time.Duration
	// OutputCap bounds what is kept of each stream (default 1 MiB): the
	// first and the last halves, with the total count.
	OutputCap int
	// Drain is how long to wait after exit for the streams to close
	// (default 2 s).
	Drain time.Duration
	// OnOutput, when set, is called with each chunk of output as it
	// arrives, before it is capped (an MCP server's progress
	// notifications). It runs on Exec's goroutine: a slow OnOutput slows
	// the reading of the command's output, never loses it.
	OnOutput func(stream protocol.Stream, data []byte)
}

// CappedOutput is a stream kept within a cap: its head and tail and the
// total number of bytes it carried.
type CappedOutput struct {
	Head, Tail []byte
	Total      int64 // bytes
	Lines      int64 // newlines in the whole stream
}

// Truncated reports whether bytes were left out between Head and Tail.
func (c CappedOutput) Truncated() bool { return c.Total > int64(len(c.Head)+len(c.Tail)) }

// String renders the output with a marker where bytes were left out.
func (c CappedOutput) String() string {
	if !c.Truncated() {
		return string(c.Head) + string(c.Tail)
	}
	omitted := c.Total - int64(len(c.Head)+len(c.Tail))
	return fmt.Sprintf("%s\n[... %d bytes omitted of %d ...]\n%s", c.Head, omitted, c.Total, c.Tail)
}

// capBuffer keeps the first and last half of a stream.
type capBuffer struct {
	half  int
	head  []byte
	tail  []byte // ring of at most half bytes, oldest first after tailOrder
	pos   int
	full  bool
	total int64
	lines int64
}

func newCapBuffer(limit int) *capBuffer {
	half := max(limit/2, 1)
	return &capBuffer{half: half}
}

func (b *capBuffer) write(p []byte) {
	b.total += int64(len(p))
	b.lines += int64(bytes.Count(p, []byte{'\n'}))
	if n := min(b.half-len(b.head), len(p)); n > 0 {
		b.head = append(b.head, p[:n]...)
		p = p[n:]
	}
	for len(p) > 0 {
		if !b.full {
			n := min(b.half-len(b.tail), len(p))
			b.tail = append(b.tail, p[:n]...)
			p = p[n:]
			if len(b.tail) == b.half {
				b.full, b.pos = true, 0
			}
			continue
		}
		n := copy(b.tail[b.pos:], p)
		p = p[n:]
		b.pos = (b.pos + n) % b.half
	}
}

func (b *capBuffer) result() CappedOutput {
	tail := b.tail
	if b.full {
		tail = append(append([]byte(nil), b.tail[b.pos:]...), b.tail[:b.pos]...)
	}
	return CappedOutput{Head: append([]byte(nil), b.head...), Tail: append([]byte(nil), tail...), Total: b.total, Lines: b.lines}
}

// ExecResult is what a finished command produced.
type ExecResult struct {
	ExitCode      int // 124 after a timeout; 128+n after signal n
	Signal        int // the signal that killed it, 0 if none
	TimedOut      bool
	SandboxDenied bool
	// Limit is the executor's resource limit the command ran into
	// (protocol.LimitMemory, LimitPids; "" if none).
	Limit  string
	Stdout CappedOutput
	Stderr CappedOutput
	// Output is stdout and stderr together, in arrival order (capped
	// like each stream).
	Output   CappedOutput
	Duration time.Duration
	// HeldBy is set when the streams were still open Drain after the
	// exit: the process group that kept them (it is then terminated).
	HeldBy      string
	SandboxType string
}

// Errors of Exec, usable with errors.As. A command that exits — with any
// code — is a result, not an error.
type (
	// TimeoutError: the command ran past its timeout (or ctx ended).
	TimeoutError struct{ Timeout time.Duration }
	// SignalError: a signal killed the command.
	SignalError struct{ Signal int }
	// SandboxDeniedError: the command failed and the sandbox likely denied
	// it; the result keeps all its output.
	SandboxDeniedError struct{ ExitCode int }
	// SpawnError: the executor could not start the command. Err is the
	// executor's *protocol.Error. As with os/exec, errors.Is matches
	// exec.ErrNotFound when the program was not found (by name in the
	// child's PATH, or at the path given), fs.ErrNotExist when the
	// program or the working directory does not exist, and
	// fs.ErrPermission when it may not be run (not executable).
	SpawnError struct{ Err error }
	// TransportError: the connection to the executor failed.
	TransportError struct{ Err error }
)

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("command timed out after %s", e.Timeout)
}
func (e *SignalError) Error() string { return fmt.Sprintf("command killed by signal %d", e.Signal) }
func (e *SandboxDeniedError) Error() string {
	return fmt.Sprintf("command failed (exit %d), likely denied by the sandbox", e.ExitCode)
}
func (e *SpawnError) Error() string { return "failed to start command: " + e.Err.Error() }
func (e *SpawnError) Unwrap() error { return e.Err }

// Is decides by the error's kind, never its message (see SpawnError).
func (e *SpawnError) Is(target error) bool {
	switch target {
	case exec.ErrNotFound:
		return programNotFound(e.Err)
	case fs.ErrNotExist:
		return protocol.KindOf(e.Err) == protocol.KindNotFound
	case fs.ErrPermission:
		return protocol.KindOf(e.Err) == protocol.KindPermission
	}
	return false
}

// programNotFound reports whether a refused start means the program is
// missing. not_found also covers the working directory: the executor
// names it (param "cwd") when the spawn finds it missing, and refuses a
// cwd it cannot resolve before spawning as invalid params.
func programNotFound(err error) bool {
	var pe *protocol.Error
	return errors.As(err, &pe) && pe.Kind() == protocol.KindNotFound &&
		pe.Param() != protocol.ParamCwd && pe.Code != protocol.CodeInvalidParams
}
func (e *TransportError) Error() string { return "executor connection failed: " + e.Err.Error() }
func (e *TransportError) Unwrap() error { return e.Err }

// Exec runs a command to completion with a timeout, capped output and a
// bounded drain, and classifies the outcome.
func Exec(ctx context.Context, env Environment, req ExecRequest) (ExecResult, error) {
	timeout := req.Timeout
	if timeout == 0 {
		timeout = DefaultExecTimeout
	}
	limit := req.OutputCap
	if limit <= 0 {
		limit = DefaultOutputCap
	}
	drain := req.Drain
	if drain <= 0 {
		drain = DefaultDrain
	}
	params := protocol.ExecParams{Argv: req.Argv, Cwd: req.Cwd, Env: req.Env, Sandbox: req.Sandbox, Tty: req.Tty, PipeStdin: req.Stdin != nil}
	if params.Env == nil {
		params.Env = map[string]string{}
	}
	if req.InheritEnv {
		params.EnvPolicy = &protocol.EnvPolicy{Inherit: protocol.InheritCore}
	}
	if err := ctx.Err(); err != nil {
		return ExecResult{}, &TimeoutError{Timeout: timeout}
	}
	start := time.Now()
	// The start itself is not cut short by ctx: a process/start the
	// executor has acted on, whose answer is lost to a cancellation, would
	// leave a command running that no one can stop. A ctx that ends
	// during the start terminates the command just after it, below.
	sctx, cancelStart := context.WithTimeout(context.WithoutCancel(ctx), StartTimeout)
	p, err := env.Start(sctx, params)
	cancelStart()
	if err != nil {
		return ExecResult{}, classifyStartError(err)
	}
	if req.Stdin != nil {
		go func() {
			if len(req.Stdin) > 0 {
				p.Write(context.Background(), req.Stdin)
			}
			p.CloseStdin(context.Background())
		}()
	}
	var deadline <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		deadline = t.C
	}
	var drainC <-chan time.Time
	stdout, stderr, all := newCapBuffer(limit), newCapBuffer(limit), newCapBuffer(limit)
	res := ExecResult{}
	exited, timedOut := false, false
	finish := func() ExecResult {
		res.Duration = time.Since(start)
		res.Stdout, res.Stderr, res.Output = stdout.result(), stderr.result(), all.result()
		res.TimedOut = timedOut
		if timedOut {
			res.ExitCode = TimeoutExitCode
		}
		return res
	}
	stop := func() {
		tctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		p.Terminate(tctx)
		cancel()
	}
	for {
		select {
		case ev, ok := <-p.Events():
			if !ok {
				if err := p.Err(); err != nil {
					return finish(), &TransportError{Err: err}
				}
				return classify(finish(), timeout)
			}
			switch ev.Kind {
			case EventOutput:
				if ev.Stream == protocol.StreamStderr {
					stderr.write(ev.Data)
				} else {
					stdout.write(ev.Data)
				}
				all.write(ev.Data)
				if req.OnOutput != nil {
					req.OnOutput(ev.Stream, ev.Data)
				}
			case EventExited:
				exited = true
				res.ExitCode, res.Signal, res.SandboxDenied, res.Limit = int(ev.ExitCode), int(ev.Signal), ev.SandboxDenied, ev.Limit
				t := time.NewTimer(drain)
				defer t.Stop()
				drainC = t.C
			case EventFailed:
				return finish(), &TransportError{Err: ev.Err}
			}
		case <-drainC:
			// Exited, but something it started still holds the output
			// pipes: return what was read, say who holds them, and stop
			// the stragglers.
			res.HeldBy = "an unknown process group"
			if pid := p.Pid(); pid > 0 {
				res.HeldBy = fmt.Sprintf("process group %d", pid)
			}
			kctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			p.Signal(kctx, protocol.SignalKill) // the leader is gone: terminate would be a no-op
			cancel()
			return classify(finish(), timeout)
		case <-deadline:
			if !exited && !timedOut {
				timedOut = true
				stop()
			}
			deadline = nil
		case <-ctx.Done():
			if !exited && !timedOut {
				timedOut = true
				stop()
			}
			ctx = context.Background() // keep draining the events
		}
	}
}

func classify(res ExecResult, timeout time.Duration) (ExecResult, error) {
	switch {
	case res.TimedOut:
		return res, &TimeoutError{Timeout: timeout}
	case res.SandboxDenied:
		return res, &SandboxDeniedError{ExitCode: res.ExitCode}
	case res.Signal != 0:
		return res, &SignalError{Signal: res.Signal}
	}
	return res, nil
}

func classifyStartError(err error) error {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return &SpawnError{Err: err}
	}
	return &TransportError{Err: err}
}

// Format renders a result for a model: exit code, wall time, the total
// output lines when the output was truncated, and the output.
func Format(res ExecResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Exit code: %d\n", res.ExitCode)
	fmt.Fprintf(&b, "Wall time: %.1f seconds\n", res.Duration.Seconds())
	if res.TimedOut {
		b.WriteString("Timed out.\n")
	}
	if res.HeldBy != "" {
		fmt.Fprintf(&b, "Output was still held open by %s after exit; returned what was read.\n", res.HeldBy)
	}
	out := res.Output.String()
	if res.Output.Truncated() {
		fmt.Fprintf(&b, "Total output lines: %d (%d bytes; the middle is omitted)\n", res.Output.Lines, res.Output.Total)
	}
	b.WriteString("Output:\n")
	b.WriteString(out)
	return b.String()
}
