package transport

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strconv"

	"github.com/outpost-exec/outpost/protocol"
)

// process/output carries nearly every byte a connection moves. Both
// outpost and codex serialise it compactly with its fields in one order,
// so a reader can take it apart by hand — one pass, base64 decoded straight
// into the chunk — instead of three passes of encoding/json. Anything that
// does not match the exact layout takes the general path.

var (
	outputPrefix = []byte(`{"method":"process/output","params":{"processId":"`)
	seqKey       = []byte(`","seq":`)
	streamKey    = []byte(`,"stream":"`)
	chunkKey     = []byte(`","chunk":"`)
	outputSuffix = []byte(`"}}`)
)

// decodeOutputFast parses a compact process/output notification.
func decodeOutputFast(frame []byte) (*Message, bool) {
	rest, ok := bytes.CutPrefix(frame, outputPrefix)
	if !ok {
		return nil, false
	}
	end := bytes.IndexByte(rest, '"')
	if end < 0 {
		return nil, false
	}
	pid := rest[:end]
	if bytes.IndexByte(pid, '\\') >= 0 || !validPlainString(pid) {
		return nil, false
	}
	if rest, ok = bytes.CutPrefix(rest[end:], seqKey); !ok {
		return nil, false
	}
	i := 0
	for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
		i++
	}
	seq, err := strconv.ParseUint(string(rest[:i]), 10, 64)
	if err != nil || (i > 1 && rest[0] == '0') {
		return nil, false
	}
	if rest, ok = bytes.CutPrefix(rest[i:], streamKey); !ok {
		return nil, false
	}
	end = bytes.IndexByte(rest, '"')
	if end < 0 {
		return nil, false
	}
	stream := protocol.Stream(rest[:end])
	switch stream {
	case protocol.StreamStdout, protocol.StreamStderr, protocol.StreamPty:
	default:
		return nil, false
	}
	if rest, ok = bytes.CutPrefix(rest[end:], chunkKey); !ok {
		return nil, false
	}
	b64, ok := bytes.CutSuffix(rest, outputSuffix)
	if !ok {
		return nil, false
	}
	chunk := make([]byte, base64.StdEncoding.DecodedLen(len(b64)))
	n, ok := decodeBase64(chunk, b64)
	if !ok {
		return nil, false
	}
	n0 := &protocol.OutputNotification{ProcessID: string(pid), Seq: seq, Stream: stream, Chunk: chunk[:n]}
	return &Message{Kind: KindNotification, Method: protocol.MethodProcessOutput, Params: outputParams{n: n0}}, true
}

// validPlainString accepts bytes that JSON allows unescaped in a string
// and that are valid UTF-8 as they are.
func validPlainString(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c >= 0x80 {
			return false // control characters are invalid; non-ASCII takes the general path
		}
	}
	return true
}

type outputParams struct{ n *protocol.OutputNotification }

func (p outputParams) Absent() bool { return false }

func (p outputParams) Decode(v any) error {
	if out, ok := v.(*protocol.OutputNotification); ok {
		*out = *p.n
		return nil
	}
	raw, err := json.Marshal(p.n)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, v)
}
