package transport

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/outpost-exec/outpost/protocol"
)

// memFrames is an in-memory Frames: ReadFrame pops the frames queued in
// in (then io.EOF), WriteFrame records a copy of every frame written.
type memFrames struct {
	mu       sync.Mutex
	in       [][]byte
	readErr  error // returned instead of io.EOF once in is drained
	out      [][]byte
	writeErr error
	closed   bool
}

func (m *memFrames) ReadFrame(ctx context.Context) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.in) == 0 {
		if m.readErr != nil {
			return nil, m.readErr
		}
		return nil, io.EOF
	}
	f := m.in[0]
	m.in = m.in[1:]
	return f, nil
}

func (m *memFrames) WriteFrame(ctx context.Context, frame []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.writeErr != nil {
		return m.writeErr
	}
	// The caller reuses its buffer: keep a copy.
	m.out = append(m.out, append([]byte(nil), frame...))
	return nil
}

func (m *memFrames) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	return nil
}

func (m *memFrames) written() [][]byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([][]byte(nil), m.out...)
}

// lastFrame returns the only frame written so far.
func (m *memFrames) onlyFrame(t *testing.T) []byte {
	t.Helper()
	out := m.written()
	if len(out) != 1 {
		t.Fatalf("wrote %d frames, want 1: %q", len(out), out)
	}
	return out[0]
}

// decodeAny decodes b with numbers kept exact.
func decodeAny(t testing.TB, b []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode %q: %v", b, err)
	}
	if dec.More() {
		t.Fatalf("decode %q: trailing data", b)
	}
	return v
}

// --- CheckJSON ---------------------------------------------------------

func TestCheckJSONAcceptsWellFormedMessages(t *testing.T) {
	cases := []string{
		`{}`,
		`[]`,
		`1`,
		`"x"`,
		`null`,
		`true`,
		` {"id":1,"method":"initialize","params":{"clientName":"codex"}} `,
		"\n\t{\"a\":[1,2,{\"b\":null}],\"c\":{\"d\":{\"e\":\"f\"}}}\r\n",
		`{"a":1,"A":2}`,             // keys are case-sensitive
		`{"a":{"x":1},"b":{"x":1}}`, // same key in sibling objects
		`[{"x":1},{"x":2},{"x":3}]`, // same key in array elements
		`{"x":{"x":{"x":1}}}`,       // same key at different depths
		`{"":1,"\u0000":2}`,
		`{"big":123456789012345678901234567890,"f":-1.5e-300}`,
	}
	for _, c := range cases {
		if err := CheckJSON([]byte(c), protocol.MaxJSONValues); err != nil {
			t.Errorf("CheckJSON(%q) = %v, want nil", c, err)
		}
	}
}

func TestCheckJSONRejectsDuplicateKeys(t *testing.T) {
	cases := []string{
		`{"id":1,"id":2}`,
		`{"method":"a","params":{},"method":"b"}`,
		`{"params":{"processId":"a","processId":"b"}}`,
		`{"a":{"b":{"c":1,"c":1}}}`,
		`[{"x":1},{"x":1,"x":2}]`,
		`{"list":[{"ok":1},{"dup":1,"dup":2}]}`,
		`{"a":1,"\u0061":2}`, // the same key, spelt differently
		`{"a":[],"a":{}}`,
		`{"a":{"k":1},"b":1,"b":2}`, // after a nested object closes
	}
	for _, c := range cases {
		err := CheckJSON([]byte(c), protocol.MaxJSONValues)
		if err == nil || !strings.Contains(err.Error(), "duplicate key") {
			t.Errorf("CheckJSON(%q) = %v, want a duplicate key error", c, err)
		}
	}
}

func TestCheckJSONEnforcesMaxValues(t *testing.T) {
	cases := []struct {
		in     string
		values int // JSON values in the input; keys do not count
	}{
		{`1`, 1},
		{`{}`, 1},
		{`{"a":1}`, 2},
		{`[1,2,3]`, 4},
		{`{"a":[1,{"b":null}]}`, 5},
		{`[[[[]]]]`, 4},
	}
	for _, c := range cases {
		if err := CheckJSON([]byte(c.in), c.values); err != nil {
			t.Errorf("CheckJSON(%q, %d) = %v, want nil", c.in, c.values, err)
		}
		err := CheckJSON([]byte(c.in), c.values-1)
		if err == nil || !strings.Contains(err.Error(), "more than") {
			t.Errorf("CheckJSON(%q, %d) = %v, want a too many values error", c.in, c.values-1, err)
		}
	}
}

func TestCheckJSONRejectsTrailingData(t *testing.T) {
	cases := []string{
		`{} {}`,
		`{}{}`,
		`1 2`,
		`[] 1`,
		`"a""b"`,
		`{"a":1} null`,
	}
	for _, c := range cases {
		if err := CheckJSON([]byte(c), protocol.MaxJSONValues); err == nil {
			t.Errorf("CheckJSON(%q) = nil, want an error", c)
		}
	}
}

func TestCheckJSONRejectsEmptyInput(t *testing.T) {
	for _, c := range []string{"", " ", "\n\r\t "} {
		if err := CheckJSON([]byte(c), protocol.MaxJSONValues); err == nil {
			t.Errorf("CheckJSON(%q) = nil, want an error", c)
		}
	}
}

func TestCheckJSONRejectsInvalidJSON(t *testing.T) {
	cases := []string{
		`{`,
		`[`,
		`[1,`,
		`{"a"`,
		`{"a":`,
		`{"a":1`,
		`{"a":1,`,
		`[[[]]`,
		`}`,
		`]`,
		`{]`,
		`{} ]`,
		`{"a" 1}`,
		`{1:2}`,
		`{"a":1,}`,
		`[1,]`,
		`[,1]`,
		`tru`,
		`nul`,
		`"abc`,
		`'a'`,
		`{"a":01}`,
		`{"a":NaN}`,
		`{a:1}`,
		"\"\x01\"",
	}
	for _, c := range cases {
		if err := CheckJSON([]byte(c), protocol.MaxJSONValues); err == nil {
			t.Errorf("CheckJSON(%q) = nil, want an error", c)
		}
		if json.Valid([]byte(c)) {
			t.Fatalf("test case %q is valid JSON", c)
		}
	}
}

func TestCheckJSONAcceptsDeeplyNestedValidInput(t *testing.T) {
	const depth = 5000
	cases := []string{
		strings.Repeat("[", depth) + strings.Repeat("]", depth),
		strings.Repeat(`{"a":`, depth) + "1" + strings.Repeat("}", depth),
		strings.Repeat(`[{"a":`, depth/2) + "1" + strings.Repeat("}]", depth/2),
	}
	for _, c := range cases {
		if err := CheckJSON([]byte(c), protocol.MaxJSONValues); err != nil {
			t.Errorf("CheckJSON(depth %d) = %v, want nil", depth, err)
		}
	}
}

// encoding/json refuses nesting deeper than 10000; CheckJSON must not
// accept what the decoder behind it will refuse.
func TestCheckJSONAgreesWithEncodingJSONOnNestingLimit(t *testing.T) {
	for _, depth := range []int{10000, 10001, 100000} {
		in := []byte(strings.Repeat("[", depth) + strings.Repeat("]", depth))
		err := CheckJSON(in, 1<<20)
		if valid := json.Valid(in); valid != (err == nil) {
			t.Errorf("depth %d: json.Valid = %v but CheckJSON = %v", depth, valid, err)
		}
	}
}

// --- DecodeJSONMessage --------------------------------------------------

func TestDecodeJSONMessageClassifiesMessages(t *testing.T) {
	cases := []struct {
		name   string
		in     string
		kind   Kind
		id     ID
		method string
		errMsg string // for responses with an error
	}{
		{"request with int id", `{"id":1,"method":"initialize","params":{"clientName":"c"}}`, KindRequest, IntID(1), "initialize", ""},
		{"request with negative id", `{"id":-7,"method":"process/start"}`, KindRequest, IntID(-7), "process/start", ""},
		{"request with zero id", `{"id":0,"method":"x"}`, KindRequest, IntID(0), "x", ""},
		{"request with max int64 id", `{"id":9223372036854775807,"method":"x"}`, KindRequest, IntID(1<<63 - 1), "x", ""},
		{"request with string id", `{"id":"abc","method":"process/read"}`, KindRequest, ID{Str: "abc", IsStr: true}, "process/read", ""},
		{"request with empty string id", `{"id":"","method":"x"}`, KindRequest, ID{IsStr: true}, "x", ""},
		{"request with numeric string id", `{"id":"12","method":"x"}`, KindRequest, ID{Str: "12", IsStr: true}, "x", ""},
		{"notification", `{"method":"initialized"}`, KindNotification, ID{}, "initialized", ""},
		{"notification with params", `{"method":"process/output","params":{"seq":1}}`, KindNotification, ID{}, "process/output", ""},
		{"null id is absent", `{"id":null,"method":"initialized"}`, KindNotification, ID{}, "initialized", ""},
		{"response with result", `{"id":3,"result":{"ok":true}}`, KindResponse, IntID(3), "", ""},
		{"response with null result", `{"id":3,"result":null}`, KindResponse, IntID(3), "", ""},
		{"response with string id", `{"id":"r","result":[]}`, KindResponse, ID{Str: "r", IsStr: true}, "", ""},
		{"response with error", `{"id":4,"error":{"code":-32600,"message":"bad"}}`, KindResponse, IntID(4), "", "bad"},
		{"jsonrpc member accepted", `{"jsonrpc":"2.0","id":5,"method":"x"}`, KindRequest, IntID(5), "x", ""},
		{"jsonrpc member accepted on notification", `{"jsonrpc":"2.0","method":"x"}`, KindNotification, ID{}, "x", ""},
		{"jsonrpc member accepted on response", `{"jsonrpc":"2.0","id":5,"result":1}`, KindResponse, IntID(5), "", ""},
		{"unknown members ignored", `{"id":1,"method":"x","extra":[1,2]}`, KindRequest, IntID(1), "x", ""},
		{"surrounding whitespace", " \r\n{\"id\":1,\"method\":\"x\"}\r\n", KindRequest, IntID(1), "x", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := DecodeJSONMessage([]byte(c.in))
			if err != nil {
				t.Fatalf("DecodeJSONMessage(%s) = %v", c.in, err)
			}
			if m.Kind != c.kind {
				t.Errorf("kind = %v, want %v", m.Kind, c.kind)
			}
			if m.ID != c.id {
				t.Errorf("id = %#v, want %#v", m.ID, c.id)
			}
			if m.Method != c.method {
				t.Errorf("method = %q, want %q", m.Method, c.method)
			}
			switch {
			case c.errMsg != "":
				if m.Error == nil || m.Error.Message != c.errMsg {
					t.Errorf("error = %#v, want message %q", m.Error, c.errMsg)
				}
			case c.kind == KindResponse:
				if m.Error != nil {
					t.Errorf("error = %#v, want nil", m.Error)
				}
				if m.Result == nil {
					t.Errorf("result is nil")
				}
			case c.kind != KindResponse:
				if m.Params == nil {
					t.Errorf("params is nil on a %v", m.Kind)
				}
			}
		})
	}
}

func TestDecodeJSONMessageRejectsMalformedMessages(t *testing.T) {
	cases := []struct {
		name string
		in   string
	}{
		{"float id", `{"id":1.5,"method":"x"}`},
		{"integral float id", `{"id":1.0,"method":"x"}`},
		{"exponent id", `{"id":1e3,"method":"x"}`},
		{"id over int64", `{"id":9223372036854775808,"method":"x"}`},
		{"boolean id", `{"id":true,"method":"x"}`},
		{"object id", `{"id":{},"method":"x"}`},
		{"array id", `{"id":[1],"method":"x"}`},
		{"empty method", `{"id":1,"method":""}`},
		{"empty method notification", `{"method":""}`},
		{"method not a string", `{"id":1,"method":7}`},
		{"id only", `{"id":1}`},
		{"empty object", `{}`},
		{"null id and result", `{"id":null,"result":{}}`},
		{"result without id", `{"result":{}}`},
		{"error without id", `{"error":{"code":1,"message":"m"}}`},
		{"null error", `{"id":1,"error":null}`},
		{"error not an object", `{"id":1,"error":"boom"}`},
		{"jsonrpc only", `{"jsonrpc":"2.0"}`},
		{"array", `[{"id":1,"method":"x"}]`},
		{"number", `1`},
		{"null", `null`},
		{"string", `"x"`},
		{"empty", ``},
		{"truncated", `{"id":1,"method":"x"`},
		{"trailing message", `{"id":1,"method":"x"} {"id":2,"method":"y"}`},
		{"duplicate id", `{"id":1,"id":2,"method":"x"}`},
		{"duplicate method", `{"id":1,"method":"a","method":"b"}`},
		{"duplicate nested key", `{"id":1,"method":"x","params":{"a":1,"a":2}}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if m, err := DecodeJSONMessage([]byte(c.in)); err == nil {
				t.Fatalf("DecodeJSONMessage(%s) = %+v, want an error", c.in, m)
			}
		})
	}
}

// encoding/json matches struct fields case-insensitively; a peer decoding
// with serde does not. Member names must match exactly, or a message could
// say one thing to outpost and another to a proxy in front of it.
func TestDecodeJSONMessageMatchesMemberNamesExactly(t *testing.T) {
	cases := []struct {
		name   string
		in     string
		kind   Kind
		id     ID
		method string
	}{
		{"Method is not method", `{"id":1,"method":"a","Method":"b"}`, KindRequest, IntID(1), "a"},
		{"ID is not id", `{"id":1,"ID":2,"method":"a"}`, KindRequest, IntID(1), "a"},
		{"only ID makes a notification", `{"ID":1,"method":"a"}`, KindNotification, ID{}, "a"},
		{"Params is not params", `{"method":"a","Params":{"x":1}}`, KindNotification, ID{}, "a"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := DecodeJSONMessage([]byte(c.in))
			if err != nil {
				t.Fatalf("DecodeJSONMessage(%s) = %v", c.in, err)
			}
			if m.Kind != c.kind || m.ID != c.id || m.Method != c.method {
				t.Fatalf("got kind %v id %v method %q, want kind %v id %v method %q", m.Kind, m.ID, m.Method, c.kind, c.id, c.method)
			}
			if c.name == "Params is not params" && !m.Params.Absent() {
				t.Fatalf("params = %q, want absent", m.Params)
			}
		})
	}
	for _, in := range []string{
		`{"Id":1,"Result":{}}`,
		`{"id":1,"Result":{}}`,
		`{"id":1,"ERROR":{"code":1,"message":"m"}}`,
		`{"METHOD":"a"}`,
	} {
		if m, err := DecodeJSONMessage([]byte(in)); err == nil {
			t.Errorf("DecodeJSONMessage(%s) = %+v, want an error", in, m)
		}
	}
}

func TestDecodeJSONMessageKeepsResponseErrorDetails(t *testing.T) {
	m, err := DecodeJSONMessage([]byte(`{"id":9,"error":{"code":-32010,"message":"attached","data":{"sessionId":"s"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := &protocol.Error{Code: protocol.CodeSessionAlreadyAttached, Message: "attached", Data: map[string]any{"sessionId": "s"}}
	if !reflect.DeepEqual(m.Error, want) {
		t.Fatalf("error = %#v, want %#v", m.Error, want)
	}
}

func TestParamsAbsentAndDecode(t *testing.T) {
	type target struct {
		A int    `json:"a"`
		B string `json:"b"`
	}
	cases := []struct {
		name   string
		in     string
		absent bool
		want   target
	}{
		{"omitted params", `{"id":1,"method":"x"}`, true, target{A: 7, B: "keep"}},
		{"null params", `{"id":1,"method":"x","params":null}`, true, target{A: 7, B: "keep"}},
		{"empty params", `{"id":1,"method":"x","params":{}}`, false, target{A: 7, B: "keep"}},
		{"some params", `{"id":1,"method":"x","params":{"a":2}}`, false, target{A: 2, B: "keep"}},
		{"all params", `{"method":"x","params":{"a":3,"b":"c"}}`, false, target{A: 3, B: "c"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := DecodeJSONMessage([]byte(c.in))
			if err != nil {
				t.Fatal(err)
			}
			if got := m.Params.Absent(); got != c.absent {
				t.Errorf("Absent() = %v, want %v", got, c.absent)
			}
			got := target{A: 7, B: "keep"}
			if err := m.Params.Decode(&got); err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if got != c.want {
				t.Errorf("Decode = %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestParamsDecodeOfNullLeavesMapUntouched(t *testing.T) {
	m, err := DecodeJSONMessage([]byte(`{"method":"x","params":null}`))
	if err != nil {
		t.Fatal(err)
	}
	v := map[string]int{"a": 1}
	if err := m.Params.Decode(&v); err != nil {
		t.Fatal(err)
	}
	if v == nil || v["a"] != 1 {
		t.Fatalf("Decode(null) changed the target: %v", v)
	}
}

func TestParamsDecodeReportsTypeMismatch(t *testing.T) {
	m, err := DecodeJSONMessage([]byte(`{"id":1,"method":"x","params":{"a":"not a number"}}`))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		A int `json:"a"`
	}
	if err := m.Params.Decode(&v); err == nil {
		t.Fatal("Decode of a string into an int succeeded")
	}
}

func TestResponseResultAbsentForNull(t *testing.T) {
	for in, absent := range map[string]bool{
		`{"id":1,"result":null}`:    true,
		`{"id":1,"result":{}}`:      false,
		`{"id":1,"result":0}`:       false,
		`{"id":1,"result":"x"}`:     false,
		`{"id":1,"result":[null]}`:  false,
		`{"id":1,"result":false}`:   false,
		`{"id":1,"result" : null }`: true,
	} {
		m, err := DecodeJSONMessage([]byte(in))
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		if m.Result.Absent() != absent {
			t.Errorf("%s: Result.Absent() = %v, want %v", in, m.Result.Absent(), absent)
		}
	}
}

// --- ID ------------------------------------------------------------------

func TestIDJSONRoundTrip(t *testing.T) {
	ids := []ID{
		IntID(0),
		IntID(1),
		IntID(-1),
		IntID(1<<63 - 1),
		IntID(-1 << 63),
		{IsStr: true},
		{Str: "abc", IsStr: true},
		{Str: "42", IsStr: true},
		{Str: "a\"b\\c\u2028\u2029<>&\x00\x1f", IsStr: true},
		{Str: "ünïcødé 🚀", IsStr: true},
	}
	for _, id := range ids {
		b, err := id.MarshalJSON()
		if err != nil {
			t.Fatalf("%v: MarshalJSON: %v", id, err)
		}
		if !json.Valid(b) {
			t.Fatalf("%v: MarshalJSON = %q, not JSON", id, b)
		}
		var got ID
		if err := got.UnmarshalJSON(b); err != nil {
			t.Fatalf("%v: UnmarshalJSON(%q): %v", id, b, err)
		}
		if got != id {
			t.Errorf("round trip of %#v gave %#v (via %q)", id, got, b)
		}

		// The same through encoding/json, as a field.
		type wrap struct {
			ID ID `json:"id"`
		}
		wb, err := json.Marshal(wrap{id})
		if err != nil {
			t.Fatal(err)
		}
		var w wrap
		if err := json.Unmarshal(wb, &w); err != nil {
			t.Fatalf("%v: json.Unmarshal(%q): %v", id, wb, err)
		}
		if w.ID != id {
			t.Errorf("encoding/json round trip of %#v gave %#v (via %q)", id, w.ID, wb)
		}
	}
}

func TestIDMarshalsIntsAsNumbersAndStringsAsStrings(t *testing.T) {
	cases := []struct {
		id   ID
		json string
		str  string
	}{
		{IntID(12), `12`, `12`},
		{IntID(-1), `-1`, `-1`},
		{ID{Str: "12", IsStr: true}, `"12"`, `"12"`},
		{ID{Str: `a"b`, IsStr: true}, `"a\"b"`, `"a\"b"`},
	}
	for _, c := range cases {
		b, _ := c.id.MarshalJSON()
		if string(b) != c.json {
			t.Errorf("%#v.MarshalJSON() = %s, want %s", c.id, b, c.json)
		}
		if c.id.String() != c.str {
			t.Errorf("%#v.String() = %s, want %s", c.id, c.id.String(), c.str)
		}
	}
}

func TestIDUnmarshalRejectsNonIntegers(t *testing.T) {
	for _, in := range []string{`1.5`, `1.0`, `1e2`, `-0.0`, `true`, `null`, `{}`, `[]`, `9223372036854775808`, `-9223372036854775809`, ``, `"unterminated`} {
		var id ID
		if err := id.UnmarshalJSON([]byte(in)); err == nil {
			t.Errorf("UnmarshalJSON(%q) = nil, want an error (got %#v)", in, id)
		}
	}
}

func TestMalformedIDIsMinusOne(t *testing.T) {
	if b, _ := MalformedID.MarshalJSON(); string(b) != "-1" {
		t.Fatalf("MalformedID = %s, want -1", b)
	}
}

// --- JSONConn writes -----------------------------------------------------

func TestJSONConnWritesExactBytes(t *testing.T) {
	ctx := context.Background()
	strID := ID{Str: `r"1`, IsStr: true}
	cases := []struct {
		name  string
		write func(c *JSONConn) error
		want  string
	}{
		{"result", func(c *JSONConn) error {
			return c.WriteResult(ctx, IntID(7), map[string]any{"ok": true})
		}, `{"id":7,"result":{"ok":true}}`},
		{"result with string id", func(c *JSONConn) error {
			return c.WriteResult(ctx, strID, []int{1, 2})
		}, `{"id":"r\"1","result":[1,2]}`},
		{"nil result", func(c *JSONConn) error {
			return c.WriteResult(ctx, IntID(1), nil)
		}, `{"id":1,"result":null}`},
		{"empty struct result", func(c *JSONConn) error {
			return c.WriteResult(ctx, IntID(1), struct{}{})
		}, `{"id":1,"result":{}}`},
		{"result without HTML escaping", func(c *JSONConn) error {
			return c.WriteResult(ctx, IntID(1), "<a&b>")
		}, `{"id":1,"result":"<a&b>"}`},
		{"raw result", func(c *JSONConn) error {
			return c.WriteResult(ctx, IntID(1), json.RawMessage(` { "a" : 1 } `))
		}, `{"id":1,"result":{"a":1}}`},
		{"error", func(c *JSONConn) error {
			return c.WriteError(ctx, IntID(-1), protocol.Errorf(protocol.CodeInvalidRequest, "bad %s", "thing"))
		}, `{"id":-1,"error":{"code":-32600,"message":"bad thing"}}`},
		{"error with data and string id", func(c *JSONConn) error {
			return c.WriteError(ctx, strID, &protocol.Error{Code: protocol.CodeNotFound, Message: "nope", Data: map[string]string{"path": "/x"}})
		}, `{"id":"r\"1","error":{"code":-32004,"message":"nope","data":{"path":"/x"}}}`},
		{"request", func(c *JSONConn) error {
			return c.WriteRequest(ctx, IntID(1), protocol.MethodInitialize, map[string]string{"clientName": "c"})
		}, `{"id":1,"method":"initialize","params":{"clientName":"c"}}`},
		{"request without params", func(c *JSONConn) error {
			return c.WriteRequest(ctx, ID{Str: "x", IsStr: true}, "environment/info", nil)
		}, `{"id":"x","method":"environment/info"}`},
		{"notification", func(c *JSONConn) error {
			return c.WriteNotification(ctx, protocol.MethodProcessExited, &protocol.ExitedNotification{ProcessID: "p", Seq: 2, ExitCode: 130})
		}, `{"method":"process/exited","params":{"processId":"p","seq":2,"exitCode":130}}`},
		{"notification without params", func(c *JSONConn) error {
			return c.WriteNotification(ctx, protocol.MethodInitialized, nil)
		}, `{"method":"initialized"}`},
		{"output notification", func(c *JSONConn) error {
			return c.WriteNotification(ctx, protocol.MethodProcessOutput, &protocol.OutputNotification{ProcessID: "p1", Seq: 3, Stream: protocol.StreamStdout, Chunk: []byte("hi")})
		}, `{"method":"process/output","params":{"processId":"p1","seq":3,"stream":"stdout","chunk":"aGk="}}`},
		{"output notification by value", func(c *JSONConn) error {
			return c.WriteNotification(ctx, protocol.MethodProcessOutput, protocol.OutputNotification{ProcessID: "p1", Seq: 3, Stream: protocol.StreamStderr, Chunk: []byte("hi")})
		}, `{"method":"process/output","params":{"processId":"p1","seq":3,"stream":"stderr","chunk":"aGk="}}`},
		{"output params under another method", func(c *JSONConn) error {
			return c.WriteNotification(ctx, "x/output", &protocol.OutputNotification{ProcessID: "p", Stream: protocol.StreamPty, Chunk: []byte{0xff}})
		}, `{"method":"x/output","params":{"processId":"p","seq":0,"stream":"pty","chunk":"/w=="}}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := &memFrames{}
			if err := c.write(NewJSONConn(f)); err != nil {
				t.Fatal(err)
			}
			got := f.onlyFrame(t)
			if string(got) != c.want {
				t.Fatalf("wrote\n\t%s\nwant\n\t%s", got, c.want)
			}
			if _, err := DecodeJSONMessage(got); err != nil {
				t.Fatalf("written frame does not decode: %v", err)
			}
		})
	}
}

// Method names are not guaranteed to be printable ASCII; whatever the
// name, the frame must be JSON and carry the name unchanged.
func TestJSONConnWritesMethodNamesAsJSONStrings(t *testing.T) {
	ctx := context.Background()
	methods := []string{
		"plain",
		`quote"and\backslash`,
		"bell\a vtab\v nul\x00 del\x7f",
		"line\u2028sep\u2029",
		"tag\U000e0001 private\U000f0000",
		"soft\u00adhyphen",
		"<html>&",
		"ünïcødé",
	}
	for _, method := range methods {
		for _, kind := range []Kind{KindRequest, KindNotification} {
			f := &memFrames{}
			c := NewJSONConn(f)
			var err error
			if kind == KindRequest {
				err = c.WriteRequest(ctx, IntID(1), method, nil)
			} else {
				err = c.WriteNotification(ctx, method, nil)
			}
			if err != nil {
				t.Fatalf("%q: %v", method, err)
			}
			frame := f.onlyFrame(t)
			m, err := DecodeJSONMessage(frame)
			if err != nil {
				t.Fatalf("%v %q: wrote %q, which does not decode: %v", kind, method, frame, err)
			}
			if m.Kind != kind || m.Method != method {
				t.Fatalf("%v %q: decoded %v %q", kind, method, m.Kind, m.Method)
			}
		}
	}
}

func TestJSONConnHandEncodedOutputMatchesEncodingJSON(t *testing.T) {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	big := bytes.Repeat([]byte("0123456789abcdef\x00\xff"), 1<<16)
	cases := []protocol.OutputNotification{
		{ProcessID: "p1", Seq: 1, Stream: protocol.StreamStdout, Chunk: []byte("hello\n")},
		{ProcessID: "p1", Seq: 0, Stream: protocol.StreamStderr, Chunk: []byte{}},
		{ProcessID: "", Seq: 1<<64 - 1, Stream: protocol.StreamPty, Chunk: all},
		{ProcessID: "a\"b\u2028", Seq: 9, Stream: protocol.StreamStdout, Chunk: []byte{0}},
		{ProcessID: "<script>&\\\x00\x1f\u2029", Seq: 10, Stream: protocol.StreamStdout, Chunk: []byte("x")},
		{ProcessID: "ünï🚀", Seq: 11, Stream: protocol.StreamStderr, Chunk: []byte{1, 2}},
		{ProcessID: "p", Seq: 12, Stream: protocol.StreamStdout, Chunk: []byte{1, 2, 3}},
		{ProcessID: "p", Seq: 13, Stream: protocol.StreamStdout, Chunk: big},
	}
	type envelope struct {
		Method string                       `json:"method"`
		Params *protocol.OutputNotification `json:"params"`
	}
	f := &memFrames{}
	c := NewJSONConn(f)
	for i := range cases {
		n := &cases[i]
		if err := c.WriteNotification(context.Background(), protocol.MethodProcessOutput, n); err != nil {
			t.Fatal(err)
		}
		frames := f.written()
		hand := frames[len(frames)-1]

		want, err := json.Marshal(envelope{Method: protocol.MethodProcessOutput, Params: n})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := decodeAny(t, hand), decodeAny(t, want); !reflect.DeepEqual(got, want) {
			t.Fatalf("case %d: hand encoding decodes to\n\t%v\nencoding/json to\n\t%v", i, trunc(got), trunc(want))
		}

		// And back into the struct, through the package's own decoder.
		m, err := DecodeJSONMessage(hand)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if m.Kind != KindNotification || m.Method != protocol.MethodProcessOutput {
			t.Fatalf("case %d: decoded %v %q", i, m.Kind, m.Method)
		}
		var got protocol.OutputNotification
		if err := m.Params.Decode(&got); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(&got, n) {
			t.Fatalf("case %d: decoded %v, want %v", i, trunc(got), trunc(*n))
		}
	}
}

// json.Marshal writes a nil []byte as null; a codex peer wants a base64
// string, and the hand encoder writes "".
func TestJSONConnOutputWithNilChunkWritesEmptyString(t *testing.T) {
	f := &memFrames{}
	n := &protocol.OutputNotification{ProcessID: "p", Seq: 1, Stream: protocol.StreamStdout}
	if err := NewJSONConn(f).WriteNotification(context.Background(), protocol.MethodProcessOutput, n); err != nil {
		t.Fatal(err)
	}
	want := `{"method":"process/output","params":{"processId":"p","seq":1,"stream":"stdout","chunk":""}}`
	if got := f.onlyFrame(t); string(got) != want {
		t.Fatalf("wrote %s, want %s", got, want)
	}
}

// The frame buffer is reused between writes: a short message after a long
// one must not carry any of the long one's bytes.
func TestJSONConnReusedBufferDoesNotLeakPreviousFrame(t *testing.T) {
	ctx := context.Background()
	f := &memFrames{}
	c := NewJSONConn(f)
	long := &protocol.OutputNotification{ProcessID: "p", Seq: 1, Stream: protocol.StreamStdout, Chunk: bytes.Repeat([]byte("z"), 100000)}
	if err := c.WriteNotification(ctx, protocol.MethodProcessOutput, long); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteResult(ctx, IntID(2), 1); err != nil {
		t.Fatal(err)
	}
	short := &protocol.OutputNotification{ProcessID: "p", Seq: 2, Stream: protocol.StreamStdout, Chunk: []byte("a")}
	if err := c.WriteNotification(ctx, protocol.MethodProcessOutput, short); err != nil {
		t.Fatal(err)
	}
	out := f.written()
	if string(out[1]) != `{"id":2,"result":1}` {
		t.Fatalf("second frame = %q", out[1])
	}
	if want := `{"method":"process/output","params":{"processId":"p","seq":2,"stream":"stdout","chunk":"YQ=="}}`; string(out[2]) != want {
		t.Fatalf("third frame = %q, want %q", out[2], want)
	}
}

func TestJSONConnRefusesOutboundMessagesOverTheLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("encodes several 64 MiB messages")
	}
	ctx := context.Background()
	// {"id":1,"result":"…"} is 20 bytes around the string.
	big := strings.Repeat("x", protocol.MaxMessageBytes-19)
	f := &memFrames{}
	c := NewJSONConn(f)
	if err := c.WriteResult(ctx, IntID(1), big[:len(big)-1]); err != nil {
		t.Fatalf("message of exactly MaxMessageBytes refused: %v", err)
	}
	if n := len(f.onlyFrame(t)); n != protocol.MaxMessageBytes {
		t.Fatalf("frame is %d bytes, want %d", n, protocol.MaxMessageBytes)
	}
	f.out = nil

	over := []struct {
		name  string
		write func() error
	}{
		{"result", func() error { return c.WriteResult(ctx, IntID(1), big) }},
		{"error", func() error { return c.WriteError(ctx, IntID(1), &protocol.Error{Code: 1, Message: big}) }},
		{"request", func() error { return c.WriteRequest(ctx, IntID(1), "x", big) }},
		{"notification", func() error { return c.WriteNotification(ctx, "x", big) }},
		{"output notification", func() error {
			return c.WriteNotification(ctx, protocol.MethodProcessOutput, &protocol.OutputNotification{
				ProcessID: "p", Stream: protocol.StreamStdout, Chunk: make([]byte, protocol.MaxMessageBytes/4*3),
			})
		}},
	}
	for _, o := range over {
		err := o.write()
		if !errors.Is(err, ErrMessageTooLarge) {
			t.Errorf("%s over the limit: err = %v, want ErrMessageTooLarge", o.name, err)
		}
	}
	if out := f.written(); len(out) != 0 {
		t.Fatalf("%d frames over the limit written", len(out))
	}
	// The connection is still usable.
	if err := c.WriteResult(ctx, IntID(2), 1); err != nil {
		t.Fatal(err)
	}
	if got := f.onlyFrame(t); string(got) != `{"id":2,"result":1}` {
		t.Fatalf("wrote %s", got)
	}
}

func TestJSONConnUnencodableValueWritesNothing(t *testing.T) {
	ctx := context.Background()
	f := &memFrames{}
	c := NewJSONConn(f)
	if err := c.WriteResult(ctx, IntID(1), make(chan int)); err == nil {
		t.Error("WriteResult(chan) succeeded")
	}
	if err := c.WriteRequest(ctx, IntID(1), "x", func() {}); err == nil {
		t.Error("WriteRequest(func) succeeded")
	}
	if err := c.WriteNotification(ctx, "x", map[bool]int{true: 1}); err == nil {
		t.Error("WriteNotification(map[bool]int) succeeded")
	}
	if err := c.WriteError(ctx, IntID(1), &protocol.Error{Code: 1, Message: "m", Data: make(chan int)}); err == nil {
		t.Error("WriteError(chan data) succeeded")
	}
	if out := f.written(); len(out) != 0 {
		t.Fatalf("wrote %q", out)
	}
	// The connection is still usable.
	if err := c.WriteResult(ctx, IntID(2), true); err != nil {
		t.Fatal(err)
	}
	if got := f.onlyFrame(t); string(got) != `{"id":2,"result":true}` {
		t.Fatalf("wrote %s", got)
	}
}

func TestJSONConnWriteErrorsArePassedThrough(t *testing.T) {
	boom := errors.New("boom")
	c := NewJSONConn(&memFrames{writeErr: boom})
	if err := c.WriteResult(context.Background(), IntID(1), 1); !errors.Is(err, boom) {
		t.Fatalf("err = %v, want %v", err, boom)
	}
}

func TestJSONConnConcurrentWritesDoNotInterleave(t *testing.T) {
	ctx := context.Background()
	f := &memFrames{}
	c := NewJSONConn(f)
	const writers, each = 8, 50
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				n := &protocol.OutputNotification{ProcessID: fmt.Sprint(w), Seq: uint64(i), Stream: protocol.StreamStdout, Chunk: bytes.Repeat([]byte{byte(w)}, 100*w)}
				if err := c.WriteNotification(ctx, protocol.MethodProcessOutput, n); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	out := f.written()
	if len(out) != writers*each {
		t.Fatalf("%d frames, want %d", len(out), writers*each)
	}
	for _, frame := range out {
		m, err := DecodeJSONMessage(frame)
		if err != nil {
			t.Fatalf("frame %q: %v", frame, err)
		}
		var n protocol.OutputNotification
		if err := m.Params.Decode(&n); err != nil {
			t.Fatal(err)
		}
		var w int
		fmt.Sscan(n.ProcessID, &w)
		if !bytes.Equal(n.Chunk, bytes.Repeat([]byte{byte(w)}, 100*w)) {
			t.Fatalf("writer %d: chunk corrupted", w)
		}
	}
}

// --- JSONConn reads ------------------------------------------------------

func TestJSONConnReadMessageReportsMalformedFramesAndStaysUsable(t *testing.T) {
	f := &memFrames{in: [][]byte{
		[]byte(`{"id":1,"method":"initialize"}`),
		[]byte(`{not json`),
		[]byte(`{"id":1.5,"method":"x"}`),
		[]byte(`{"method":"initialized"}`),
	}}
	c := NewJSONConn(f)
	ctx := context.Background()
	m, err := c.ReadMessage(ctx)
	if err != nil || m.Kind != KindRequest || m.Method != "initialize" {
		t.Fatalf("first message: %+v, %v", m, err)
	}
	for i := 0; i < 2; i++ {
		_, err = c.ReadMessage(ctx)
		var me *MalformedError
		if !errors.As(err, &me) {
			t.Fatalf("malformed frame %d: err = %v, want *MalformedError", i, err)
		}
		if !strings.HasPrefix(err.Error(), "failed to parse JSON-RPC message: ") {
			t.Fatalf("err = %q", err)
		}
	}
	m, err = c.ReadMessage(ctx)
	if err != nil || m.Kind != KindNotification || m.Method != "initialized" {
		t.Fatalf("message after the malformed ones: %+v, %v", m, err)
	}
	if _, err := c.ReadMessage(ctx); err != io.EOF {
		t.Fatalf("at the end: err = %v, want io.EOF", err)
	}
}

func TestJSONConnReadMessageTurnsOversizeFrameIntoMalformedError(t *testing.T) {
	c := NewJSONConn(&memFrames{readErr: ErrMessageTooLarge})
	_, err := c.ReadMessage(context.Background())
	var me *MalformedError
	if !errors.As(err, &me) || !errors.Is(err, ErrMessageTooLarge) {
		t.Fatalf("err = %v, want a *MalformedError wrapping ErrMessageTooLarge", err)
	}
}

func TestJSONConnReadMessagePassesTransportErrorsThrough(t *testing.T) {
	boom := errors.New("boom")
	c := NewJSONConn(&memFrames{readErr: boom})
	_, err := c.ReadMessage(context.Background())
	var me *MalformedError
	if !errors.Is(err, boom) || errors.As(err, &me) {
		t.Fatalf("err = %v, want %v unwrapped", err, boom)
	}
}

func TestJSONConnCloseClosesFrames(t *testing.T) {
	f := &memFrames{}
	if err := NewJSONConn(f).Close(); err != nil {
		t.Fatal(err)
	}
	if !f.closed {
		t.Fatal("frames not closed")
	}
}

// trunc shortens a value's printed form for failure messages.
func trunc(v any) string {
	s := fmt.Sprint(v)
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

var _ MessageConn = (*JSONConn)(nil)
