package transport

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"testing"

	"github.com/outpost-exec/outpost/protocol"
)

// Seed corpora live in testdata/fuzz/<FuzzName>/.

// FuzzDecodeJSONMessage: decoding never panics, and whatever decodes
// survives a trip through JSONConn's writers unchanged.
func FuzzDecodeJSONMessage(f *testing.F) {
	f.Add([]byte(`{"id":1,"method":"initialize","params":{"clientName":"codex"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeJSONMessage(data)
		if err != nil {
			if m != nil {
				t.Fatalf("error %v with a message %+v", err, m)
			}
			return
		}
		switch m.Kind {
		case KindRequest, KindNotification:
			if m.Method == "" {
				t.Fatalf("%v with an empty method", m.Kind)
			}
		case KindResponse:
			if m.Method != "" {
				t.Fatalf("response with method %q", m.Method)
			}
			if m.Result == nil && m.Error == nil {
				t.Fatal("response with neither result nor error")
			}
		default:
			t.Fatalf("kind %v", m.Kind)
		}

		ctx := context.Background()
		frames := &memFrames{}
		c := NewJSONConn(frames)
		switch m.Kind {
		case KindRequest:
			err = c.WriteRequest(ctx, m.ID, m.Method, rawParams(m.Params))
		case KindNotification:
			err = c.WriteNotification(ctx, m.Method, rawParams(m.Params))
		case KindResponse:
			if m.Error != nil {
				err = c.WriteError(ctx, m.ID, m.Error)
			} else {
				err = c.WriteResult(ctx, m.ID, rawParams(m.Result))
			}
		}
		if err != nil {
			t.Fatalf("re-encoding %+v: %v", m, err)
		}
		out := frames.written()[0]
		m2, err := DecodeJSONMessage(out)
		if err != nil {
			t.Fatalf("re-encoded %q as %q, which does not decode: %v", data, out, err)
		}
		if m2.Kind != m.Kind || m2.ID != m.ID || m2.Method != m.Method {
			t.Fatalf("round trip changed the message:\n\tin  %q: %v %v %q\n\tout %q: %v %v %q", data, m.Kind, m.ID, m.Method, out, m2.Kind, m2.ID, m2.Method)
		}
		if m.Kind != KindResponse {
			if !sameJSON(t, m.Params, m2.Params) {
				t.Fatalf("round trip changed the params: %q -> %q", m.Params, m2.Params)
			}
		} else if m.Error != nil {
			if m2.Error == nil || m2.Error.Code != m.Error.Code || m2.Error.Message != m.Error.Message {
				t.Fatalf("round trip changed the error: %+v -> %+v", m.Error, m2.Error)
			}
		} else if !sameJSON(t, m.Result, m2.Result) {
			t.Fatalf("round trip changed the result: %q -> %q", m.Result, m2.Result)
		}
	})
}

// rawParams returns p as a value the writers encode verbatim, or nil when
// absent.
func rawParams(p Params) any {
	if p.Absent() {
		return nil
	}
	return json.RawMessage(p.(jsonParams))
}

// sameJSON reports whether a and b hold the same JSON (both absent counts).
func sameJSON(t *testing.T, a, b Params) bool {
	if a.Absent() || b.Absent() {
		return a.Absent() == b.Absent()
	}
	return reflect.DeepEqual(decodeAny(t, a.(jsonParams)), decodeAny(t, b.(jsonParams)))
}

// FuzzCheckJSON: CheckJSON never panics, never accepts what encoding/json
// refuses, and a larger value budget never turns acceptance into refusal.
func FuzzCheckJSON(f *testing.F) {
	f.Add([]byte(`{"a":[1,2,{"b":null}]}`), uint16(5))
	f.Fuzz(func(t *testing.T, data []byte, maxValues uint16) {
		err := CheckJSON(data, int(maxValues))
		if err != nil {
			return
		}
		if !json.Valid(data) {
			t.Fatalf("CheckJSON accepted %q, which encoding/json says is not JSON", data)
		}
		// Numbers stay json.Numbers: 1e400 is JSON, if not a float64.
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("CheckJSON accepted %q, which encoding/json cannot decode: %v", data, err)
		}
		if n := countValues(v); n > int(maxValues) {
			t.Fatalf("CheckJSON accepted %q with %d values over a budget of %d", data, n, maxValues)
		}
		if err := CheckJSON(data, int(maxValues)+1); err != nil {
			t.Fatalf("CheckJSON accepted %q with %d values but not with %d: %v", data, maxValues, maxValues+1, err)
		}
	})
}

// countValues counts the JSON values in v, as CheckJSON does: every
// scalar, object and array, but not object keys. Duplicate keys collapse
// in v, so this is a lower bound.
func countValues(v any) int {
	n := 1
	switch v := v.(type) {
	case map[string]any:
		for _, e := range v {
			n += countValues(e)
		}
	case []any:
		for _, e := range v {
			n += countValues(e)
		}
	}
	return n
}

// FuzzLineFrames: splitting any input into lines never panics, never
// returns a frame over the limit, and agrees with a plain bytes.Split
// model of the framing.
func FuzzLineFrames(f *testing.F) {
	f.Add([]byte("{}\r\n\n[]"), uint8(4), uint8(0))
	f.Fuzz(func(t *testing.T, data []byte, max uint8, readSize uint8) {
		limit := int(max) + 1
		var r io.Reader = bytes.NewReader(data)
		if readSize > 0 {
			r = &chunkReader{r: r, n: int(readSize)}
		}
		l := NewLineFrames(r, io.Discard, nil, limit)

		want := lineModel(data, limit)
		for i := 0; ; i++ {
			if i > len(data)+1 {
				t.Fatalf("more frames than input bytes for %q", data)
			}
			frame, err := l.ReadFrame(context.Background())
			if err != nil && !errors.Is(err, ErrMessageTooLarge) {
				if err != io.EOF {
					t.Fatalf("error %v", err)
				}
				if len(want) != 0 {
					t.Fatalf("EOF with %d frames still expected for %q (limit %d)", len(want), data, limit)
				}
				return
			}
			if len(frame) > limit {
				t.Fatalf("frame of %d bytes over the limit of %d", len(frame), limit)
			}
			if bytes.IndexByte(frame, '\n') >= 0 {
				t.Fatalf("frame %q holds a newline", frame)
			}
			if err == nil && len(trimSpace(frame)) == 0 {
				t.Fatalf("blank frame %q", frame)
			}
			if len(want) == 0 {
				t.Fatalf("unexpected frame %q, %v for %q (limit %d)", frame, err, data, limit)
			}
			w := want[0]
			want = want[1:]
			if w == nil {
				if !errors.Is(err, ErrMessageTooLarge) {
					t.Fatalf("got %q, %v; want ErrMessageTooLarge for %q (limit %d)", frame, err, data, limit)
				}
			} else if err != nil || !bytes.Equal(frame, w) {
				t.Fatalf("got %q, %v; want %q for %q (limit %d)", frame, err, w, data, limit)
			}
		}
	})
}

// lineModel is the framing LineFrames implements: lines end at '\n' (and
// a last line at EOF), one trailing '\r' is dropped, lines over limit are
// refused (nil) and blank lines skipped.
func lineModel(data []byte, limit int) [][]byte {
	lines := bytes.Split(data, []byte{'\n'})
	if len(lines[len(lines)-1]) == 0 {
		lines = lines[:len(lines)-1]
	}
	var out [][]byte
	for _, line := range lines {
		line = bytes.TrimSuffix(line, []byte{'\r'})
		switch {
		case len(line) > limit:
			out = append(out, nil)
		case len(trimSpace(line)) > 0:
			out = append(out, line)
		}
	}
	return out
}

// chunkReader returns at most n bytes per Read.
type chunkReader struct {
	r io.Reader
	n int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(p) > c.n {
		p = p[:c.n]
	}
	return c.r.Read(p)
}

// FuzzReadMessageAgreesWithDecodeJSONMessage: JSONConn.ReadMessage (with
// its process/output fast path) accepts exactly what DecodeJSONMessage
// accepts, and reads the same message from it.
func FuzzReadMessageAgreesWithDecodeJSONMessage(f *testing.F) {
	f.Add([]byte(`{"method":"process/output","params":{"processId":"p1","seq":3,"stream":"stdout","chunk":"aGk="}}`))
	f.Add([]byte(`{"method":"process/output","params":{"processId":"p1","seq":0,"stream":"pty","chunk":""}}`))
	f.Add([]byte(`{"method":"process/output","params":{"processId":"a\"b","seq":1,"stream":"stderr","chunk":"/w=="}}`))
	f.Add([]byte(`{"method":"process/output","params":{"processId":"p","seq":01,"stream":"stdout","chunk":"aGk="}}`))
	f.Add([]byte(`{"id":1,"method":"initialize","params":{"clientName":"c"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		want, werr := DecodeJSONMessage(data)
		c := NewJSONConn(&memFrames{in: [][]byte{append([]byte(nil), data...)}})
		got, gerr := c.ReadMessage(context.Background())
		if werr != nil {
			var me *MalformedError
			if !errors.As(gerr, &me) {
				t.Fatalf("DecodeJSONMessage refuses %q (%v) but ReadMessage returns %+v, %v", data, werr, got, gerr)
			}
			return
		}
		if gerr != nil {
			t.Fatalf("DecodeJSONMessage accepts %q but ReadMessage fails: %v", data, gerr)
		}
		if got.Kind != want.Kind || got.ID != want.ID || got.Method != want.Method {
			t.Fatalf("%q: ReadMessage %v %v %q, DecodeJSONMessage %v %v %q", data, got.Kind, got.ID, got.Method, want.Kind, want.ID, want.Method)
		}
		if want.Kind == KindResponse {
			return
		}
		if got.Params.Absent() != want.Params.Absent() {
			t.Fatalf("%q: params absent %v vs %v", data, got.Params.Absent(), want.Params.Absent())
		}
		var gv, wv any
		gerr, werr = got.Params.Decode(&gv), want.Params.Decode(&wv)
		if (gerr == nil) != (werr == nil) || !reflect.DeepEqual(gv, wv) {
			t.Fatalf("%q: params decode to %v (%v) vs %v (%v)", data, gv, gerr, wv, werr)
		}
		if want.Method == protocol.MethodProcessOutput {
			var gn, wn protocol.OutputNotification
			gerr, werr = got.Params.Decode(&gn), want.Params.Decode(&wn)
			if (gerr == nil) != (werr == nil) || !reflect.DeepEqual(gn, wn) {
				t.Fatalf("%q: output decodes to %+v (%v) vs %+v (%v)", data, gn, gerr, wn, werr)
			}
		}
	})
}
