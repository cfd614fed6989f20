// Package transport carries outpost's RPC messages: framing, codecs and the
// byte pipes under them.
//
// This file defines the codec-neutral message model. A MessageConn reads
// and writes whole messages; the executor's method table sees only Message
// and Params, so the codex JSON codec (this package's JSONConn, over a
// WebSocket or stdio) and the native msgpack codec share one handler.
package transport

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"

	"github.com/outpost-exec/outpost/protocol"
)

// Kind classifies an inbound message.
type Kind uint8

const (
	KindRequest      Kind = iota + 1 // method and id
	KindNotification                 // method, no id
	KindResponse                     // id and result or error, no method
)

// ID is a JSON-RPC request id: an integer or a string.
type ID struct {
	Num   int64
	Str   string
	IsStr bool
}

// IntID returns an integer id.
func IntID(n int64) ID { return ID{Num: n} }

// MalformedID is the id of the error reply to an unparseable message.
var MalformedID = IntID(protocol.MalformedMessageID)

func (id ID) String() string {
	if id.IsStr {
		return strconv.Quote(id.Str)
	}
	return strconv.FormatInt(id.Num, 10)
}

// MarshalJSON encodes the id as a JSON number or string.
func (id ID) MarshalJSON() ([]byte, error) {
	if id.IsStr {
		return json.Marshal(id.Str)
	}
	return strconv.AppendInt(nil, id.Num, 10), nil
}

// UnmarshalJSON accepts a JSON integer or string.
func (id *ID) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		*id = ID{IsStr: true}
		return json.Unmarshal(b, &id.Str)
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return errors.New("id must be an integer or a string")
	}
	*id = ID{Num: n}
	return nil
}

// Params are a message's undecoded params.
type Params interface {
	// Decode fills v; absent or null params leave v unchanged.
	Decode(v any) error
	// Absent reports whether the params were omitted or null.
	Absent() bool
}

// Message is one inbound message.
type Message struct {
	Kind   Kind
	ID     ID
	Method string
	Params Params
	// Result and Error are set on a KindResponse.
	Result Params
	Error  *protocol.Error
}

// MalformedError is returned by ReadMessage for a message that could not
// be decoded, or was dropped unread (too large, or more than a ReadBudget
// could hold). The connection is still usable; the caller answers it with
// an error whose id is ID when HasID (a request dropped part way whose
// id the reader had read: its caller gets its answer) and MalformedID
// otherwise.
type MalformedError struct {
	Err   error
	ID    ID
	HasID bool
}

// ReplyID is the id an answer to the refused message carries.
func (e *MalformedError) ReplyID() ID {
	if e.HasID {
		return e.ID
	}
	return MalformedID
}

func (e *MalformedError) Error() string { return e.Err.Error() }
func (e *MalformedError) Unwrap() error { return e.Err }

// MessageConn reads and writes whole RPC messages. ReadMessage is called
// from one goroutine and the Write methods from one (other) goroutine.
type MessageConn interface {
	ReadMessage(ctx context.Context) (*Message, error)
	WriteResult(ctx context.Context, id ID, result any) error
	WriteError(ctx context.Context, id ID, e *protocol.Error) error
	WriteNotification(ctx context.Context, method string, params any) error
	// WriteRequest sends a request (client side).
	WriteRequest(ctx context.Context, id ID, method string, params any) error
	Close() error
}

// ErrMessageTooLarge refuses a message over protocol.MaxMessageBytes.
var ErrMessageTooLarge = errors.New("message exceeds the size limit")
