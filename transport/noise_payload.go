package transport

import (
	"bytes"
	"context"
	"errors"
	"io"

	"github.com/outpost-exec/outpost/protocol"
)

// Handshake payloads that carry a message (a relay's relay/connect and
// relay/data in IK message 1, its answer in message 2) hold exactly one
// msgpack frame (section 4.1 of PROTOCOL.md): the same envelope as on a
// stream, so answers carry error kinds.

type bufRWC struct{ *bytes.Buffer }

func (bufRWC) Close() error { return nil }

// PayloadRequest is a request as one msgpack frame.
func PayloadRequest(id ID, method string, params any) ([]byte, error) {
	var b bytes.Buffer
	err := NewMsgpackConn(bufRWC{&b}, MaxHandshakePayload).WriteRequest(context.Background(), id, method, params)
	return b.Bytes(), err
}

// PayloadResult is a result response as one msgpack frame.
func PayloadResult(id ID, result any) ([]byte, error) {
	var b bytes.Buffer
	err := NewMsgpackConn(bufRWC{&b}, MaxHandshakePayload).WriteResult(context.Background(), id, result)
	return b.Bytes(), err
}

// PayloadError is an error response as one msgpack frame.
func PayloadError(id ID, e *protocol.Error) ([]byte, error) {
	var b bytes.Buffer
	err := NewMsgpackConn(bufRWC{&b}, MaxHandshakePayload).WriteError(context.Background(), id, e)
	return b.Bytes(), err
}

// errPayloadTrailing: bytes after the payload's one frame.
var errPayloadTrailing = errors.New("bytes after the frame")

// ParsePayload decodes a payload of exactly one msgpack frame; a payload
// that is anything else is a *MalformedError.
func ParsePayload(b []byte) (*Message, error) {
	buf := bytes.NewBuffer(b)
	m, err := NewMsgpackConn(bufRWC{buf}, MaxHandshakePayload).ReadMessage(context.Background())
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return nil, &MalformedError{Err: err}
	case err != nil:
		return nil, err
	case buf.Len() > 0:
		return nil, &MalformedError{Err: errPayloadTrailing}
	}
	return m, nil
}
