// Package protocol is outpost's wire vocabulary: method names, the params,
// results and notifications of every method as Go structs, error codes and
// limits. It does no I/O.
//
// The vocabulary is that of the codex exec-server (JSON-RPC "lite": JSON-RPC
// 2.0 without the "jsonrpc" member), so a codex client can drive an outpost
// executor. Every struct carries both `json` tags (camelCase, identical to
// codex) and `msgpack` tags (the same names), so the native msgpack codec and
// the codex JSON codec share one method table.
//
// # Session lifecycle
//
//	client                                  executor
//	  | -- initialize {clientName, resumeSessionId?} -->|
//	  | <------------------ {sessionId} ----------------|
//	  | -- initialized (notification) ----------------->|
//	  | -- process/start, process/read, ... ----------->|
//	  | <-- process/output, process/exited, process/closed (notifications)
//
// # Sequence numbers
//
// Each process has one sequence counter, starting at 1, shared by its output
// chunks, its exit event and its close event. process/closed is always the
// last event of a process and is sent only after the process has exited and
// every output stream has reached EOF, so output written after exit (by a
// grandchild holding the pipe) is kept and numbered before the close.
//
// # Additions to the codex protocol
//
// Fields and methods that codex does not know are optional and ignored by a
// codex peer:
//   - process/write accepts closeStdin, which closes the child's stdin after
//     the chunk (codex cannot send EOF);
//   - process/resize changes a PTY's window size;
//   - process/signal accepts terminate, hangup, kill, quit, user1 and user2
//     beside codex's interrupt;
//   - process/read reports a gap explicitly when afterSeq is older than what
//     the executor still retains (codex silently skips the lost chunks).
package protocol

import "fmt"

// Version is the protocol version outpost speaks natively.
const Version = 1

// Method names.
const (
	MethodInitialize       = "initialize"
	MethodInitialized      = "initialized" // notification, client -> executor
	MethodProcessStart     = "process/start"
	MethodProcessRead      = "process/read"
	MethodProcessWrite     = "process/write"
	MethodProcessSignal    = "process/signal"
	MethodProcessTerminate = "process/terminate"
	MethodProcessResize    = "process/resize" // outpost addition
	MethodEnvironmentInfo  = "environment/info"

	// MethodProcessEvents opens an executor-initiated stream of one
	// process's events on the native (mux) transport; its params are
	// EventsStreamHeader, and process/output, process/exited and
	// process/closed notifications follow on the same stream.
	MethodProcessEvents = "process/events"

	// Notifications, executor -> client.
	MethodProcessOutput = "process/output"
	MethodProcessExited = "process/exited"
	MethodProcessClosed = "process/closed"
)

// JSON-RPC error codes, identical to codex's.
const (
	CodeInvalidRequest         = -32600 // lifecycle and state errors
	CodeMethodNotFound         = -32601
	CodeInvalidParams          = -32602
	CodeInternal               = -32603 // spawn failure, I/O
	CodeNotFound               = -32004 // fs NotFound
	CodeSessionAlreadyAttached = -32010
)

// Limits.
const (
	// MaxMessageBytes caps one serialized message in either direction.
	MaxMessageBytes = 64 << 20
	// MaxJSONValues caps the number of JSON values in one message, so a
	// small message cannot make the decoder allocate without bound.
	MaxJSONValues = 262144
	// MalformedMessageID is the id of the error reply to a message that
	// could not be parsed far enough to learn its id.
	MalformedMessageID = -1
)

// Error is a JSON-RPC error object. It implements error so handlers can
// return it directly. Data, when outpost sends the error, is ErrorData:
// the error's Kind (see KindErrorf and KindOf).
type Error struct {
	Code    int    `json:"code" msgpack:"code"`
	Message string `json:"message" msgpack:"message"`
	Data    any    `json:"data,omitempty" msgpack:"data,omitempty"`
}

func (e *Error) Error() string { return e.Message }

// Errorf builds an *Error without a kind. outpost's own errors are built
// with KindErrorf; Errorf is for errors that have none to give.
func Errorf(code int, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}
