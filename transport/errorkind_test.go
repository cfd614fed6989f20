package transport

import (
	"bytes"
	"context"
	"net"
	"testing"

	"github.com/outpost-exec/outpost/protocol"
)

// An error's kind crosses both codecs as data.kind; an error without one
// (codex's) still decodes, with no kind.
func TestErrorKindCrossesBothCodecs(t *testing.T) {
	ctx := context.Background()
	codecs := map[string]func(t *testing.T) (MessageConn, MessageConn){
		"json": func(t *testing.T) (MessageConn, MessageConn) {
			a, b := net.Pipe()
			t.Cleanup(func() { a.Close(); b.Close() })
			return NewJSONConn(NewLineFrames(a, a, a, 0)), NewJSONConn(NewLineFrames(b, b, b, 0))
		},
		"msgpack": func(t *testing.T) (MessageConn, MessageConn) {
			a, b := net.Pipe()
			t.Cleanup(func() { a.Close(); b.Close() })
			return NewMsgpackConn(a, 0), NewMsgpackConn(b, 0)
		},
	}
	for name, pair := range codecs {
		t.Run(name, func(t *testing.T) {
			w, r := pair(t)
			for _, sent := range []*protocol.Error{
				protocol.KindErrorf(protocol.KindExhausted, protocol.CodeInvalidRequest, "relay/join: this relay is full (%d executors)", 1),
				protocol.KindErrorf(protocol.KindNotFound, protocol.CodeNotFound, "fs/readFile: /x: no such file or directory"),
				protocol.Errorf(protocol.CodeInternal, "no kind"),
			} {
				go w.WriteError(ctx, IntID(7), sent)
				m, err := r.ReadMessage(ctx)
				if err != nil {
					t.Fatal(err)
				}
				got := m.Error
				if m.Kind != KindResponse || got == nil || got.Code != sent.Code || got.Message != sent.Message || got.Kind() != sent.Kind() {
					t.Fatalf("sent %+v (kind %q), read %+v (kind %q)", sent, sent.Kind(), got, got.Kind())
				}
				if sent.Kind() == "" && got.Data != nil {
					t.Fatalf("data appeared: %#v", got.Data)
				}
			}
		})
	}
}

// On the JSON wire the kind is exactly data: {"kind": …}, after code and
// message, as codex peers ignore it.
func TestErrorKindJSONShape(t *testing.T) {
	var buf bytes.Buffer
	c := NewJSONConn(NewLineFrames(&bytes.Buffer{}, &buf, nil, 0))
	if err := c.WriteError(context.Background(), IntID(3), protocol.KindErrorf(protocol.KindUnknownSession, protocol.CodeInvalidRequest, "unknown session id s")); err != nil {
		t.Fatal(err)
	}
	want := `{"id":3,"error":{"code":-32600,"message":"unknown session id s","data":{"kind":"unknown_session"}}}` + "\n"
	if buf.String() != want {
		t.Fatalf("got  %s\nwant %s", buf.String(), want)
	}
}
