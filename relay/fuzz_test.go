package relay

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/transport"
)

// Seed corpora live in testdata/fuzz/FuzzControlRequest/.

// bufStream lets a bytes.Buffer stand in for a stream.
type bufStream struct{ bytes.Buffer }

func (*bufStream) Close() error { return nil }

// controlBody encodes one control request as the body of a msgpack frame.
func controlBody(tb testing.TB, method string, params any) []byte {
	tb.Helper()
	var s bufStream
	if err := transport.NewMsgpackConn(&s, 0).WriteRequest(context.Background(), transport.IntID(1), method, params); err != nil {
		tb.Fatal(err)
	}
	return s.Bytes()[4:] // drop the length header
}

// FuzzControlRequest: the one message a peer sends the relay before any
// token is checked. Any body decodes to a request or a clear error; a
// parsed request always carries a valid executor id and bounded labels;
// nothing panics.
func FuzzControlRequest(f *testing.F) {
	f.Add(controlBody(f, protocol.MethodRelayJoin, protocol.RelayJoinParams{ExecutorID: "build-1", Token: "t", Labels: map[string]string{"os": "linux"}}))
	f.Add(controlBody(f, protocol.MethodRelayConnect, protocol.RelayConnectParams{ExecutorID: "build-1", Token: "t"}))
	f.Add(controlBody(f, protocol.MethodRelayExecutors, protocol.RelayExecutorsParams{Token: "t"}))
	f.Add(controlBody(f, protocol.MethodRelayConnect, map[string]any{"executorId": "a/b"}))
	f.Add(controlBody(f, protocol.MethodRelayJoin, nil))
	f.Add([]byte{0x94, 0x01, 0x01, 0xa1, 'x', 0xc0})
	f.Fuzz(func(t *testing.T, body []byte) {
		m, err := transport.DecodeMsgpackMessage(body)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an empty error message")
			}
			return
		}
		if m.Kind != transport.KindRequest {
			return
		}
		var perr *protocol.Error
		var id string
		switch m.Method {
		case protocol.MethodRelayJoin:
			var p protocol.RelayJoinParams
			p, perr = parseJoin(m)
			id = p.ExecutorID
			if perr == nil && len(p.Labels) > maxLabels {
				t.Fatalf("%d labels accepted", len(p.Labels))
			}
		case protocol.MethodRelayConnect:
			var p protocol.RelayConnectParams
			p, perr = parseConnect(m)
			id = p.ExecutorID
		case protocol.MethodRelayExecutors:
			_, perr = parseList(m)
			id = "-"
		default:
			return
		}
		if perr != nil {
			if perr.Code != protocol.CodeInvalidParams || !strings.HasPrefix(perr.Message, m.Method+":") {
				t.Fatalf("unclear error %+v", perr)
			}
			return
		}
		if id == "" || len(id) > protocol.MaxExecutorIDLen || !utf8.ValidString(id) || strings.ContainsAny(id, "/ \t\n\x00") {
			t.Fatalf("invalid executor id %q accepted", id)
		}
	})
}

func TestControlRequestRefusesBadExecutorIDs(t *testing.T) {
	for _, id := range []string{"", "a/b", "a b", "a\x00b", "\xff", strings.Repeat("x", 129), "a\u2028b"} {
		m, err := transport.DecodeMsgpackMessage(controlBody(t, protocol.MethodRelayConnect, protocol.RelayConnectParams{ExecutorID: id}))
		if err != nil {
			t.Fatal(err)
		}
		if _, perr := parseConnect(m); perr == nil {
			t.Errorf("executor id %q accepted", id)
		}
	}
	m, _ := transport.DecodeMsgpackMessage(controlBody(t, protocol.MethodRelayJoin, protocol.RelayJoinParams{ExecutorID: "ok-1"}))
	if _, perr := parseJoin(m); perr != nil {
		t.Fatalf("a good id refused: %v", perr)
	}
}
