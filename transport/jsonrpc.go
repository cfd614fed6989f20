package transport

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"

	"github.com/outpost-exec/outpost/protocol"
)

// JSON-RPC lite, codex's envelope: JSON-RPC 2.0 without the "jsonrpc"
// member (accepted and ignored when present). One message per frame:
//
//	request       {"id": 1, "method": "process/start", "params": {...}}
//	notification  {"method": "process/output", "params": {...}}
//	response      {"id": 1, "result": {...}}
//	error         {"id": 1, "error": {"code": -32602, "message": "...", "data": {"kind": "invalid"}}}
//
// An error's data, when outpost sends it, is protocol.ErrorData: its kind
// (protocol.KindOf reads it back); codex sends none and ignores it.
//
// Ids are integers or strings. A message is at most
// protocol.MaxMessageBytes long and holds at most protocol.MaxJSONValues
// JSON values; duplicate object keys are rejected, so two decoders can
// never disagree about what a message says.

// Frames moves whole frames: WebSocket messages or stdio lines.
type Frames interface {
	// ReadFrame returns the next frame. A frame over the size limit
	// returns ErrMessageTooLarge and the stream stays usable.
	ReadFrame(ctx context.Context) ([]byte, error)
	WriteFrame(ctx context.Context, frame []byte) error
	Close() error
}

// budgetedFrames is Frames that hold a large frame in memory of its own,
// reserved from a ReadBudget (WSFrames, LineFrames): JSONConn hands the
// reservation back as soon as it has decoded the message, and needs no
// copy of a frame no later read reuses.
type budgetedFrames interface {
	frameOwned() bool
	releaseFrame()
}

// droppedFrameError is a frame a ReadBudget could not hold, with its
// first bytes (valid until the next read), where a request's id is.
type droppedFrameError struct {
	err  error
	head []byte
}

func (e *droppedFrameError) Error() string { return e.err.Error() }
func (e *droppedFrameError) Unwrap() error { return e.err }

// JSONConn is a MessageConn speaking JSON-RPC lite over Frames.
type JSONConn struct {
	frames Frames
	wbuf   bytes.Buffer // used by the single writer goroutine
	wmu    sync.Mutex
}

// NewJSONConn wraps frames.
func NewJSONConn(f Frames) *JSONConn { return &JSONConn{frames: f} }

type jsonParams json.RawMessage

func (p jsonParams) Absent() bool {
	return len(p) == 0 || string(p) == "null"
}

func (p jsonParams) Decode(v any) error {
	if p.Absent() {
		return nil
	}
	return json.Unmarshal(p, v)
}

type jsonEnvelope struct {
	ID     json.RawMessage `json:"id"`
	Method *string         `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *protocol.Error `json:"error"`
}

// ReadMessage reads and classifies the next message. Undecodable input
// yields a *MalformedError; transport failures are returned as they are.
func (c *JSONConn) ReadMessage(ctx context.Context) (*Message, error) {
	frame, err := c.frames.ReadFrame(ctx)
	if err != nil {
		var dropped *droppedFrameError
		if errors.As(err, &dropped) {
			id, ok := jsonPrefixID(dropped.head)
			return nil, &MalformedError{Err: fmt.Errorf("JSON-RPC message dropped: %w", dropped.err), ID: id, HasID: ok}
		}
		if errors.Is(err, ErrMessageTooLarge) {
			return nil, &MalformedError{Err: fmt.Errorf("failed to parse JSON-RPC message: %w", err)}
		}
		return nil, err
	}
	bf, _ := c.frames.(budgetedFrames)
	if bf != nil {
		defer bf.releaseFrame()
	}
	if m, ok := decodeOutputFast(frame); ok {
		return m, nil
	}
	// A frame buffer reused by the next read is copied: params outlive it.
	if bf == nil || !bf.frameOwned() {
		frame = bytes.Clone(frame)
	}
	m, err := DecodeJSONMessage(frame)
	if err != nil {
		return nil, &MalformedError{Err: fmt.Errorf("failed to parse JSON-RPC message: %w", err)}
	}
	return m, nil
}

// DecodeJSONMessage parses one JSON-RPC lite message.
func DecodeJSONMessage(frame []byte) (*Message, error) {
	if err := CheckJSON(frame, protocol.MaxJSONValues); err != nil {
		return nil, err
	}
	// Members are looked up by their exact names: decoding straight into
	// jsonEnvelope would let encoding/json match them case-insensitively,
	// so {"id":1,"method":"a","Method":"b"} would say "b" here and "a" to
	// a case-sensitive peer.
	var members map[string]json.RawMessage
	if err := json.Unmarshal(frame, &members); err != nil {
		return nil, err
	}
	env := jsonEnvelope{ID: members["id"], Params: members["params"], Result: members["result"]}
	if raw, ok := members["method"]; ok {
		if err := json.Unmarshal(raw, &env.Method); err != nil {
			return nil, err
		}
	}
	if raw, ok := members["error"]; ok {
		if err := json.Unmarshal(raw, &env.Error); err != nil {
			return nil, err
		}
	}
	hasID := len(env.ID) > 0 && string(env.ID) != "null"
	m := &Message{}
	if hasID {
		if err := m.ID.UnmarshalJSON(env.ID); err != nil {
			return nil, err
		}
	}
	switch {
	case env.Method != nil:
		if *env.Method == "" {
			return nil, errors.New("method must not be empty")
		}
		m.Method = *env.Method
		m.Params = jsonParams(env.Params)
		if hasID {
			m.Kind = KindRequest
		} else {
			m.Kind = KindNotification
		}
	case hasID && (env.Result != nil || env.Error != nil):
		m.Kind = KindResponse
		m.Result = jsonParams(env.Result)
		m.Error = env.Error
	default:
		return nil, errors.New("message is neither a request, a notification nor a response")
	}
	return m, nil
}

// jsonPrefixID reads a request's id from the first bytes of a message
// that was dropped part way: the "id" member of the top-level object,
// found when no member the prefix cuts short comes before it (codex and
// outpost write the id first); ok is false otherwise.
func jsonPrefixID(head []byte) (ID, bool) {
	dec := json.NewDecoder(bytes.NewReader(head))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return ID{}, false
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return ID{}, false
		}
		key, _ := tok.(string)
		if key != "id" {
			var skip json.RawMessage
			if dec.Decode(&skip) != nil {
				return ID{}, false
			}
			continue
		}
		var raw json.RawMessage
		if dec.Decode(&raw) != nil {
			return ID{}, false
		}
		var id ID
		if string(raw) == "null" || id.UnmarshalJSON(raw) != nil {
			return ID{}, false
		}
		return id, true
	}
	return ID{}, false
}

// maxNestingDepth is encoding/json's own limit, which Token does not apply.
const maxNestingDepth = 10000

// CheckJSON verifies that b is one well-formed JSON value with at most
// maxValues values and no duplicate keys in any object.
func CheckJSON(b []byte, maxValues int) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	type frame struct {
		keys   map[string]struct{}
		object bool
		expKey bool
	}
	var stack []frame
	values := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			if values == 0 {
				return errors.New("empty message")
			}
			if len(stack) > 0 {
				return io.ErrUnexpectedEOF // Token reports a truncated value as a clean EOF
			}
			return nil
		}
		if err != nil {
			return err
		}
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			stack = stack[:len(stack)-1]
			if len(stack) > 0 && stack[len(stack)-1].object {
				stack[len(stack)-1].expKey = true
			}
			continue
		}
		if len(stack) > 0 && stack[len(stack)-1].object && stack[len(stack)-1].expKey {
			top := &stack[len(stack)-1]
			key, ok := tok.(string)
			if !ok {
				return errors.New("object key is not a string")
			}
			if top.keys == nil {
				top.keys = make(map[string]struct{})
			}
			if _, dup := top.keys[key]; dup {
				return fmt.Errorf("duplicate key %q", key)
			}
			top.keys[key] = struct{}{}
			top.expKey = false
			continue
		}
		values++
		if values > maxValues {
			return fmt.Errorf("message has more than %d JSON values", maxValues)
		}
		if len(stack) == 0 && values > 1 {
			return errors.New("trailing data after the message")
		}
		if d, ok := tok.(json.Delim); ok && len(stack) == maxNestingDepth && (d == '{' || d == '[') {
			return fmt.Errorf("message nests deeper than %d", maxNestingDepth)
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, frame{object: true, expKey: true})
		case json.Delim('['):
			stack = append(stack, frame{})
		default:
			if len(stack) > 0 && stack[len(stack)-1].object {
				stack[len(stack)-1].expKey = true
			}
		}
	}
}

func (c *JSONConn) send(ctx context.Context, build func(b *bytes.Buffer) error) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wbuf.Reset()
	if err := build(&c.wbuf); err != nil {
		return err
	}
	if c.wbuf.Len() > protocol.MaxMessageBytes {
		return fmt.Errorf("outbound %w", ErrMessageTooLarge)
	}
	return c.frames.WriteFrame(ctx, c.wbuf.Bytes())
}

func writeJSON(b *bytes.Buffer, v any) error {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	b.Truncate(b.Len() - 1) // Encode's newline
	return nil
}

// member is one "key": value of an envelope; a nil value is left out.
type member struct {
	key   string
	value any
}

// writeEnvelope writes a JSON object of members (in order) as one frame.
func (c *JSONConn) writeEnvelope(ctx context.Context, members ...member) error {
	return c.send(ctx, func(b *bytes.Buffer) error {
		b.WriteByte('{')
		first := true
		for _, m := range members {
			if m.value == nil {
				continue
			}
			if !first {
				b.WriteByte(',')
			}
			first = false
			b.WriteString(`"` + m.key + `":`)
			if err := writeJSON(b, m.value); err != nil {
				return err
			}
		}
		b.WriteByte('}')
		return nil
	})
}

// WriteResult sends a response.
func (c *JSONConn) WriteResult(ctx context.Context, id ID, result any) error {
	if result == nil {
		result = json.RawMessage("null") // a response always carries "result"
	}
	return c.writeEnvelope(ctx, member{"id", id}, member{"result", result})
}

// WriteError sends an error response.
func (c *JSONConn) WriteError(ctx context.Context, id ID, e *protocol.Error) error {
	return c.writeEnvelope(ctx, member{"id", id}, member{"error", e})
}

// WriteRequest sends a request.
func (c *JSONConn) WriteRequest(ctx context.Context, id ID, method string, params any) error {
	return c.writeEnvelope(ctx, member{"id", id}, member{"method", method}, member{"params", params})
}

// WriteNotification sends a notification. process/output, the bulk of all
// traffic, is encoded by hand: base64 straight into the frame buffer.
func (c *JSONConn) WriteNotification(ctx context.Context, method string, params any) error {
	if out, ok := params.(*protocol.OutputNotification); ok && method == protocol.MethodProcessOutput && knownStream(out.Stream) {
		return c.send(ctx, func(b *bytes.Buffer) error {
			appendOutputNotification(b, out)
			return nil
		})
	}
	return c.writeEnvelope(ctx, member{"method", method}, member{"params", params})
}

func knownStream(s protocol.Stream) bool {
	return s == protocol.StreamStdout || s == protocol.StreamStderr || s == protocol.StreamPty
}

func appendOutputNotification(b *bytes.Buffer, n *protocol.OutputNotification) {
	b.WriteString(`{"method":"process/output","params":{"processId":`)
	pid, _ := json.Marshal(n.ProcessID)
	b.Write(pid)
	b.WriteString(`,"seq":`)
	var num [20]byte
	b.Write(strconv.AppendUint(num[:0], n.Seq, 10))
	b.WriteString(`,"stream":"`)
	b.WriteString(string(n.Stream))
	b.WriteString(`","chunk":"`)
	size := base64.StdEncoding.EncodedLen(len(n.Chunk))
	b.Grow(size + 3)
	buf := b.AvailableBuffer()[:size]
	encodeBase64(buf, n.Chunk)
	b.Write(buf)
	b.WriteString(`"}}`)
}

// Close closes the frames.
func (c *JSONConn) Close() error { return c.frames.Close() }

// JSONParams are params given as JSON text (codex/call's), decoded as the
// JSON codec decodes a message's params. The caller checks raw with
// CheckJSON first, as ReadMessage does.
func JSONParams(raw []byte) Params { return jsonParams(raw) }

// MarshalJSON encodes v as the JSON codec encodes a result: no HTML
// escaping, no trailing newline.
func MarshalJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	if err := writeJSON(&b, v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
