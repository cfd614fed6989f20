package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// An error's kind travels as data.kind and comes back through KindOf,
// wrapped or not; the code and message are untouched.
func TestKindTravelsInDataAndReadsBack(t *testing.T) {
	for _, k := range Kinds {
		e := KindErrorf(k, CodeInvalidRequest, "no %s", "way")
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf(`{"code":-32600,"message":"no way","data":{"kind":"%s"}}`, k); string(b) != want {
			t.Fatalf("%s:\n got %s\nwant %s", k, b, want)
		}
		var back Error
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if back.Kind() != k || back.Code != CodeInvalidRequest || back.Message != "no way" {
			t.Fatalf("%s: read back %+v (kind %q)", k, back, back.Kind())
		}
		if got := KindOf(fmt.Errorf("start: %w", &back)); got != k {
			t.Fatalf("%s through a wrap: %q", k, got)
		}
		if got := KindOf(errors.Join(errors.New("x"), e)); got != k {
			t.Fatalf("%s through a join: %q", k, got)
		}
	}
}

// Errors without a kind — codex's, an older outpost's, Errorf's — and
// kinds this version does not know read as "", so callers fall back to
// the code.
func TestAbsentOrUnknownKindsReadAsEmpty(t *testing.T) {
	for _, raw := range []string{
		`{"code":-32600,"message":"m"}`,
		`{"code":-32600,"message":"m","data":null}`,
		`{"code":-32600,"message":"m","data":"a string"}`,
		`{"code":-32600,"message":"m","data":{"kind":"from_the_future"}}`,
		`{"code":-32600,"message":"m","data":{"kind":7}}`,
		`{"code":-32600,"message":"m","data":{"other":"x"}}`,
	} {
		var e Error
		if err := json.Unmarshal([]byte(raw), &e); err != nil {
			t.Fatal(err)
		}
		if k := e.Kind(); k != "" {
			t.Errorf("%s: kind %q", raw, k)
		}
	}
	if k := KindOf(Errorf(CodeInternal, "x")); k != "" {
		t.Errorf("Errorf: kind %q", k)
	}
	if k := KindOf(errors.New("plain")); k != "" {
		t.Errorf("a plain error: kind %q", k)
	}
	if k := KindOf(nil); k != "" {
		t.Errorf("nil: kind %q", k)
	}
	if b, _ := json.Marshal(Errorf(CodeInternal, "x")); string(b) != `{"code":-32603,"message":"x"}` {
		t.Errorf("an error without a kind carries data: %s", b)
	}
	// msgpack decodes maps with interface keys in some configurations.
	e := &Error{Code: 1, Data: map[any]any{"kind": "refused"}}
	if e.Kind() != KindRefused {
		t.Errorf("map[any]any data: %q", e.Kind())
	}
}

func TestTemporaryKinds(t *testing.T) {
	for _, k := range Kinds {
		want := k == KindExhausted || k == KindUnavailable
		if k.Temporary() != want {
			t.Errorf("%s: Temporary %v", k, k.Temporary())
		}
		if !k.Known() {
			t.Errorf("%s is not known", k)
		}
	}
	if Kind("").Known() || Kind("nope").Known() {
		t.Error("unknown kinds are known")
	}
}

// The parameter at fault travels beside the kind, in JSON and msgpack, and
// is absent (not "") when there is none.
func TestParamTravelsBesideTheKind(t *testing.T) {
	e := KindErrorf(KindNotFound, CodeInvalidParams, "no dir").WithParam(ParamCwd)
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"code":-32602,"message":"no dir","data":{"kind":"not_found","param":"cwd"}}`; string(b) != want {
		t.Fatalf("got %s\nwant %s", b, want)
	}
	var back Error
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Kind() != KindNotFound || ParamOf(fmt.Errorf("start: %w", &back)) != ParamCwd {
		t.Fatalf("read back kind %q param %q", back.Kind(), back.Param())
	}
	mp, err := msgpack.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	var mback Error
	if err := msgpack.Unmarshal(mp, &mback); err != nil {
		t.Fatal(err)
	}
	if mback.Param() != ParamCwd || mback.Kind() != KindNotFound {
		t.Fatalf("msgpack read back %+v", mback)
	}
	if b, _ := json.Marshal(KindErrorf(KindNotFound, CodeInternal, "no program")); string(b) != `{"code":-32603,"message":"no program","data":{"kind":"not_found"}}` {
		t.Fatalf("no param: %s", b)
	}
}
