package transport

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand"
	"net"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/outpost-exec/outpost/protocol"
)

// --- helpers ---------------------------------------------------------------

// mpPipe returns the two ends of a net.Pipe, each wrapped in a MsgpackConn.
func mpPipe(t *testing.T) (a, b *MsgpackConn) {
	t.Helper()
	ca, cb := net.Pipe()
	a, b = NewMsgpackConn(ca, 0), NewMsgpackConn(cb, 0)
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// mpGo runs write in a goroutine (net.Pipe writes block until read) and
// returns a function that waits for it and fails the test on an error.
func mpGo(t *testing.T, write func() error) (wait func()) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- write() }()
	return func() {
		t.Helper()
		if err := <-done; err != nil {
			t.Fatalf("write: %v", err)
		}
	}
}

// mpBuf is an in-memory stream: reads drain in, writes append to out.
type mpBuf struct {
	in     *bytes.Reader
	out    bytes.Buffer
	writes int
	closed bool
}

func newMpBuf(in []byte) *mpBuf { return &mpBuf{in: bytes.NewReader(in)} }

func (m *mpBuf) Read(p []byte) (int, error)  { return m.in.Read(p) }
func (m *mpBuf) Write(p []byte) (int, error) { m.writes++; return m.out.Write(p) }
func (m *mpBuf) Close() error                { m.closed = true; return nil }

// mpBody builds a frame body [kind, id, method, payload] with msgpack's
// generic encoder, so tests can send things the writer would refuse.
func mpBody(t testing.TB, elems ...any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(elems)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// mpFrames frames each body.
func mpFrames(bodies ...[]byte) []byte {
	var out []byte
	for _, b := range bodies {
		out = AppendFrame(out, b)
	}
	return out
}

func mpRead(t *testing.T, c *MsgpackConn) *Message {
	t.Helper()
	m, err := c.ReadMessage(context.Background())
	if err != nil {
		t.Fatalf("ReadMessage: %v", err)
	}
	return m
}

// mpWantMalformed reads a message and requires a *MalformedError that is
// not mistaken for a dead stream.
func mpWantMalformed(t *testing.T, c *MsgpackConn) *MalformedError {
	t.Helper()
	m, err := c.ReadMessage(context.Background())
	var me *MalformedError
	if !errors.As(err, &me) {
		t.Fatalf("ReadMessage = %+v, %v; want a *MalformedError", m, err)
	}
	if m != nil {
		t.Fatalf("malformed error %v with a message %+v", err, m)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("malformed error %v claims the stream ended", err)
	}
	return me
}

var mpValidBody = []byte{0x94, 0x02, 0xc0, 0xa4, 'p', 'i', 'n', 'g', 0xc0} // [2, nil, "ping", nil]

func mpWantPing(t *testing.T, c *MsgpackConn) {
	t.Helper()
	m := mpRead(t, c)
	if m.Kind != KindNotification || m.Method != "ping" || !m.Params.Absent() {
		t.Fatalf("after the bad frame: %+v, want the ping notification", m)
	}
}

// --- round trips -------------------------------------------------------------

func TestMsgpackRoundTripPreservesEveryKindAndIDType(t *testing.T) {
	ctx := context.Background()
	a, b := mpPipe(t)
	type params struct {
		S string `msgpack:"s"`
		N int64  `msgpack:"n"`
	}
	ids := []ID{IntID(0), IntID(1), IntID(-1), IntID(-200), IntID(1 << 40), IntID(math.MaxInt64), IntID(math.MinInt64),
		{Str: "abc", IsStr: true}, {Str: "", IsStr: true}, {Str: "1", IsStr: true}, {Str: "\xff\x00", IsStr: true}}
	for _, id := range ids {
		p := params{S: "x" + id.String(), N: id.Num}

		wait := mpGo(t, func() error { return a.WriteRequest(ctx, id, "process/start", p) })
		m := mpRead(t, b)
		wait()
		var got params
		if err := m.Params.Decode(&got); err != nil {
			t.Fatal(err)
		}
		if m.Kind != KindRequest || m.ID != id || m.Method != "process/start" || got != p || m.Result != nil || m.Error != nil {
			t.Fatalf("request %v: got %+v params %+v", id, m, got)
		}

		wait = mpGo(t, func() error { return b.WriteResult(ctx, id, p) })
		m = mpRead(t, a)
		wait()
		got = params{}
		if err := m.Result.Decode(&got); err != nil {
			t.Fatal(err)
		}
		if m.Kind != KindResponse || m.ID != id || m.Method != "" || got != p || m.Error != nil || m.Params != nil {
			t.Fatalf("result %v: got %+v result %+v", id, m, got)
		}

		wait = mpGo(t, func() error { return b.WriteError(ctx, id, protocol.Errorf(protocol.CodeInvalidParams, "bad %v", id)) })
		m = mpRead(t, a)
		wait()
		if m.Kind != KindResponse || m.ID != id || m.Error == nil || m.Error.Code != protocol.CodeInvalidParams || m.Error.Message != "bad "+id.String() {
			t.Fatalf("error %v: got %+v (error %+v)", id, m, m.Error)
		}
		if m.Result == nil || !m.Result.Absent() {
			t.Fatalf("error response %v: Result %v, want present and absent", id, m.Result)
		}
	}

	wait := mpGo(t, func() error { return a.WriteNotification(ctx, "initialized", nil) })
	m := mpRead(t, b)
	wait()
	if m.Kind != KindNotification || m.ID != (ID{}) || m.Method != "initialized" || m.Params == nil || !m.Params.Absent() {
		t.Fatalf("notification: %+v", m)
	}

	wait = mpGo(t, func() error { return a.WriteRequest(ctx, IntID(7), "environment/info", nil) })
	m = mpRead(t, b)
	wait()
	if m.Kind != KindRequest || !m.Params.Absent() {
		t.Fatalf("request with nil params: %+v", m)
	}
	untouched := map[string]string{"keep": "me"}
	if err := m.Params.Decode(&untouched); err != nil || untouched["keep"] != "me" {
		t.Fatalf("Decode of absent params changed the value: %v %v", untouched, err)
	}

	wait = mpGo(t, func() error { return b.WriteResult(ctx, IntID(7), nil) })
	m = mpRead(t, a)
	wait()
	if m.Kind != KindResponse || m.Error != nil || m.Result == nil || !m.Result.Absent() {
		t.Fatalf("nil result: %+v", m)
	}
}

// mpFillZeroFields sets every zero field of the struct *p, recursively,
// so a field added to a protocol struct later is covered by the round
// trips below without anyone remembering to add it here.
func mpFillZeroFields(t *testing.T, p any) {
	t.Helper()
	var fill func(v reflect.Value, name string)
	fill = func(v reflect.Value, name string) {
		if v.Kind() == reflect.Struct {
			for i := 0; i < v.NumField(); i++ {
				fill(v.Field(i), name+"."+v.Type().Field(i).Name)
			}
			return
		}
		if !v.IsZero() {
			return
		}
		switch v.Kind() {
		case reflect.String:
			v.SetString("s" + name)
		case reflect.Bool:
			v.SetBool(true)
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			v.SetInt(-7)
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			v.SetUint(7)
		case reflect.Pointer:
			v.Set(reflect.New(v.Type().Elem()))
			fill(v.Elem(), name)
		case reflect.Slice:
			v.Set(reflect.MakeSlice(v.Type(), 2, 2))
			fill(v.Index(0), name+"[0]")
			fill(v.Index(1), name+"[1]")
		case reflect.Map:
			v.Set(reflect.MakeMap(v.Type()))
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			fill(k, name+"[k]")
			fill(e, name+"[v]")
			v.SetMapIndex(k, e)
		case reflect.Interface:
			v.Set(reflect.ValueOf("s" + name))
		default:
			t.Fatalf("mpFillZeroFields: %s: cannot fill a %s", name, v.Type())
		}
	}
	fill(reflect.ValueOf(p).Elem(), reflect.TypeOf(p).Elem().Name())
}

func mpRoundTrip[T any](t *testing.T, method string, in T) T {
	t.Helper()
	a, b := mpPipe(t)
	wait := mpGo(t, func() error { return a.WriteRequest(context.Background(), IntID(1), method, &in) })
	m := mpRead(t, b)
	wait()
	var out T
	if err := m.Params.Decode(&out); err != nil {
		t.Fatalf("Decode: %v", err)
	}
	return out
}

func TestMsgpackExecParamsKeepEveryField(t *testing.T) {
	arg0 := "sh"
	in := protocol.ExecParams{
		ProcessID: "proc-1",
		Argv:      []string{"/bin/sh", "-c", "echo 'hi'\n", ""},
		Cwd:       "file:///tmp/w%20d",
		EnvPolicy: &protocol.EnvPolicy{
			Inherit:               protocol.InheritCore,
			IgnoreDefaultExcludes: true,
			Exclude:               []string{"AWS_*", "*_TOKEN"},
			Set:                   map[string]string{"LANG": "C.UTF-8", "EMPTY": ""},
			IncludeOnly:           []string{"PATH", "HOME"},
		},
		Env:                   map[string]string{"A": "1", "B": "two words", "UNICODE": "héllo ✓"},
		Tty:                   true,
		PipeStdin:             true,
		Arg0:                  &arg0,
		Sandbox:               map[string]any{"type": "workspace-write", "networkAccess": false, "writableRoots": []any{"/tmp", "/work"}},
		EnforceManagedNetwork: true,
		ManagedNetwork:        &protocol.ManagedNetwork{LoopbackPorts: []uint16{80, 8080, 65535}, AllowLocalBinding: true},
		Rows:                  50,
		Cols:                  132,
	}
	mpFillZeroFields(t, &in)
	out := mpRoundTrip(t, protocol.MethodProcessStart, in)
	if !reflect.DeepEqual(out, in) {
		t.Fatalf("ExecParams changed:\n got %#v\nwant %#v", out, in)
	}
}

func TestMsgpackBinaryFieldsAndResultsKeepEveryField(t *testing.T) {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i) // every byte value, invalid UTF-8 included
	}
	wid := "w-1"
	w := protocol.WriteParams{ProcessID: "p", Chunk: all, WriteID: &wid, CloseStdin: true}
	mpFillZeroFields(t, &w)
	if out := mpRoundTrip(t, protocol.MethodProcessWrite, w); !reflect.DeepEqual(out, w) {
		t.Fatalf("WriteParams changed:\n got %#v\nwant %#v", out, w)
	}

	code, failure := int32(-9), "spawn failed"
	r := protocol.ReadResult{
		Chunks:        []protocol.OutputChunk{{Seq: 1, Stream: protocol.StreamStdout, Chunk: all}, {Seq: 2, Stream: protocol.StreamStderr, Chunk: []byte{}}},
		NextSeq:       math.MaxUint64,
		Exited:        true,
		ExitCode:      &code,
		Closed:        true,
		Failure:       &failure,
		SandboxDenied: true,
		Gap:           &protocol.Gap{FromSeq: 3, ToSeq: 1 << 60},
	}
	mpFillZeroFields(t, &r)
	if out := mpRoundTrip(t, protocol.MethodProcessRead, r); !reflect.DeepEqual(out, r) {
		t.Fatalf("ReadResult changed:\n got %#v\nwant %#v", out, r)
	}
}

func TestMsgpackOutputNotificationKeeps64KiBBinaryChunkExactly(t *testing.T) {
	ctx := context.Background()
	a, b := mpPipe(t)
	chunk := make([]byte, 64<<10)
	rand.New(rand.NewSource(1)).Read(chunk)
	in := &protocol.OutputNotification{ProcessID: "p", Seq: 1 << 33, Stream: protocol.StreamPty, Chunk: chunk}
	wait := mpGo(t, func() error { return a.WriteNotification(ctx, protocol.MethodProcessOutput, in) })
	m := mpRead(t, b)
	wait()
	var out protocol.OutputNotification
	if err := m.Params.Decode(&out); err != nil {
		t.Fatal(err)
	}
	if m.Kind != KindNotification || m.Method != protocol.MethodProcessOutput {
		t.Fatalf("%+v", m)
	}
	if out.ProcessID != in.ProcessID || out.Seq != in.Seq || out.Stream != in.Stream || !bytes.Equal(out.Chunk, chunk) {
		t.Fatalf("notification changed: pid %q seq %d stream %q, %d chunk bytes (equal: %v)",
			out.ProcessID, out.Seq, out.Stream, len(out.Chunk), bytes.Equal(out.Chunk, chunk))
	}
}

func TestMsgpackErrorResponseKeepsCodeMessageAndData(t *testing.T) {
	ctx := context.Background()
	a, b := mpPipe(t)
	in := &protocol.Error{Code: protocol.CodeSessionAlreadyAttached, Message: "session s-1 is attached", Data: map[string]any{"sessionId": "s-1"}}
	wait := mpGo(t, func() error { return a.WriteError(ctx, MalformedID, in) })
	m := mpRead(t, b)
	wait()
	if m.Kind != KindResponse || m.ID != MalformedID || m.Error == nil {
		t.Fatalf("%+v", m)
	}
	if m.Error.Code != in.Code || m.Error.Message != in.Message || !reflect.DeepEqual(m.Error.Data, in.Data) {
		t.Fatalf("error changed: %#v, want %#v", m.Error, in)
	}
}

func TestMsgpackWireBytesMatchTheDocumentedLayout(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		write func(c *MsgpackConn) error
		body  []byte
	}{
		{"request", func(c *MsgpackConn) error { return c.WriteRequest(ctx, IntID(1), "initialize", nil) },
			append([]byte{0x94, 0x01, 0x01, 0xaa}, append([]byte("initialize"), 0xc0)...)},
		{"string id", func(c *MsgpackConn) error { return c.WriteRequest(ctx, ID{Str: "a", IsStr: true}, "x", true) },
			[]byte{0x94, 0x01, 0xa1, 'a', 0xa1, 'x', 0xc3}},
		{"notification", func(c *MsgpackConn) error { return c.WriteNotification(ctx, "x", 5) },
			[]byte{0x94, 0x02, 0xc0, 0xa1, 'x', 0x05}},
		{"result", func(c *MsgpackConn) error { return c.WriteResult(ctx, IntID(-1), protocol.Empty{}) },
			[]byte{0x94, 0x03, 0xff, 0xa0, 0x80}},
		{"error", func(c *MsgpackConn) error { return c.WriteError(ctx, IntID(2), &protocol.Error{Code: 1, Message: "m"}) },
			append([]byte{0x94, 0x04, 0x02, 0xa0, 0x82, 0xa4}, append([]byte("code"), append([]byte{0x01, 0xa7}, append([]byte("message"), 0xa1, 'm')...)...)...)},
	} {
		buf := newMpBuf(nil)
		if err := tc.write(NewMsgpackConn(buf, 0)); err != nil {
			t.Fatal(err)
		}
		if want := AppendFrame(nil, tc.body); !bytes.Equal(buf.out.Bytes(), want) {
			t.Errorf("%s:\n got % x\nwant % x", tc.name, buf.out.Bytes(), want)
		}
	}
}

func TestMsgpackParamsPassedOnAsPayloadAreCopiedVerbatim(t *testing.T) {
	ctx := context.Background()
	src := newMpBuf(nil)
	in := &protocol.OutputNotification{ProcessID: "p", Seq: 3, Stream: protocol.StreamStdout, Chunk: []byte("out")}
	if err := NewMsgpackConn(src, 0).WriteNotification(ctx, protocol.MethodProcessOutput, in); err != nil {
		t.Fatal(err)
	}
	m := mpRead(t, NewMsgpackConn(newMpBuf(src.out.Bytes()), 0))
	dst := newMpBuf(nil)
	if err := NewMsgpackConn(dst, 0).WriteNotification(ctx, m.Method, m.Params); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dst.out.Bytes(), src.out.Bytes()) {
		t.Fatalf("forwarded frame differs:\n got % x\nwant % x", dst.out.Bytes(), src.out.Bytes())
	}
	m = mpRead(t, NewMsgpackConn(newMpBuf(mpFrames(mpBody(t, 1, 1, "m", nil))), 0))
	dst = newMpBuf(nil)
	if err := NewMsgpackConn(dst, 0).WriteRequest(ctx, IntID(1), m.Method, m.Params); err != nil {
		t.Fatal(err)
	}
	if m2 := mpRead(t, NewMsgpackConn(newMpBuf(dst.out.Bytes()), 0)); !m2.Params.Absent() {
		t.Fatal("absent params forwarded as present")
	}
}

// --- writers -----------------------------------------------------------------

// writeRecorder records every Write call separately; its lock guards only
// its own bookkeeping, so unsynchronised callers would interleave.
type writeRecorder struct {
	mu     sync.Mutex
	writes [][]byte
}

func (w *writeRecorder) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.writes = append(w.writes, bytes.Clone(p))
	w.mu.Unlock()
	return len(p), nil
}
func (w *writeRecorder) Read([]byte) (int, error) { return 0, io.EOF }
func (w *writeRecorder) Close() error             { return nil }

func TestMsgpackConcurrentWritersNeverInterleaveFrames(t *testing.T) {
	ctx := context.Background()
	rec := &writeRecorder{}
	c := NewMsgpackConn(rec, 0)
	const writers, each = 16, 40
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				var err error
				chunk := bytes.Repeat([]byte{byte(w)}, (w*each+i)*97) // up to ~60 KiB
				switch i % 3 {
				case 0:
					err = c.WriteNotification(ctx, protocol.MethodProcessOutput, &protocol.OutputNotification{ProcessID: fmt.Sprint(w), Seq: uint64(i), Chunk: chunk})
				case 1:
					err = c.WriteResult(ctx, IntID(int64(w*each+i)), &protocol.WriteParams{ProcessID: fmt.Sprint(w), Chunk: chunk})
				case 2:
					err = c.WriteError(ctx, ID{Str: fmt.Sprint(w, "/", i), IsStr: true}, protocol.Errorf(w, "%s", chunk))
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if len(rec.writes) != writers*each {
		t.Fatalf("%d Write calls for %d frames: a frame must be one Write", len(rec.writes), writers*each)
	}
	var stream []byte
	for _, w := range rec.writes {
		if len(w) < 4 || int(binary.BigEndian.Uint32(w)) != len(w)-4 {
			t.Fatalf("a Write of %d bytes is not exactly one frame", len(w))
		}
		stream = append(stream, w...)
	}
	r := NewMsgpackConn(newMpBuf(stream), 0)
	seen := map[string]bool{}
	for range writers * each {
		m := mpRead(t, r)
		var who string
		var n, want int
		switch {
		case m.Kind == KindNotification:
			var p protocol.OutputNotification
			if err := m.Params.Decode(&p); err != nil {
				t.Fatal(err)
			}
			fmt.Sscan(p.ProcessID, &n)
			who, want = fmt.Sprint(n, "/", p.Seq), (n*each+int(p.Seq))*97
			if !bytes.Equal(p.Chunk, bytes.Repeat([]byte{byte(n)}, want)) {
				t.Fatalf("%s: chunk corrupted", who)
			}
		case m.Error != nil:
			var i int
			who = m.ID.Str
			fmt.Sscanf(who, "%d/%d", &n, &i)
			want = (n*each + i) * 97
			if m.Error.Code != n || m.Error.Message != string(bytes.Repeat([]byte{byte(n)}, want)) {
				t.Fatalf("%s: error corrupted", who)
			}
		default:
			var p protocol.WriteParams
			if err := m.Result.Decode(&p); err != nil {
				t.Fatal(err)
			}
			fmt.Sscan(p.ProcessID, &n)
			who, want = fmt.Sprint(n, "/", int(m.ID.Num)-n*each), int(m.ID.Num)*97
			if !bytes.Equal(p.Chunk, bytes.Repeat([]byte{byte(n)}, want)) {
				t.Fatalf("%s: chunk corrupted", who)
			}
		}
		if seen[who] {
			t.Fatalf("%s read twice", who)
		}
		seen[who] = true
	}
	if _, err := r.ReadMessage(ctx); err != io.EOF {
		t.Fatalf("after the last frame: %v, want io.EOF", err)
	}
}

func TestMsgpackOutboundMessageOverLimitWritesNothing(t *testing.T) {
	ctx := context.Background()
	buf := newMpBuf(nil)
	c := NewMsgpackConn(buf, 1024)
	err := c.WriteNotification(ctx, protocol.MethodProcessOutput, &protocol.OutputNotification{Chunk: make([]byte, 1024)})
	if !errors.Is(err, ErrMessageTooLarge) || !strings.Contains(err.Error(), "1024") {
		t.Fatalf("err = %v, want ErrMessageTooLarge naming the limit", err)
	}
	if buf.writes != 0 {
		t.Fatalf("%d bytes written for a refused message", buf.out.Len())
	}
	// A body of exactly the limit is allowed, and the refusal did not
	// poison the connection.
	small := &protocol.OutputNotification{Chunk: make([]byte, 900)}
	if err := c.WriteNotification(ctx, protocol.MethodProcessOutput, small); err != nil {
		t.Fatal(err)
	}
	n := buf.out.Len() - 4
	buf.out.Reset()
	small.Chunk = make([]byte, 900+1024-n)
	if err := c.WriteNotification(ctx, protocol.MethodProcessOutput, small); err != nil || buf.out.Len() != 1024+4 {
		t.Fatalf("a body of exactly the limit: %v, %d bytes written", err, buf.out.Len())
	}
}

func TestMsgpackUnencodableValueWritesNothingAndConnectionStaysUsable(t *testing.T) {
	ctx := context.Background()
	buf := newMpBuf(nil)
	c := NewMsgpackConn(buf, 0)
	if err := c.WriteResult(ctx, IntID(1), map[string]any{"ch": make(chan int)}); err == nil {
		t.Fatal("encoding a channel succeeded")
	}
	if buf.writes != 0 {
		t.Fatal("a failed encoding wrote bytes")
	}
	if err := c.WriteResult(ctx, IntID(2), "ok"); err != nil {
		t.Fatal(err)
	}
	if m := mpRead(t, NewMsgpackConn(newMpBuf(buf.out.Bytes()), 0)); m.ID != IntID(2) {
		t.Fatalf("%+v", m)
	}
}

func TestMsgpackWriteRefusesMessagesTheReaderWouldReject(t *testing.T) {
	ctx := context.Background()
	buf := newMpBuf(nil)
	c := NewMsgpackConn(buf, 0)
	if err := c.WriteRequest(ctx, IntID(1), "", nil); err == nil {
		t.Error("request with an empty method was written")
	}
	if err := c.WriteNotification(ctx, "", nil); err == nil {
		t.Error("notification with an empty method was written")
	}
	if err := c.WriteError(ctx, IntID(1), nil); err == nil {
		t.Error("error response with a nil error was written")
	}
	if buf.writes != 0 {
		t.Fatal("bytes written")
	}
}

type failingWriter struct {
	mpBuf
	n int // bytes accepted before failing
}

func (f *failingWriter) Write(p []byte) (int, error) {
	f.writes++
	return min(f.n, len(p)), errors.New("connection reset")
}

func TestMsgpackFailedWriteIsStickySoNoFrameFollowsAPartialOne(t *testing.T) {
	ctx := context.Background()
	f := &failingWriter{n: 3}
	c := NewMsgpackConn(f, 0)
	if err := c.WriteNotification(ctx, "a", nil); err == nil {
		t.Fatal("write error lost")
	}
	if err := c.WriteNotification(ctx, "b", nil); err == nil || !strings.Contains(err.Error(), "connection reset") {
		t.Fatalf("second write: %v, want the first failure", err)
	}
	if f.writes != 1 {
		t.Fatalf("%d Write calls after a failure", f.writes)
	}
}

func TestMsgpackWriteBufferIsNotPinnedAfterAHugeMessage(t *testing.T) {
	ctx := context.Background()
	c := NewMsgpackConn(newMpBuf(nil), 0)
	if err := c.WriteNotification(ctx, "big", make([]byte, 4<<20)); err != nil {
		t.Fatal(err)
	}
	if c.wbuf.Cap() > msgpackShrinkAbove {
		t.Fatalf("write buffer kept %d bytes", c.wbuf.Cap())
	}
	if err := c.WriteNotification(ctx, "small", 1); err != nil {
		t.Fatal(err)
	}
	if c.wbuf.Cap() == 0 {
		t.Fatal("a small message's buffer is not reused")
	}
}

func TestMsgpackCancelledContextDoesNoIO(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	buf := newMpBuf(mpFrames(mpValidBody))
	c := NewMsgpackConn(buf, 0)
	if _, err := c.ReadMessage(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("ReadMessage: %v", err)
	}
	if err := c.WriteNotification(ctx, "x", nil); !errors.Is(err, context.Canceled) || buf.writes != 0 {
		t.Fatalf("WriteNotification: %v, %d writes", err, buf.writes)
	}
	mpWantPing(t, c) // the frame was not consumed
}

func TestMsgpackCloseClosesTheStream(t *testing.T) {
	buf := newMpBuf(nil)
	if err := NewMsgpackConn(buf, 0).Close(); err != nil || !buf.closed {
		t.Fatalf("Close: %v, closed %v", err, buf.closed)
	}
}

// --- reader: framing ---------------------------------------------------------

// readSizes records the largest Read request, to catch a reader that
// buffers a frame it should discard.
type readSizes struct {
	r   io.Reader
	max int
}

func (s *readSizes) Read(p []byte) (int, error) {
	s.max = max(s.max, len(p))
	return s.r.Read(p)
}
func (s *readSizes) Write(p []byte) (int, error) { return len(p), nil }
func (s *readSizes) Close() error                { return nil }

func TestMsgpackOversizedInboundFrameIsSkippedUnbufferedAndNextFrameDecodes(t *testing.T) {
	const limit, big = 1024, 4 << 20
	in := binary.BigEndian.AppendUint32(nil, big)
	in = append(in, bytes.Repeat([]byte{0x94}, big)...) // would parse as deep nesting
	in = append(in, mpFrames(mpValidBody)...)
	src := &readSizes{r: bytes.NewReader(in)}
	c := NewMsgpackConn(src, limit)
	me := mpWantMalformed(t, c)
	if !errors.Is(me, ErrMessageTooLarge) || !strings.Contains(me.Error(), "1024") {
		t.Fatalf("%v: want ErrMessageTooLarge naming the limit", me)
	}
	if src.max >= big {
		t.Fatalf("a Read of %d bytes: the oversized body was buffered", src.max)
	}
	mpWantPing(t, c)
	if _, err := c.ReadMessage(context.Background()); err != io.EOF {
		t.Fatalf("%v, want io.EOF", err)
	}
}

func TestMsgpackFrameOfExactlyTheLimitIsAccepted(t *testing.T) {
	body := mpBody(t, 2, nil, "x", strings.Repeat("a", 100))
	c := NewMsgpackConn(newMpBuf(mpFrames(body, body)), len(body))
	mpRead(t, c)
	c = NewMsgpackConn(newMpBuf(mpFrames(body, mpValidBody)), len(body)-1)
	mpWantMalformed(t, c)
	mpWantPing(t, c)
}

// An oversized frame is refused at its header, before its body arrives (a
// peer may declare 4 GiB and send nothing); the stream ending inside the
// skipped body shows on the next read.
func TestMsgpackOversizedFrameIsRefusedBeforeItsBodyThenTruncationIsUnexpectedEOF(t *testing.T) {
	in := binary.BigEndian.AppendUint32(nil, 5000)
	in = append(in, make([]byte, 100)...)
	c := NewMsgpackConn(newMpBuf(in), 1024)
	if me := mpWantMalformed(t, c); !errors.Is(me, ErrMessageTooLarge) {
		t.Fatalf("%v, want ErrMessageTooLarge", me)
	}
	if _, err := c.ReadMessage(context.Background()); err != io.ErrUnexpectedEOF {
		t.Fatalf("%v, want io.ErrUnexpectedEOF", err)
	}
}

func TestMsgpackOversizedFrameIsRefusedWhileThePeerStalls(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go a.Write([]byte{0xff, 0xff, 0xff, 0xff, 1, 2, 3}) // 4 GiB promised, 3 bytes sent
	c := NewMsgpackConn(b, 1024)
	if me := mpWantMalformed(t, c); !errors.Is(me, ErrMessageTooLarge) {
		t.Fatalf("%v, want ErrMessageTooLarge", me)
	}
}

func TestMsgpackZeroLengthFrameIsMalformedAndNextFrameDecodes(t *testing.T) {
	in := append([]byte{0, 0, 0, 0}, mpFrames(mpValidBody)...)
	c := NewMsgpackConn(newMpBuf(in), 0)
	mpWantMalformed(t, c)
	mpWantPing(t, c)
}

func TestMsgpackTruncatedFrameIsUnexpectedEOFNotMalformed(t *testing.T) {
	full := mpFrames(mpValidBody)
	for cut := 1; cut < len(full); cut++ {
		c := NewMsgpackConn(newMpBuf(full[:cut]), 0)
		_, err := c.ReadMessage(context.Background())
		var me *MalformedError
		if err != io.ErrUnexpectedEOF || errors.As(err, &me) {
			t.Fatalf("frame cut to %d bytes: %v, want io.ErrUnexpectedEOF", cut, err)
		}
	}
	c := NewMsgpackConn(newMpBuf(nil), 0)
	if _, err := c.ReadMessage(context.Background()); err != io.EOF {
		t.Fatalf("empty stream: %v, want io.EOF", err)
	}
}

func TestMsgpackAnnouncedLargeFrameIsNotAllocatedUpFront(t *testing.T) {
	in := binary.BigEndian.AppendUint32(nil, protocol.MaxMessageBytes)
	in = append(in, 1, 2, 3) // then the peer goes quiet (here: EOF)
	c := NewMsgpackConn(newMpBuf(in), 0)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := c.ReadMessage(context.Background())
	runtime.ReadMemStats(&after)
	if err != io.ErrUnexpectedEOF {
		t.Fatalf("%v, want io.ErrUnexpectedEOF", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 4<<20 {
		t.Fatalf("allocated %d bytes for a frame that delivered 3", got)
	}
}

type oneByteReader struct{ r io.Reader }

func (o oneByteReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	return o.r.Read(p[:1])
}
func (o oneByteReader) Write(p []byte) (int, error) { return len(p), nil }
func (o oneByteReader) Close() error                { return nil }

func TestMsgpackLargeFrameArrivingInPiecesDecodes(t *testing.T) {
	ctx := context.Background()
	chunk := make([]byte, 3<<20+17) // past the up-front allocation, not a power of two
	rand.New(rand.NewSource(2)).Read(chunk)
	buf := newMpBuf(nil)
	if err := NewMsgpackConn(buf, 0).WriteNotification(ctx, protocol.MethodProcessOutput, &protocol.OutputNotification{Chunk: chunk}); err != nil {
		t.Fatal(err)
	}
	buf.out.Write(mpFrames(mpValidBody))
	for _, r := range []io.ReadWriteCloser{newMpBuf(buf.out.Bytes()), oneByteReader{bytes.NewReader(buf.out.Bytes())}} {
		c := NewMsgpackConn(r, 0)
		var out protocol.OutputNotification
		if err := mpRead(t, c).Params.Decode(&out); err != nil || !bytes.Equal(out.Chunk, chunk) {
			t.Fatalf("%T: %v, chunk equal %v", r, err, bytes.Equal(out.Chunk, chunk))
		}
		mpWantPing(t, c)
	}
}

func TestReadFrameUsesBufWhenItFitsAndAppendFrameInverts(t *testing.T) {
	stream := AppendFrame(nil, []byte("hello"))
	stream = AppendFrame(stream, bytes.Repeat([]byte("x"), 100))
	r := bytes.NewReader(stream)
	buf := make([]byte, 0, 64)
	got, err := ReadFrame(r, buf, 0)
	if err != nil || string(got) != "hello" || &got[0] != &buf[:1][0] {
		t.Fatalf("ReadFrame = %q, %v (in buf: %v)", got, err, err == nil && &got[0] == &buf[:1][0])
	}
	got, err = ReadFrame(r, buf, 0)
	if err != nil || !bytes.Equal(got, bytes.Repeat([]byte("x"), 100)) {
		t.Fatalf("ReadFrame = %q, %v", got, err)
	}
	if _, err := ReadFrame(r, buf, 0); err != io.EOF {
		t.Fatalf("at the end: %v", err)
	}
	r = bytes.NewReader(stream)
	if _, err := ReadFrame(r, nil, 4); !errors.Is(err, ErrMessageTooLarge) {
		t.Fatalf("over the limit: %v", err)
	}
	if got, err := ReadFrame(r, nil, 4); !errors.Is(err, ErrMessageTooLarge) || got != nil {
		t.Fatalf("second frame over the limit: %q, %v", got, err)
	}
}

// --- reader: bodies ----------------------------------------------------------

func TestMsgpackGarbageBodiesAreMalformedAndConnectionContinues(t *testing.T) {
	random := make([]byte, 300)
	rand.New(rand.NewSource(3)).Read(random)
	deep := append(bytes.Repeat([]byte{0x91}, msgpackMaxDepth+1), 0xc0)
	many := []byte{0x94, 0x02, 0xc0, 0xa1, 'x', 0xdd}
	many = binary.BigEndian.AppendUint32(many, msgpackMaxValues)
	many = append(many, make([]byte, msgpackMaxValues)...)
	hugeSlice := []byte{0x94, 0x01, 0x01, 0xa1, 'x', 0x81, 0xae}
	hugeSlice = append(hugeSlice, "managedNetwork"...)
	hugeSlice = append(hugeSlice, 0x81, 0xad)
	hugeSlice = append(hugeSlice, "loopbackPorts"...)
	hugeSlice = append(hugeSlice, 0xdd, 0xff, 0xff, 0xff, 0xff)

	for _, tc := range []struct {
		name string
		body []byte
	}{
		{"random bytes", random},
		{"a single nil", []byte{0xc0}},
		{"a map instead of an array", mpBody(t, map[string]any{"kind": 1, "id": 1, "method": "m", "params": nil})[1:]},
		{"array of 3", mpBody(t, 1, 1, "m")},
		{"array of 5", mpBody(t, 1, 1, "m", nil, nil)},
		{"empty array", []byte{0x90}},
		{"kind 9", mpBody(t, 9, 1, "m", nil)},
		{"kind 0", mpBody(t, 0, 1, "m", nil)},
		{"kind -1", mpBody(t, -1, 1, "m", nil)},
		{"kind as string", mpBody(t, "1", 1, "m", nil)},
		{"kind as float", mpBody(t, 1.0, 1, "m", nil)},
		{"kind nil", mpBody(t, nil, 1, "m", nil)},
		{"id as float", mpBody(t, 1, 1.5, "m", nil)},
		{"id as map", mpBody(t, 1, map[string]int{"a": 1}, "m", nil)},
		{"id as array", mpBody(t, 1, []int{1}, "m", nil)},
		{"id as bool", mpBody(t, 1, true, "m", nil)},
		{"id as bin", mpBody(t, 1, []byte("1"), "m", nil)},
		{"id over int64", mpBody(t, 1, uint64(math.MaxInt64)+1, "m", nil)},
		{"request without id", mpBody(t, 1, nil, "m", nil)},
		{"notification with id", mpBody(t, 2, 1, "m", nil)},
		{"request method nil", mpBody(t, 1, 1, nil, nil)},
		{"request method empty", mpBody(t, 1, 1, "", nil)},
		{"notification method empty", mpBody(t, 2, nil, "", nil)},
		{"method as bin", mpBody(t, 1, 1, []byte("m"), nil)},
		{"method as int", mpBody(t, 1, 1, 5, nil)},
		{"result with method", mpBody(t, 3, 1, "m", nil)},
		{"result without id", mpBody(t, 3, nil, "", nil)},
		{"error without id", mpBody(t, 4, nil, "", map[string]any{"code": 1, "message": "m"})},
		{"error object nil", mpBody(t, 4, 1, "", nil)},
		{"error object a string", mpBody(t, 4, 1, "", "boom")},
		{"error object an array", mpBody(t, 4, 1, "", []any{1, "m", nil})},
		{"error code a string", mpBody(t, 4, 1, "", map[string]any{"code": "x", "message": "m"})},
		{"trailing bytes after the array", append(mpBody(t, 2, nil, "m", nil), 0xc0)},
		{"truncated element", mpBody(t, 2, nil, "m", "payload")[:10]},
		{"array claims more than the body holds", []byte{0x94, 0x02, 0xc0, 0xa1, 'm', 0xdc, 0xff, 0xff}},
		{"huge declared slice in params", hugeSlice},
		{"string longer than the body", []byte{0x94, 0x02, 0xc0, 0xdb, 0xff, 0xff, 0xff, 0xff, 'm'}},
		{"code 0xc1", []byte{0x94, 0x02, 0xc0, 0xa1, 'm', 0xc1}},
		{"extension in params", []byte{0x94, 0x02, 0xc0, 0xa1, 'm', 0xd4, 0x01, 0x00}},
		{"ext8 wrapping a map header", []byte{0x94, 0x02, 0xc0, 0xa1, 'm', 0xc7, 0x01, 0x05, 0xdf}},
		{"nesting too deep", append([]byte{0x94, 0x02, 0xc0, 0xa1, 'm'}, deep...)},
		{"too many values", many},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewMsgpackConn(newMpBuf(mpFrames(tc.body, mpValidBody)), 0)
			mpWantMalformed(t, c)
			mpWantPing(t, c)
		})
	}
}

func TestMsgpackReaderAcceptsAnyIntegerWidthAndStringForm(t *testing.T) {
	// Another encoder may use wider forms than ours; the values are what
	// count.
	bodies := [][]byte{
		{0xdc, 0x00, 0x04, 0xcf, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xd3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe, 0xd9, 0x01, 'm', 0xc0},
		{0xdd, 0x00, 0x00, 0x00, 0x04, 0xd0, 0x01, 0xd1, 0xff, 0xfe, 0xda, 0x00, 0x01, 'm', 0xc0},
		{0x94, 0xcd, 0x00, 0x01, 0xd2, 0xff, 0xff, 0xff, 0xfe, 0xdb, 0x00, 0x00, 0x00, 0x01, 'm', 0xc0},
	}
	for _, body := range bodies {
		m := mpRead(t, NewMsgpackConn(newMpBuf(mpFrames(body)), 0))
		if m.Kind != KindRequest || m.ID != IntID(-2) || m.Method != "m" {
			t.Fatalf("% x: %+v", body, m)
		}
	}
}

func TestMsgpackStringIDIsNotConfusedWithIntID(t *testing.T) {
	m := mpRead(t, NewMsgpackConn(newMpBuf(mpFrames(mpBody(t, 3, "1", "", nil))), 0))
	if m.ID != (ID{Str: "1", IsStr: true}) {
		t.Fatalf("%+v", m.ID)
	}
}

func TestMsgpackParamsDecodeReportsTypeMismatch(t *testing.T) {
	m := mpRead(t, NewMsgpackConn(newMpBuf(mpFrames(mpBody(t, 1, 1, "m", "a string"))), 0))
	var p protocol.ExecParams
	if err := m.Params.Decode(&p); err == nil {
		t.Fatal("a string decoded into a struct")
	}
}

// --- benchmark ---------------------------------------------------------------

// loopback is an in-memory stream: what is written is read back.
type loopback struct{ bytes.Buffer }

func (*loopback) Close() error { return nil }

func BenchmarkMsgpackOutputNotification(b *testing.B) {
	ctx := context.Background()
	chunk := make([]byte, 64<<10)
	rand.New(rand.NewSource(4)).Read(chunk)
	n := &protocol.OutputNotification{ProcessID: "proc-1", Seq: 1, Stream: protocol.StreamStdout, Chunk: chunk}
	var lb loopback
	c := NewMsgpackConn(&lb, 0)
	var out protocol.OutputNotification
	b.SetBytes(int64(len(chunk)))
	b.ReportAllocs()
	for b.Loop() {
		n.Seq++
		if err := c.WriteNotification(ctx, protocol.MethodProcessOutput, n); err != nil {
			b.Fatal(err)
		}
		m, err := c.ReadMessage(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := m.Params.Decode(&out); err != nil {
			b.Fatal(err)
		}
		if out.Seq != n.Seq || len(out.Chunk) != len(chunk) {
			b.Fatal("wrong message")
		}
	}
}

func TestMsgpackWriterRefusesPayloadsTheReaderWouldReject(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		payload any
	}{
		{"time.Time, an extension type", map[string]any{"at": time.Unix(1, 0)}},
		{"raw extension", msgpack.RawMessage{0xd4, 0x01, 0x00}},
		{"raw code 0xc1", msgpack.RawMessage{0xc1}},
		{"raw truncated", msgpack.RawMessage{0x92, 0x01}},
		{"raw two values", msgpack.RawMessage{0x01, 0x02}},
		{"raw empty", msgpack.RawMessage{}},
	} {
		buf := newMpBuf(nil)
		if err := NewMsgpackConn(buf, 0).WriteResult(ctx, IntID(1), tc.payload); err == nil || buf.writes != 0 {
			t.Errorf("%s: err %v, %d writes; want refused", tc.name, err, buf.writes)
		}
	}
}

func TestMsgpackParamsDecodePanicInTheLibraryIsAnError(t *testing.T) {
	// {[1]: 2}: decoding an array as a map[any]any key panics in the
	// library (unhashable key).
	m := mpRead(t, NewMsgpackConn(newMpBuf(mpFrames([]byte{0x94, 0x02, 0xc0, 0xa1, 'm', 0x81, 0x91, 0x01, 0x02})), 0))
	var v map[any]any
	if err := m.Params.Decode(&v); err == nil || !strings.Contains(err.Error(), "unhashable") {
		t.Fatalf("err = %v, want the recovered panic", err)
	}
}

func TestMsgpackErrorDataThatDoesNotDecodeKeepsTheResponse(t *testing.T) {
	// data {1: 2} is valid msgpack, but not a map[string]any.
	body := []byte{0x94, 0x04, 0x07, 0xa0, 0x83, 0xa4, 'c', 'o', 'd', 'e', 0x01, 0xa7, 'm', 'e', 's', 's', 'a', 'g', 'e', 0xa1, 'm', 0xa4, 'd', 'a', 't', 'a', 0x81, 0x01, 0x02}
	m := mpRead(t, NewMsgpackConn(newMpBuf(mpFrames(body)), 0))
	if m.ID != IntID(7) || m.Error == nil || m.Error.Code != 1 || m.Error.Message != "m" {
		t.Fatalf("%+v (%+v)", m, m.Error)
	}
	if raw, ok := m.Error.Data.(msgpack.RawMessage); !ok || !bytes.Equal(raw, []byte{0x81, 0x01, 0x02}) {
		t.Fatalf("data %#v, want the raw value", m.Error.Data)
	}
}

// The block fast paths give what the general decoder gives, aliasing the
// frame body, for every shape they accept; anything else (fields missing,
// extra or of another type) falls back to the general decoder.
func TestMsgpackBlockFastPathsMatchTheGeneralDecoder(t *testing.T) {
	chunk := make([]byte, 1<<20)
	rand.New(rand.NewSource(2)).Read(chunk)
	for _, v := range []any{
		protocol.FsReadBlockResult{Chunk: chunk, EOF: true},
		protocol.FsReadBlockResult{Chunk: []byte{}, EOF: false},
		protocol.FsWriteBlockParams{HandleID: "h-1", Offset: 1 << 40, Chunk: chunk},
		protocol.FsWriteBlockParams{HandleID: "", Offset: 0, Chunk: nil},
		map[string]any{"chunk": chunk, "eof": true, "extra": 1},
		map[string]any{"chunk": "text", "eof": true},
		map[string]any{"handleId": 7, "offset": 1, "chunk": chunk},
	} {
		body, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var fastR, slowR protocol.FsReadBlockResult
		errFast := msgpackParams(body).Decode(&fastR)
		errSlow := msgpack.Unmarshal(body, &slowR)
		if (errFast == nil) != (errSlow == nil) || errFast == nil && (!bytes.Equal(fastR.Chunk, slowR.Chunk) || fastR.EOF != slowR.EOF) {
			t.Errorf("%T readBlock: fast %v %d/%v, general %v %d/%v", v, errFast, len(fastR.Chunk), fastR.EOF, errSlow, len(slowR.Chunk), slowR.EOF)
		}
		var fastW, slowW protocol.FsWriteBlockParams
		errFast = msgpackParams(body).Decode(&fastW)
		errSlow = msgpack.Unmarshal(body, &slowW)
		if (errFast == nil) != (errSlow == nil) || errFast == nil && (!bytes.Equal(fastW.Chunk, slowW.Chunk) || fastW.HandleID != slowW.HandleID || fastW.Offset != slowW.Offset) {
			t.Errorf("%T writeBlock: fast %v %+v, general %v %+v", v, errFast, fastW.HandleID, errSlow, slowW.HandleID)
		}
	}
	// The fast path does not copy: the chunk is the body's bytes.
	body, _ := msgpack.Marshal(protocol.FsWriteBlockParams{HandleID: "h", Offset: 1, Chunk: chunk})
	var p protocol.FsWriteBlockParams
	if !decodeWriteBlockMsgpack(body, &p) || &p.Chunk[0] != &body[len(body)-len(chunk)] {
		t.Fatal("fs/writeBlock params did not take the aliasing fast path")
	}
	body, _ = msgpack.Marshal(protocol.FsReadBlockResult{Chunk: chunk})
	var r protocol.FsReadBlockResult
	if !decodeReadBlockMsgpack(body, &r) || cap(r.Chunk) != len(chunk) {
		t.Fatal("fs/readBlock result did not take the aliasing fast path, or its chunk can grow into the body")
	}
}

// A frame body is allocated as it arrives: a 1 MiB block with its
// framing ends in one buffer of exactly its size, and no buffer offered
// to the reader reaches more than 4× past what had arrived.
func TestMsgpackBodyGrowsOnlyWithWhatArrived(t *testing.T) {
	n := msgpackShrinkAbove + 100
	b, err := readMsgpackBody(bytes.NewReader(make([]byte, n)), nil, n)
	if err != nil || len(b) != n || cap(b) != n {
		t.Fatalf("a block-sized body: len %d cap %d, %v; want one allocation of %d", len(b), cap(b), err, n)
	}
	// A peer announcing 64 MiB and sending 3 MiB has at most 4× that
	// allocated before the read fails: every buffer offered to the
	// reader ends at most 4× past what had arrived before it was made.
	r := &aheadReader{r: bytes.NewReader(make([]byte, 3<<20))}
	if _, err := readMsgpackBody(r, nil, 64<<20); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a stalled body: %v", err)
	}
	if r.peak > 4*(3<<20) {
		t.Fatalf("%d bytes were allocated for 3 MiB received", r.peak)
	}
}

// aheadReader records the furthest end of a buffer offered to it: what it
// delivered plus the buffer's length.
type aheadReader struct {
	r         io.Reader
	got, peak int
}

func (a *aheadReader) Read(p []byte) (int, error) {
	a.peak = max(a.peak, a.got+len(p))
	n, err := a.r.Read(p)
	a.got += n
	return n, err
}

// File blocks written from where they are (not copied into the frame
// buffer) arrive as one well-formed frame each, which both the fast path
// and the general decoder read back exactly, in every spelling of the
// payload; a small block takes the ordinary encoder.
func TestMsgpackBlocksWrittenInPlaceArriveWhole(t *testing.T) {
	ctx := context.Background()
	a, b := mpPipe(t)
	chunk := make([]byte, 1<<20+3)
	rand.New(rand.NewSource(3)).Read(chunk)
	longID := strings.Repeat("h", 300)
	payloads := []any{
		protocol.FsReadBlockResult{Chunk: chunk, EOF: true},
		&protocol.FsReadBlockResult{Chunk: chunk},
		protocol.FsWriteBlockParams{HandleID: longID, Offset: 1<<62 + 5, Chunk: chunk},
		&protocol.FsWriteBlockParams{HandleID: "h", Offset: 7, Chunk: chunk[:100]},
	}
	wait := mpGo(t, func() error {
		for i, p := range payloads {
			if err := a.WriteRequest(ctx, ID{Num: int64(i)}, "fs/x", p); err != nil {
				return err
			}
		}
		return nil
	})
	for i, p := range payloads {
		m := mpRead(t, b)
		if m.ID.Num != int64(i) || m.Method != "fs/x" {
			t.Fatalf("message %d: %+v", i, m)
		}
		body, _ := m.Params.(msgpackParams)
		switch want := p.(type) {
		case protocol.FsReadBlockResult, *protocol.FsReadBlockResult:
			w, ok := want.(protocol.FsReadBlockResult)
			if !ok {
				w = *want.(*protocol.FsReadBlockResult)
			}
			var fast, general protocol.FsReadBlockResult
			if !decodeReadBlockMsgpack(body, &fast) || msgpack.Unmarshal(body, &general) != nil {
				t.Fatalf("message %d does not decode", i)
			}
			for _, got := range []protocol.FsReadBlockResult{fast, general} {
				if !bytes.Equal(got.Chunk, w.Chunk) || got.EOF != w.EOF {
					t.Fatalf("message %d: %d bytes eof %v", i, len(got.Chunk), got.EOF)
				}
			}
		default:
			w, ok := want.(protocol.FsWriteBlockParams)
			if !ok {
				w = *want.(*protocol.FsWriteBlockParams)
			}
			var fast, general protocol.FsWriteBlockParams
			if !decodeWriteBlockMsgpack(body, &fast) || msgpack.Unmarshal(body, &general) != nil {
				t.Fatalf("message %d does not decode", i)
			}
			for _, got := range []protocol.FsWriteBlockParams{fast, general} {
				if !bytes.Equal(got.Chunk, w.Chunk) || got.HandleID != w.HandleID || got.Offset != w.Offset {
					t.Fatalf("message %d: %q %d, %d bytes", i, got.HandleID, got.Offset, len(got.Chunk))
				}
			}
		}
	}
	wait()
	// Over the peer's frame limit: refused before anything is written,
	// and the connection still works.
	small := NewMsgpackConn(nopConn{}, 1<<20)
	if err := small.WriteResult(ctx, ID{Num: 1}, protocol.FsReadBlockResult{Chunk: chunk}); !errors.Is(err, ErrMessageTooLarge) {
		t.Fatalf("a block over the limit: %v", err)
	}
	if err := small.WriteResult(ctx, ID{Num: 2}, protocol.FsReadBlockResult{Chunk: chunk[:1<<19]}); err != nil {
		t.Fatalf("after a refused block: %v", err)
	}
}

// nopConn is a net.Conn that takes every write.
type nopConn struct{ net.Conn }

func (nopConn) Write(p []byte) (int, error) { return len(p), nil }

// A nil block pointer is a nil payload, as any nil pointer: encoded as
// msgpack nil, never dereferenced.
func TestMsgpackNilBlockPayloadIsNil(t *testing.T) {
	ctx := context.Background()
	for _, payload := range []any{(*protocol.FsWriteBlockParams)(nil), (*protocol.FsReadBlockResult)(nil)} {
		if err := NewMsgpackConn(newMpBuf(nil), 0).WriteRequest(ctx, ID{Num: 1}, "fs/writeBlock", payload); err != nil {
			t.Errorf("writing a nil %T: %v", payload, err)
		}
	}
}
