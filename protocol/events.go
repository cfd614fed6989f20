package protocol

import "sort"

// A process's events travel two ways: pushed as notifications
// (process/output, process/exited, process/closed) and read back through
// process/read, whose ReadResult holds output chunks and the exit and close
// events' fields. This file is the one place that maps Event, the neutral
// form both the executor's log and the client use, to and from each.

// EventKind tells the three kinds of process event apart.
type EventKind uint8

const (
	EventOutput EventKind = iota + 1
	EventExited
	EventClosed
)

func (k EventKind) String() string {
	switch k {
	case EventOutput:
		return "output"
	case EventExited:
		return "exited"
	case EventClosed:
		return "closed"
	}
	return "unknown"
}

// Method is the notification method that carries an event of kind k.
func (k EventKind) Method() string {
	switch k {
	case EventExited:
		return MethodProcessExited
	case EventClosed:
		return MethodProcessClosed
	}
	return MethodProcessOutput
}

// Event is one sequenced process event. Data is never modified once the
// event exists, so it may be shared without copying.
type Event struct {
	Kind          EventKind
	Seq           uint64
	Stream        Stream // EventOutput only
	Data          []byte // EventOutput only
	ExitCode      int32  // EventExited only: the status, or 128+n after signal n
	Signal        int32  // EventExited only: the signal that killed it, 0 if none
	SandboxDenied bool   // EventExited only
	Limit         string // EventExited only: LimitMemory, LimitPids or ""
}

// Params are the params of the notification that carries ev for process
// processID: *OutputNotification, *ExitedNotification or
// *ClosedNotification (pointers: the codecs' fast paths expect them).
func (ev *Event) Params(processID string) any {
	switch ev.Kind {
	case EventExited:
		denied := ev.SandboxDenied
		return &ExitedNotification{ProcessID: processID, Seq: ev.Seq, ExitCode: ev.ExitCode, Signal: ev.Signal, SandboxDenied: &denied, Limit: ev.Limit}
	case EventClosed:
		return &ClosedNotification{ProcessID: processID, Seq: ev.Seq}
	}
	return &OutputNotification{ProcessID: processID, Seq: ev.Seq, Stream: ev.Stream, Chunk: ev.Data}
}

// Decoder decodes a message's params (transport.Params is one).
type Decoder interface {
	Decode(v any) error
}

// DecodeEvent turns a process notification back into its process id and
// event. ok is false for another method or params that do not decode.
func DecodeEvent(method string, params Decoder) (processID string, ev Event, ok bool) {
	switch method {
	case MethodProcessOutput:
		var n OutputNotification
		if params.Decode(&n) != nil {
			return "", Event{}, false
		}
		return n.ProcessID, Event{Kind: EventOutput, Seq: n.Seq, Stream: n.Stream, Data: n.Chunk}, true
	case MethodProcessExited:
		var n ExitedNotification
		if params.Decode(&n) != nil {
			return "", Event{}, false
		}
		denied := n.SandboxDenied != nil && *n.SandboxDenied
		return n.ProcessID, Event{Kind: EventExited, Seq: n.Seq, ExitCode: n.ExitCode, Signal: n.Signal, SandboxDenied: denied, Limit: n.Limit}, true
	case MethodProcessClosed:
		var n ClosedNotification
		if params.Decode(&n) != nil {
			return "", Event{}, false
		}
		return n.ProcessID, Event{Kind: EventClosed, Seq: n.Seq}, true
	}
	return "", Event{}, false
}

// AddOutput appends an output event to r's chunks.
func (r *ReadResult) AddOutput(ev *Event) {
	r.Chunks = append(r.Chunks, OutputChunk{Seq: ev.Seq, Stream: ev.Stream, Chunk: ev.Data})
}

// SetExit records the exit event in r.
func (r *ReadResult) SetExit(ev *Event) {
	code := ev.ExitCode
	r.Exited, r.ExitCode, r.ExitSeq = true, &code, ev.Seq
	r.Signal, r.SandboxDenied, r.Limit = ev.Signal, ev.SandboxDenied, ev.Limit
}

// SetClosed records the close event in r.
func (r *ReadResult) SetClosed(ev *Event) {
	r.Closed, r.CloseSeq = true, ev.Seq
}

// Events rebuilds the events r holds, in seq order: its chunks, and the
// exit and close events when they fall within what r covers (a result cut
// short by maxBytes leaves out an exit numbered after output it did not
// return). A result without ExitSeq/CloseSeq (codex's) yields its chunks
// only.
func (r *ReadResult) Events() []Event {
	evs := make([]Event, 0, len(r.Chunks)+2)
	for _, c := range r.Chunks {
		evs = append(evs, Event{Kind: EventOutput, Seq: c.Seq, Stream: c.Stream, Data: c.Chunk})
	}
	limit := r.NextSeq
	if n := len(r.Chunks); n > 0 {
		limit = r.Chunks[n-1].Seq + 1
	}
	if r.Exited && r.ExitSeq > 0 && r.ExitSeq <= limit && r.ExitCode != nil {
		evs = append(evs, Event{Kind: EventExited, Seq: r.ExitSeq, ExitCode: *r.ExitCode, Signal: r.Signal, SandboxDenied: r.SandboxDenied, Limit: r.Limit})
	}
	if r.Closed && r.CloseSeq > 0 && r.CloseSeq <= limit+1 {
		evs = append(evs, Event{Kind: EventClosed, Seq: r.CloseSeq})
	}
	sort.Slice(evs, func(i, j int) bool { return evs[i].Seq < evs[j].Seq })
	return evs
}
