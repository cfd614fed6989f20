package transport

import (
	"bytes"
	"context"
	"errors"
	"io"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/outpost-exec/outpost/protocol"
)

// Seed corpora live in testdata/fuzz/<FuzzName>/.

// mpCounter counts the bytes read through it.
type mpCounter struct {
	r io.Reader
	n int
}

func (c *mpCounter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}
func (c *mpCounter) Write(p []byte) (int, error) { return len(p), nil }
func (c *mpCounter) Close() error                { return nil }

// FuzzMsgpackReadMessage: any byte stream, read as frames, never panics
// or hangs; every frame is consumed exactly (header and declared length,
// even when refused), so ReadMessage agrees frame by frame with a
// ReadFrame model of the stream; nothing over the limit is returned;
// what decodes is well-formed, safe to Decode into protocol types, and
// survives a trip through the writers unchanged.
func FuzzMsgpackReadMessage(f *testing.F) {
	f.Add(mpFrames(mpValidBody), uint16(0))
	f.Add(append([]byte{0, 0, 0, 0}, mpFrames(mpValidBody)...), uint16(100))
	f.Add(append([]byte{0, 0, 0, 20}, make([]byte, 20)...), uint16(10))
	f.Fuzz(func(t *testing.T, data []byte, limitSel uint16) {
		ctx := context.Background()
		limit := 1 + int(limitSel)%2048
		in := &mpCounter{r: bytes.NewReader(data)}
		c := NewMsgpackConn(in, limit)
		model := bytes.NewReader(data)
		for range 100 {
			before, skipped := in.n, c.skip
			m, err := c.ReadMessage(ctx)
			consumed := in.n - before
			frame, ferr := ReadFrame(model, nil, limit)
			var me, fme *MalformedError
			if ferr == io.ErrUnexpectedEOF && errors.Is(err, ErrMessageTooLarge) {
				// Refused at its header; the missing body shows next call.
				m, err = c.ReadMessage(ctx)
			}
			switch {
			case ferr == io.EOF || ferr == io.ErrUnexpectedEOF:
				if err != ferr {
					t.Fatalf("ReadMessage: %v, the stream ends with %v", err, ferr)
				}
				return
			case errors.As(ferr, &fme):
				if !errors.As(err, &me) {
					t.Fatalf("ReadMessage: %+v, %v for a refused frame (%v)", m, err, ferr)
				}
				// Consumed exactly, counting a body still to be skipped.
				if want := len(data) - model.Len(); in.n+int(c.skip) != want {
					t.Fatalf("refused frame: consumed up to %d (+%d to skip), want %d", in.n, c.skip, want)
				}
				continue
			case ferr != nil:
				t.Fatalf("ReadFrame: %v", ferr)
			}
			if consumed != int(skipped)+4+len(frame) || len(frame) > limit {
				t.Fatalf("consumed %d bytes for a frame of %d (limit %d)", consumed, len(frame), limit)
			}
			_, derr := DecodeMsgpackMessage(bytes.Clone(frame))
			if (derr == nil) != (err == nil) {
				t.Fatalf("ReadMessage: %v; DecodeMsgpackMessage: %v", err, derr)
			}
			if err != nil {
				if !errors.As(err, &me) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
					t.Fatalf("a complete frame gave %v, want a *MalformedError", err)
				}
				continue
			}
			mpCheckMessage(t, m)
			mpDecodeEverything(m)
			mpCheckRewrite(t, m)
		}
	})
}

func mpCheckMessage(t *testing.T, m *Message) {
	t.Helper()
	switch m.Kind {
	case KindRequest, KindNotification:
		if m.Method == "" || m.Params == nil || m.Result != nil || m.Error != nil {
			t.Fatalf("bad %v: %+v", m.Kind, m)
		}
		if m.Kind == KindNotification && m.ID != (ID{}) {
			t.Fatalf("notification with id %v", m.ID)
		}
	case KindResponse:
		if m.Method != "" || m.Params != nil || m.Result == nil || (m.Error != nil && !m.Result.Absent()) {
			t.Fatalf("bad response: %+v", m)
		}
	default:
		t.Fatalf("kind %v", m.Kind)
	}
}

// mpDecodeEverything decodes the params into a few targets: the decoder
// must neither panic nor blow up on anything the reader let through.
func mpDecodeEverything(m *Message) {
	p := m.Params
	if p == nil {
		p = m.Result
	}
	var v any
	_ = p.Decode(&v)
	_ = p.Decode(&protocol.ExecParams{})
	_ = p.Decode(&protocol.ReadResult{})
	_ = p.Decode(&protocol.OutputNotification{})
	_ = p.Decode(&protocol.FsReadBlockResult{})
	_ = p.Decode(&protocol.FsWriteBlockParams{})
	_ = p.Decode(&map[string]any{})
	_ = p.Decode(&[]any{})
	_ = p.Decode(&map[any]any{})
	_ = p.Decode(&protocol.Error{})
}

// mpCheckRewrite writes m back out and checks it reads the same.
func mpCheckRewrite(t *testing.T, m *Message) {
	t.Helper()
	ctx := context.Background()
	buf := newMpBuf(nil)
	w := NewMsgpackConn(buf, 0)
	var err error
	switch {
	case m.Kind == KindRequest:
		err = w.WriteRequest(ctx, m.ID, m.Method, m.Params)
	case m.Kind == KindNotification:
		err = w.WriteNotification(ctx, m.Method, m.Params)
	case m.Error != nil:
		err = w.WriteError(ctx, m.ID, m.Error)
	default:
		err = w.WriteResult(ctx, m.ID, m.Result)
	}
	if err != nil {
		t.Fatalf("rewriting %+v: %v", m, err)
	}
	got, err := NewMsgpackConn(newMpBuf(buf.out.Bytes()), 0).ReadMessage(ctx)
	if err != nil {
		t.Fatalf("reading back %+v: %v", m, err)
	}
	if got.Kind != m.Kind || got.ID != m.ID || got.Method != m.Method ||
		!mpSameParams(got.Params, m.Params) || !mpSameParams(got.Result, m.Result) ||
		(got.Error == nil) != (m.Error == nil) {
		t.Fatalf("changed by a rewrite:\n got %+v\nwant %+v", got, m)
	}
	if m.Error != nil && (got.Error.Code != m.Error.Code || got.Error.Message != m.Error.Message) {
		t.Fatalf("error changed by a rewrite: %+v, want %+v", got.Error, m.Error)
	}
}

func mpSameParams(a, b Params) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return bytes.Equal(a.(msgpackParams), b.(msgpackParams))
}

// FuzzMsgpackRoundTrip: a (kind, id, method, payload) tuple written by
// the writers reads back as the same values. The payload travels twice:
// as bytes (a msgpack bin, always writable) and as a raw msgpack value,
// which the writer sends verbatim or refuses, and refuses exactly when a
// reader would reject the resulting body.
func FuzzMsgpackRoundTrip(f *testing.F) {
	f.Add(uint8(0), int64(1), "", false, "process/start", []byte{0x80})
	f.Add(uint8(1), int64(0), "", false, "process/output", []byte{0x81, 0xa1, 'a', 0xc4, 0x01, 0x00})
	f.Add(uint8(2), int64(-1), "abc", true, "", []byte{0xc0})
	f.Add(uint8(3), int64(-32602), "", false, "bad params", []byte{0x92, 0x01, 0xa1, 'x'})
	f.Add(uint8(2), int64(0), "", false, "", []byte{0xd4, 0x01, 0x00})
	f.Fuzz(func(t *testing.T, kindSel uint8, idNum int64, idStr string, idIsStr bool, method string, payload []byte) {
		ctx := context.Background()
		kind := 1 + kindSel%4
		id := ID{Num: idNum}
		if idIsStr {
			id = ID{Str: idStr, IsStr: true}
		}
		write := func(c *MsgpackConn, p any) error {
			switch kind {
			case msgpackKindRequest:
				return c.WriteRequest(ctx, id, method, p)
			case msgpackKindNotification:
				return c.WriteNotification(ctx, method, p)
			case msgpackKindResult:
				return c.WriteResult(ctx, id, p)
			default:
				return c.WriteError(ctx, id, &protocol.Error{Code: int(idNum), Message: method, Data: p})
			}
		}
		needsMethod := kind == msgpackKindRequest || kind == msgpackKindNotification

		// As bytes.
		buf := newMpBuf(nil)
		err := write(NewMsgpackConn(buf, 0), payload)
		if needsMethod && method == "" {
			if err == nil || buf.writes != 0 {
				t.Fatalf("empty method: %v, %d writes", err, buf.writes)
			}
			return
		}
		if err != nil {
			t.Fatalf("writing a bin payload: %v", err)
		}
		m := mpReadBack(t, buf, kind, id, method)
		var got []byte
		switch {
		case m.Error != nil:
			got, _ = m.Error.Data.([]byte)
		case m.Params != nil:
			err = m.Params.Decode(&got)
		default:
			err = m.Result.Decode(&got)
		}
		if err != nil || !bytes.Equal(got, payload) || (got == nil) != (payload == nil) && m.Error == nil {
			t.Fatalf("payload %x read back as %x (%v)", payload, got, err)
		}

		// As a raw msgpack value.
		buf = newMpBuf(nil)
		err = write(NewMsgpackConn(buf, 0), msgpack.RawMessage(payload))
		if err != nil {
			if buf.writes != 0 {
				t.Fatal("a refused message was written")
			}
			if body := mpHandBody(t, kind, id, method, payload); mpAccepts(body) {
				t.Fatalf("writer refused raw payload %x (%v), but a reader accepts % x", payload, err, body)
			}
			return
		}
		m = mpReadBack(t, buf, kind, id, method)
		var raw []byte
		switch {
		case m.Error != nil:
			var want any
			if len(payload) > 0 { // else omitempty dropped it
				if err := msgpack.Unmarshal(payload, &want); err != nil {
					want = msgpack.RawMessage(payload) // kept undecoded
				}
			}
			// A float anywhere may be a NaN, which never equals itself.
			if !reflect.DeepEqual(m.Error.Data, want) && !bytes.ContainsAny(payload, "\xca\xcb") {
				t.Fatalf("error data %x read back as %#v, want %#v", payload, m.Error.Data, want)
			}
			return
		case m.Params != nil:
			raw = m.Params.(msgpackParams)
		default:
			raw = m.Result.(msgpackParams)
		}
		if isNil := len(payload) == 1 && payload[0] == 0xc0; isNil {
			if len(raw) != 0 {
				t.Fatalf("nil payload read back as present %x", raw)
			}
		} else if !bytes.Equal(raw, payload) {
			t.Fatalf("raw payload %x read back as %x", payload, raw)
		}
	})
}

// mpReadBack reads the one frame in buf and checks its envelope.
func mpReadBack(t *testing.T, buf *mpBuf, kind uint8, id ID, method string) *Message {
	t.Helper()
	if buf.writes != 1 {
		t.Fatalf("%d writes for one message", buf.writes)
	}
	c := NewMsgpackConn(newMpBuf(buf.out.Bytes()), 0)
	m, err := c.ReadMessage(context.Background())
	if err != nil {
		t.Fatalf("reading back % x: %v", buf.out.Bytes(), err)
	}
	if _, err := c.ReadMessage(context.Background()); err != io.EOF {
		t.Fatalf("after the frame: %v", err)
	}
	switch kind {
	case msgpackKindRequest:
		if m.Kind != KindRequest || m.ID != id || m.Method != method {
			t.Fatalf("request read back as %+v", m)
		}
	case msgpackKindNotification:
		if m.Kind != KindNotification || m.ID != (ID{}) || m.Method != method {
			t.Fatalf("notification read back as %+v", m)
		}
	case msgpackKindResult:
		if m.Kind != KindResponse || m.ID != id || m.Method != "" || m.Error != nil {
			t.Fatalf("result read back as %+v", m)
		}
	default:
		if m.Kind != KindResponse || m.ID != id || m.Method != "" || m.Error == nil ||
			m.Error.Code != int(id.Num) && !id.IsStr || m.Error.Message != method {
			t.Fatalf("error read back as %+v (%+v)", m, m.Error)
		}
	}
	return m
}

// mpHandBody builds the body the writer would have sent with payload in
// place, without the writer's checks.
func mpHandBody(t *testing.T, kind uint8, id ID, method string, payload []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := msgpack.NewEncoder(&b)
	enc.EncodeArrayLen(4)
	enc.EncodeUint(uint64(kind))
	switch {
	case kind == msgpackKindNotification:
		enc.EncodeNil()
	case id.IsStr:
		enc.EncodeString(id.Str)
	default:
		enc.EncodeInt(id.Num)
	}
	if kind == msgpackKindError {
		enc.EncodeString("")
		enc.EncodeMapLen(3)
		enc.EncodeString("code")
		enc.EncodeInt(id.Num)
		enc.EncodeString("message")
		enc.EncodeString(method)
		enc.EncodeString("data")
	} else if kind == msgpackKindResult {
		enc.EncodeString("")
	} else {
		enc.EncodeString(method)
	}
	b.Write(payload)
	return b.Bytes()
}

func mpAccepts(body []byte) bool {
	_, err := DecodeMsgpackMessage(body)
	return err == nil
}

// FuzzMsgpackBlockFastPaths: whatever the file-block fast paths accept,
// the general decoder accepts with the same values; and a block written
// from where it is (handle id, offset and chunk size the fuzzer's) reads
// back exactly through both.
func FuzzMsgpackBlockFastPaths(f *testing.F) {
	f.Add([]byte{0x82, 0xa5, 'c', 'h', 'u', 'n', 'k', 0xc4, 1, 7, 0xa3, 'e', 'o', 'f', 0xc3}, "h", uint64(0), uint16(0))
	f.Add([]byte{0x83}, "a-handle", uint64(1)<<62, uint16(300))
	f.Fuzz(func(t *testing.T, body []byte, handle string, off uint64, extra uint16) {
		var fr, gr protocol.FsReadBlockResult
		if decodeReadBlockMsgpack(body, &fr) {
			if err := msgpack.Unmarshal(body, &gr); err != nil || !bytes.Equal(fr.Chunk, gr.Chunk) || fr.EOF != gr.EOF {
				t.Fatalf("readBlock fast path %+v, general %+v (%v)", fr, gr, err)
			}
		}
		var fw, gw protocol.FsWriteBlockParams
		if decodeWriteBlockMsgpack(body, &fw) {
			if err := msgpack.Unmarshal(body, &gw); err != nil || !bytes.Equal(fw.Chunk, gw.Chunk) || fw.HandleID != gw.HandleID || fw.Offset != gw.Offset {
				t.Fatalf("writeBlock fast path %+v, general %+v (%v)", fw.HandleID, gw.HandleID, err)
			}
		}
		chunk := bytes.Repeat(append([]byte{byte(extra)}, body...), 1+(blockChunkMin+int(extra))/(len(body)+1))
		for _, payload := range []any{
			protocol.FsWriteBlockParams{HandleID: handle, Offset: off, Chunk: chunk},
			&protocol.FsReadBlockResult{Chunk: chunk, EOF: extra%2 == 0},
		} {
			buf := newMpBuf(nil)
			if err := NewMsgpackConn(buf, 0).WriteRequest(context.Background(), ID{Num: 1}, "m", payload); err != nil {
				t.Fatal(err)
			}
			m, err := NewMsgpackConn(newMpBuf(buf.out.Bytes()), 0).ReadMessage(context.Background())
			if err != nil {
				t.Fatalf("reading back: %v", err)
			}
			raw := []byte(m.Params.(msgpackParams))
			switch want := payload.(type) {
			case protocol.FsWriteBlockParams:
				var fast, general protocol.FsWriteBlockParams
				if !decodeWriteBlockMsgpack(raw, &fast) || msgpack.Unmarshal(raw, &general) != nil {
					t.Fatal("a written block does not decode")
				}
				for _, got := range []protocol.FsWriteBlockParams{fast, general} {
					if got.HandleID != want.HandleID || got.Offset != want.Offset || !bytes.Equal(got.Chunk, want.Chunk) {
						t.Fatalf("changed: %q %d", got.HandleID, got.Offset)
					}
				}
			case *protocol.FsReadBlockResult:
				var fast, general protocol.FsReadBlockResult
				if !decodeReadBlockMsgpack(raw, &fast) || msgpack.Unmarshal(raw, &general) != nil {
					t.Fatal("a written block does not decode")
				}
				for _, got := range []protocol.FsReadBlockResult{fast, general} {
					if got.EOF != want.EOF || !bytes.Equal(got.Chunk, want.Chunk) {
						t.Fatal("changed")
					}
				}
			}
		}
	})
}
