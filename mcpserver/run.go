package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"

	"github.com/outpost-exec/outpost/client"
	"github.com/outpost-exec/outpost/protocol"
)

type runArgs struct {
	commandArgs
	Stdin          string `json:"stdin,omitempty" jsonschema:"text written to the command's stdin, which is then closed; default none"`
	TimeoutMs      int64  `json:"timeout_ms,omitempty" jsonschema:"stop the command (TERM, then KILL) after this many milliseconds; default 60000"`
	MaxOutputBytes int    `json:"max_output_bytes,omitempty" jsonschema:"bytes kept of each of stdout and stderr: the first and the last halves, with the total counted; default 32768, at most 262144"`
}

// streamOut is one stream of a finished command.
type streamOut struct {
	Text       string `json:"text" jsonschema:"the output kept; when truncated, its head and tail around a marker"`
	TotalBytes int64  `json:"total_bytes" jsonschema:"bytes the command wrote to this stream"`
	Truncated  bool   `json:"truncated" jsonschema:"whether bytes between the head and the tail were left out"`
}

type runResult struct {
	ExitCode      int       `json:"exit_code" jsonschema:"the exit code; 124 after a timeout, 128+n after signal n"`
	Signal        int       `json:"signal,omitempty" jsonschema:"the signal that killed the command, if one did"`
	TimedOut      bool      `json:"timed_out" jsonschema:"the command ran past timeout_ms and was stopped"`
	Cancelled     bool      `json:"cancelled,omitempty" jsonschema:"the call was cancelled and the command terminated"`
	SandboxDenied bool      `json:"sandbox_denied" jsonschema:"the command failed and the sandbox likely denied it something"`
	Limit         string    `json:"limit,omitempty" jsonschema:"the executor's resource limit the command ran into (memory, pids)"`
	Stdout        streamOut `json:"stdout"`
	Stderr        streamOut `json:"stderr"`
	DurationMs    int64     `json:"duration_ms"`
	Executor      string    `json:"executor"`
	Sandbox       string    `json:"sandbox" jsonschema:"the sandbox mode the command ran in"`
}

func toStream(c client.CappedOutput) streamOut {
	return streamOut{Text: validText(c.String()), TotalBytes: c.Total, Truncated: c.Truncated()}
}

// trimRunes drops a rune cut short at the end of b (a cap fell in its
// middle).
func trimRunes(b []byte) []byte {
	for i := 1; i <= utf8.UTFMax && i <= len(b); i++ {
		if utf8.RuneStart(b[len(b)-i]) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return b[:len(b)-i]
			}
			break
		}
	}
	return b
}

// validText makes output safe for JSON text: invalid UTF-8 becomes U+FFFD.
func validText(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

func (s *Server) run(ctx context.Context, req *mcp.CallToolRequest, in runArgs) (*mcp.CallToolResult, runResult, error) {
	argv, err := in.argv()
	if err != nil {
		note(ctx, in.Executor)
		return nil, runResult{}, err
	}
	timeout := DefaultTimeout
	if in.TimeoutMs < 0 || time.Duration(in.TimeoutMs)*time.Millisecond > s.cfg.MaxTimeout {
		err := errorf(ErrInvalidArgument, "timeout_ms %d: want 1 to %d", in.TimeoutMs, s.cfg.MaxTimeout.Milliseconds())
		note(ctx, in.Executor, zap.Strings("argv", argv))
		return nil, runResult{}, err
	} else if in.TimeoutMs > 0 {
		timeout = time.Duration(in.TimeoutMs) * time.Millisecond
	}
	outCap := DefaultOutputBytes
	if in.MaxOutputBytes < 0 || in.MaxOutputBytes > MaxOutputBytes {
		err := errorf(ErrInvalidArgument, "max_output_bytes %d: want 1 to %d", in.MaxOutputBytes, MaxOutputBytes)
		note(ctx, in.Executor, zap.Strings("argv", argv))
		return nil, runResult{}, err
	} else if in.MaxOutputBytes > 0 {
		outCap = in.MaxOutputBytes
	}
	if len(in.Stdin) > maxStdinBytes {
		err := errorf(ErrInvalidArgument, "stdin is %d bytes, at most %d", len(in.Stdin), maxStdinBytes)
		note(ctx, in.Executor, zap.Strings("argv", argv))
		return nil, runResult{}, err
	}
	t, err := s.reach(ctx, in.Executor)
	if err != nil {
		note(ctx, t.id, zap.Strings("argv", argv))
		return nil, runResult{}, err
	}
	cwd, err := resolvePath(t.workspace, in.Cwd)
	if err != nil {
		return nil, runResult{}, err
	}
	pol, mode, err := s.commandPolicy(in.Sandbox, in.Network, cwd, t.workspace)
	if err != nil {
		note(ctx, t.id, zap.Strings("argv", argv))
		return nil, runResult{}, err
	}
	er := client.ExecRequest{Argv: argv, Cwd: cwd, Env: in.Env, InheritEnv: true, Sandbox: pol, Timeout: timeout, OutputCap: outCap}
	if in.Stdin != "" {
		er.Stdin = []byte(in.Stdin)
	}
	if tok := req.Params.GetProgressToken(); tok != nil && req.Session != nil {
		er.OnOutput = progressSender(ctx, req.Session, tok)
	}
	res, err := client.Exec(ctx, t.env, er)
	cancelled := ctx.Err() != nil
	var te *client.TimeoutError
	var se *client.SignalError
	var de *client.SandboxDeniedError
	switch {
	case err == nil, errors.As(err, &te), errors.As(err, &se), errors.As(err, &de):
	default:
		var spawn *client.SpawnError
		if errors.As(err, &spawn) {
			err = fmt.Errorf("could not start %q on %s: %w", argv[0], t.id, err)
		} else {
			err = fmt.Errorf("%w: lost executor %s while running %q: %w", ErrUnavailable, t.id, argv[0], err)
		}
		note(ctx, t.id, zap.Strings("argv", argv), zap.String("sandbox", mode))
		return nil, runResult{}, err
	}
	out := runResult{
		ExitCode: res.ExitCode, Signal: res.Signal, TimedOut: res.TimedOut && !cancelled, Cancelled: cancelled,
		SandboxDenied: res.SandboxDenied, Limit: res.Limit,
		Stdout: toStream(res.Stdout), Stderr: toStream(res.Stderr),
		DurationMs: res.Duration.Milliseconds(), Executor: t.id, Sandbox: mode,
	}
	note(ctx, t.id, zap.Strings("argv", argv), zap.String("sandbox", mode), zap.Int("exit", res.ExitCode), zap.Int("signal", res.Signal), zap.Bool("timedOut", out.TimedOut), zap.Bool("cancelled", cancelled), zap.Duration("duration", res.Duration))
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: renderRun(out)}}}, out, nil
}

// renderRun is the text a model reads: the outcome first, then each
// stream.
func renderRun(r runResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "exit code %d", r.ExitCode)
	switch {
	case r.Cancelled:
		b.WriteString(" (cancelled)")
	case r.TimedOut:
		b.WriteString(" (timed out)")
	case r.Signal != 0:
		fmt.Fprintf(&b, " (killed by signal %d)", r.Signal)
	}
	if r.SandboxDenied {
		b.WriteString("; the sandbox likely denied the command something")
	}
	if r.Limit != "" {
		fmt.Fprintf(&b, "; it ran into the executor's %s limit", r.Limit)
	}
	fmt.Fprintf(&b, "; %d ms on %s, sandbox %s\n", r.DurationMs, r.Executor, r.Sandbox)
	for _, st := range []struct {
		name string
		s    streamOut
	}{{"stdout", r.Stdout}, {"stderr", r.Stderr}} {
		if st.s.TotalBytes == 0 {
			continue
		}
		fmt.Fprintf(&b, "--- %s (%d bytes", st.name, st.s.TotalBytes)
		if st.s.Truncated {
			b.WriteString(", truncated")
		}
		b.WriteString(") ---\n")
		b.WriteString(st.s.Text)
		if !strings.HasSuffix(st.s.Text, "\n") {
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// progressSender sends each chunk of output as a progress notification:
// progress is the bytes so far, the message the chunk's text (its first
// progressMessageBytes). Sending waits for the client's transport, so a
// client that does not read slows the command's output (which the
// executor holds back) rather than filling memory here.
func progressSender(ctx context.Context, ss *mcp.ServerSession, tok any) func(protocol.Stream, []byte) {
	var total int64
	return func(stream protocol.Stream, data []byte) {
		total += int64(len(data))
		msg := data
		if len(msg) > progressMessageBytes {
			msg = trimRunes(msg[:progressMessageBytes])
		}
		ss.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: float64(total), Message: validText(string(msg))})
	}
}
