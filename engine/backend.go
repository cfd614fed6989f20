package engine

import (
	"context"
	"errors"
	"sync"

	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/sandbox"
)

// Backend starts processes. Everything after the start goes through the
// returned Process. LocalBackend starts real children; tests of the layers
// above use scripted backends of their own.
type Backend interface {
	Start(ctx context.Context, spec Spec) (Process, error)
}

// Spec is a prepared start request: paths are native to the executor and
// the environment is final.
type Spec struct {
	Argv      []string
	Arg0      string   // argv[0] the child sees; empty = Argv[0]
	Dir       string   // absolute, native
	Env       []string // exact, KEY=VALUE
	Tty       bool
	PipeStdin bool
	Rows      uint16 // PTY size; 0 = 24
	Cols      uint16 // 0 = 80

	// Sandboxed runs are prepared by the sandbox package: Path is the
	// helper binary (no PATH lookup), SandboxSetup makes what the helper
	// needs at the fork (namespaces, workspace mounts, its spec), and a
	// failing run's output is checked for denials.
	Path         string
	Sandboxed    bool
	SandboxSetup func() (sandbox.Launch, error)
	SandboxType  string // reported in the start result; "" = no sandbox context
	// Classify decides whether a failed sandboxed run was denied.
	Classify func(exitCode, signal int32, lines func(yield func(string) bool)) bool
}

// Process is a started process. All methods are safe for concurrent use.
type Process interface {
	// Log is the process's sequenced history: Read for process/read long
	// polls, Subscribe for pushed events with replay.
	Log() *EventLog
	// Write queues data for the child's stdin; closeStdin closes it after
	// the data. writeID, when non-empty, de-duplicates retries.
	Write(data []byte, writeID string, closeStdin bool) (protocol.WriteStatus, error)
	// Signal delivers sig to the process group. It is a no-op once the
	// process has closed.
	Signal(sig protocol.Signal) error
	// Resize changes a PTY's window size.
	Resize(rows, cols uint16) error
	// Terminate sends TERM to the process group and KILL after the
	// backend's grace period. It reports whether the process was running.
	Terminate() bool
	// Kill sends KILL to the process group at once (session expiry).
	Kill()
}

// Sentinel errors of Process methods.
var (
	ErrNotTTY         = errors.New("process is not attached to a pty")
	ErrStdinQueueFull = errors.New("stdin queue is full; retry the write with the same writeId")
)

// WriteIDs remembers the last maxWriteIDs accepted write ids of a process
// (FIFO), so a retried write is accepted once only: what Process.Write
// promises for writeID. A Process implementation embeds one; the zero
// value is ready.
type WriteIDs struct {
	mu    sync.Mutex
	seen  map[string]struct{}
	order []string
}

// maxWriteIDs bounds the remembered write ids per process.
const maxWriteIDs = 4096

// Accept runs write (which queues the bytes) unless id was already
// accepted, recording id atomically with a successful write.
func (w *WriteIDs) Accept(id string, write func() (protocol.WriteStatus, error)) (protocol.WriteStatus, error) {
	if id == "" {
		return write()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, dup := w.seen[id]; dup {
		return protocol.WriteAccepted, nil
	}
	st, err := write()
	if err != nil || st != protocol.WriteAccepted {
		return st, err
	}
	if w.seen == nil {
		w.seen = make(map[string]struct{})
	}
	w.seen[id] = struct{}{}
	w.order = append(w.order, id)
	if len(w.order) > maxWriteIDs {
		delete(w.seen, w.order[0])
		w.order[0] = ""
		w.order = w.order[1:]
	}
	return st, nil
}
