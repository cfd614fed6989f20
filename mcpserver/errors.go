package mcpserver

import (
	"errors"
	"fmt"
)

// The kinds of a refused tool call. A tool's error wraps one of them (or
// an executor's *protocol.Error, or a client transport error), so callers
// decide with errors.Is; the model reads the message.
var (
	// ErrInvalidArgument: an argument is missing, malformed or out of its
	// bounds (both argv and shell, a negative offset, a timeout above the
	// operator's maximum).
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrUnknownExecutor: the executor is not one this server is
	// configured for.
	ErrUnknownExecutor = errors.New("unknown executor")
	// ErrNotAllowed: the operator's policy forbids it — a sandbox mode not
	// allowed, network without --network, a write in read-only mode, a
	// workspace-write cwd outside the workspace.
	ErrNotAllowed = errors.New("not allowed by the server's policy")
	// ErrUnknownHandle: no live or finished process of this session has
	// the handle.
	ErrUnknownHandle = errors.New("unknown handle")
	// ErrTooManyHandles: the session holds MaxHandles handles already.
	ErrTooManyHandles = errors.New("too many handles")
	// ErrEditMismatch: edit_file found old_string a different number of
	// times than expected.
	ErrEditMismatch = errors.New("edit does not match")
	// ErrBusy: the session has MaxConcurrentCalls calls in flight, or the
	// server MaxSessions sessions.
	ErrBusy = errors.New("busy")
	// ErrUnavailable: the executor could not be reached.
	ErrUnavailable = errors.New("executor unavailable")
)

// kindError is an error of a kind with its own message.
type kindError struct {
	kind error
	msg  string
}

func (e *kindError) Error() string { return e.msg }
func (e *kindError) Unwrap() error { return e.kind }

func errorf(kind error, format string, a ...any) error {
	return &kindError{kind: kind, msg: fmt.Sprintf(format, a...)}
}
