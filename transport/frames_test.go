package transport

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/iotest"

	"github.com/coder/websocket"

	"github.com/outpost-exec/outpost/protocol"
)

// --- LineFrames ----------------------------------------------------------

// readAllFrames reads frames until an error other than ErrMessageTooLarge;
// an oversize line shows up as the string "<too large>".
func readAllFrames(t *testing.T, l *LineFrames) ([]string, error) {
	t.Helper()
	var out []string
	for i := 0; ; i++ {
		if i > 1e6 {
			t.Fatal("ReadFrame never ends")
		}
		f, err := l.ReadFrame(context.Background())
		switch {
		case errors.Is(err, ErrMessageTooLarge):
			out = append(out, "<too large>")
		case err != nil:
			return out, err
		default:
			out = append(out, string(f))
		}
	}
}

func TestLineFramesSplitsLines(t *testing.T) {
	cases := []struct {
		name string
		in   string
		max  int
		want []string
	}{
		{"one line", "{}\n", 0, []string{"{}"}},
		{"two lines", "{\"a\":1}\n{\"b\":2}\n", 0, []string{`{"a":1}`, `{"b":2}`}},
		{"blank lines skipped", "\n\n{}\n\n\n[]\n\n", 0, []string{"{}", "[]"}},
		{"whitespace-only lines skipped", " \t\n\r\n \r\n{}\n\t\t\n", 0, []string{"{}"}},
		{"crlf", "{}\r\n[]\r\n", 0, []string{"{}", "[]"}},
		{"mixed endings", "1\r\n2\n3\r\n", 0, []string{"1", "2", "3"}},
		{"last line without newline", "{}\n[]", 0, []string{"{}", "[]"}},
		{"only line without newline", "{}", 0, []string{"{}"}},
		{"last line with bare cr", "{}\r", 0, []string{"{}"}},
		{"inner whitespace kept", "  {} \n", 0, []string{"  {} "}},
		{"inner cr kept", "a\rb\n", 0, []string{"a\rb"}},
		{"empty input", "", 0, nil},
		{"only blank lines", "\n\r\n  \n", 0, nil},
		{"line at the limit", "12345\n", 5, []string{"12345"}},
		{"crlf line at the limit", "12345\r\n", 5, []string{"12345"}},
		{"unterminated line at the limit", "12345", 5, []string{"12345"}},
		{"line over the limit", "123456\nok\n", 5, []string{"<too large>", "ok"}},
		{"crlf line over the limit", "123456\r\nok\r\n", 5, []string{"<too large>", "ok"}},
		{"unterminated line over the limit", "ok\n123456", 5, []string{"ok", "<too large>"}},
		{"long line over the limit", strings.Repeat("x", 1000) + "\nok\n", 5, []string{"<too large>", "ok"}},
		{"blank line over the limit", strings.Repeat(" ", 10) + "\nok\n", 5, []string{"<too large>", "ok"}},
		{"several oversize lines", "1234567\n12\n1234567\n1234567\n34\n", 5, []string{"<too large>", "12", "<too large>", "<too large>", "34"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, r := range []struct {
				name string
				r    io.Reader
			}{
				{"whole", strings.NewReader(c.in)},
				{"one byte reads", iotest.OneByteReader(strings.NewReader(c.in))},
				{"data with EOF", iotest.DataErrReader(strings.NewReader(c.in))},
			} {
				got, err := readAllFrames(t, NewLineFrames(r.r, io.Discard, nil, c.max))
				if err != io.EOF {
					t.Fatalf("%s: ended with %v, want io.EOF", r.name, err)
				}
				if strings.Join(got, "|") != strings.Join(c.want, "|") || len(got) != len(c.want) {
					t.Fatalf("%s: frames %q, want %q", r.name, got, c.want)
				}
			}
		})
	}
}

// A line that spans many fills of the 64 KiB read buffer must be refused
// whole, and the line after it read intact.
func TestLineFramesOversizeLineSpanningBufferFillsDoesNotCorruptNextLine(t *testing.T) {
	const limit = 100 << 10
	long := bytes.Repeat([]byte("y"), 300<<10)
	atLimit := bytes.Repeat([]byte("z"), limit)
	var in bytes.Buffer
	in.Write(long)
	in.WriteString("\n{\"id\":1}\n")
	in.Write(atLimit)
	in.WriteString("\r\n")
	in.Write(long)
	in.WriteString("\r\n")
	in.Write(atLimit) // unterminated, at EOF

	l := NewLineFrames(iotest.HalfReader(&in), io.Discard, nil, limit)
	ctx := context.Background()
	if _, err := l.ReadFrame(ctx); !errors.Is(err, ErrMessageTooLarge) {
		t.Fatalf("oversize line: err = %v, want ErrMessageTooLarge", err)
	}
	f, err := l.ReadFrame(ctx)
	if err != nil || string(f) != `{"id":1}` {
		t.Fatalf("line after the oversize one: %q, %v", f, err)
	}
	f, err = l.ReadFrame(ctx)
	if err != nil || !bytes.Equal(f, atLimit) {
		t.Fatalf("line of exactly the limit: %d bytes, %v", len(f), err)
	}
	if _, err := l.ReadFrame(ctx); !errors.Is(err, ErrMessageTooLarge) {
		t.Fatalf("second oversize line: err = %v, want ErrMessageTooLarge", err)
	}
	f, err = l.ReadFrame(ctx)
	if err != nil || !bytes.Equal(f, atLimit) {
		t.Fatalf("unterminated last line of exactly the limit: %d bytes, %v", len(f), err)
	}
	if _, err := l.ReadFrame(ctx); err != io.EOF {
		t.Fatalf("at the end: err = %v, want io.EOF", err)
	}
}

func TestLineFramesLongLineUnderDefaultLimitIsRead(t *testing.T) {
	line := bytes.Repeat([]byte("a"), 1<<20)
	l := NewLineFrames(bytes.NewReader(append(append([]byte(nil), line...), '\n')), io.Discard, nil, 0)
	f, err := l.ReadFrame(context.Background())
	if err != nil || !bytes.Equal(f, line) {
		t.Fatalf("1 MiB line: %d bytes, %v", len(f), err)
	}
}

// ReadSlice's result is only valid until the next read: a frame must not
// change when the next one is read.
func TestLineFramesFrameSurvivesNextRead(t *testing.T) {
	l := NewLineFrames(strings.NewReader("first\nsecond\nthird"), io.Discard, nil, 0)
	ctx := context.Background()
	a, _ := l.ReadFrame(ctx)
	b, _ := l.ReadFrame(ctx)
	c, _ := l.ReadFrame(ctx)
	if string(a) != "first" || string(b) != "second" || string(c) != "third" {
		t.Fatalf("frames %q %q %q", a, b, c)
	}
}

func TestLineFramesReadErrorIsReturned(t *testing.T) {
	boom := errors.New("boom")
	l := NewLineFrames(io.MultiReader(strings.NewReader("ok\npartial"), iotest.ErrReader(boom)), io.Discard, nil, 0)
	ctx := context.Background()
	if f, err := l.ReadFrame(ctx); err != nil || string(f) != "ok" {
		t.Fatalf("first frame: %q, %v", f, err)
	}
	if f, err := l.ReadFrame(ctx); !errors.Is(err, boom) {
		t.Fatalf("partial line then error: %q, %v; want %v", f, err, boom)
	}
}

func TestLineFramesWriteAppendsNewline(t *testing.T) {
	var out bytes.Buffer
	l := NewLineFrames(strings.NewReader(""), &out, nil, 0)
	ctx := context.Background()
	for _, f := range []string{`{"id":1,"result":{}}`, `{}`, ``} {
		if err := l.WriteFrame(ctx, []byte(f)); err != nil {
			t.Fatal(err)
		}
	}
	if want := "{\"id\":1,\"result\":{}}\n{}\n\n"; out.String() != want {
		t.Fatalf("wrote %q, want %q", out.String(), want)
	}
}

// countingWriter records each Write call.
type countingWriter struct {
	mu     sync.Mutex
	writes [][]byte
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes = append(w.writes, append([]byte(nil), p...))
	return len(p), nil
}

// Each frame goes out in one Write, so concurrent writers never interleave
// inside a line, and the caller's buffer is not modified.
func TestLineFramesWriteIsOneWritePerFrame(t *testing.T) {
	w := &countingWriter{}
	l := NewLineFrames(strings.NewReader(""), w, nil, 0)
	frame := []byte(`{"method":"x"}`)
	orig := append([]byte(nil), frame...)
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := l.WriteFrame(context.Background(), frame); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if len(w.writes) != 20 {
		t.Fatalf("%d writes, want 20", len(w.writes))
	}
	for _, got := range w.writes {
		if string(got) != string(orig)+"\n" {
			t.Fatalf("write %q", got)
		}
	}
	if !bytes.Equal(frame, orig) {
		t.Fatalf("caller's frame modified: %q", frame)
	}
}

func TestLineFramesWriteErrorIsReturned(t *testing.T) {
	boom := errors.New("boom")
	l := NewLineFrames(strings.NewReader(""), errWriter{boom}, nil, 0)
	if err := l.WriteFrame(context.Background(), []byte("{}")); !errors.Is(err, boom) {
		t.Fatalf("err = %v, want %v", err, boom)
	}
}

type errWriter struct{ err error }

func (w errWriter) Write([]byte) (int, error) { return 0, w.err }

type closeRecorder struct{ closed int }

func (c *closeRecorder) Close() error { c.closed++; return nil }

func TestLineFramesCloseClosesCloserIfAny(t *testing.T) {
	c := &closeRecorder{}
	if err := NewLineFrames(strings.NewReader(""), io.Discard, c, 0).Close(); err != nil || c.closed != 1 {
		t.Fatalf("Close: %v, closed %d times", err, c.closed)
	}
	if err := NewLineFrames(strings.NewReader(""), io.Discard, nil, 0).Close(); err != nil {
		t.Fatalf("Close without closer: %v", err)
	}
}

func TestLineFramesDefaultLimitIsMaxMessageBytes(t *testing.T) {
	for _, max := range []int{0, -1} {
		if l := NewLineFrames(strings.NewReader(""), io.Discard, nil, max); l.maxBytes != protocol.MaxMessageBytes {
			t.Fatalf("maxBytes %d gives limit %d, want %d", max, l.maxBytes, protocol.MaxMessageBytes)
		}
	}
}

// Through JSONConn, an oversize line is a malformed message and the
// connection carries on.
func TestJSONConnOverLineFramesRecoversFromOversizeLine(t *testing.T) {
	in := strings.Repeat("x", 100) + "\n" + `{"id":1,"method":"initialize"}` + "\r\n"
	c := NewJSONConn(NewLineFrames(strings.NewReader(in), io.Discard, nil, 50))
	ctx := context.Background()
	_, err := c.ReadMessage(ctx)
	var me *MalformedError
	if !errors.As(err, &me) || !errors.Is(err, ErrMessageTooLarge) {
		t.Fatalf("err = %v, want a *MalformedError wrapping ErrMessageTooLarge", err)
	}
	m, err := c.ReadMessage(ctx)
	if err != nil || m.Method != "initialize" || m.ID != IntID(1) {
		t.Fatalf("next message: %+v, %v", m, err)
	}
}

// --- WSFrames ------------------------------------------------------------

type wsMessage struct {
	typ  websocket.MessageType
	data []byte
	// parts, if > 1, sends the message as that many frames.
	parts int
}

// wsPair starts a server that sends msgs, in order, then reads messages
// into received until the connection ends; a message of type 0 makes it
// close the connection instead. It returns the client end wrapped in
// WSFrames with the given limit.
func wsPair(t *testing.T, maxBytes int64, msgs []wsMessage) (*WSFrames, <-chan wsMessage) {
	t.Helper()
	received := make(chan wsMessage, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
		if err != nil {
			close(received)
			return
		}
		defer close(received)
		defer c.CloseNow()
		c.SetReadLimit(-1)
		ctx := r.Context()
		for _, m := range msgs {
			if m.typ == 0 {
				c.Close(websocket.StatusNormalClosure, "bye")
				return
			}
			// A write error means the client is gone; its reads say so.
			if err := writeWS(ctx, c, m); err != nil {
				return
			}
		}
		for {
			typ, data, err := c.Read(ctx)
			if err != nil {
				return
			}
			received <- wsMessage{typ: typ, data: data}
		}
	}))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), &websocket.DialOptions{CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		t.Fatal(err)
	}
	f := NewWSFrames(c, maxBytes)
	t.Cleanup(func() { c.CloseNow() })
	return f, received
}

func writeWS(ctx context.Context, c *websocket.Conn, m wsMessage) error {
	if m.parts <= 1 {
		return c.Write(ctx, m.typ, m.data)
	}
	w, err := c.Writer(ctx, m.typ)
	if err != nil {
		return err
	}
	step := (len(m.data) + m.parts - 1) / m.parts
	for rest := m.data; len(rest) > 0; {
		n := min(step, len(rest))
		if _, err := w.Write(rest[:n]); err != nil {
			return err
		}
		rest = rest[n:]
	}
	return w.Close()
}

func TestWSFramesOversizeMessageDoesNotTearDownConnection(t *testing.T) {
	const limit = 16
	big := bytes.Repeat([]byte("b"), 1<<20)
	msgs := []wsMessage{
		{typ: websocket.MessageText, data: []byte(`{"id":1}`)},
		{typ: websocket.MessageText, data: bytes.Repeat([]byte("x"), limit+1)},
		{typ: websocket.MessageText, data: []byte(`{"id":2}`)},
		{typ: websocket.MessageText, data: bytes.Repeat([]byte("e"), limit)},
		{typ: websocket.MessageBinary, data: big},
		{typ: websocket.MessageBinary, data: []byte(`{"id":3}`)},
		{typ: websocket.MessageText, data: big, parts: 37},
		{typ: websocket.MessageText, data: []byte(`{"id":4}`), parts: 3},
	}
	want := []string{`{"id":1}`, "<too large>", `{"id":2}`, strings.Repeat("e", limit), "<too large>", `{"id":3}`, "<too large>", `{"id":4}`}

	f, _ := wsPair(t, limit, msgs)
	ctx := context.Background()
	for i, w := range want {
		got, err := f.ReadFrame(ctx)
		if w == "<too large>" {
			if !errors.Is(err, ErrMessageTooLarge) {
				t.Fatalf("message %d: %d bytes, err %v; want ErrMessageTooLarge", i, len(got), err)
			}
			continue
		}
		if err != nil || string(got) != w {
			t.Fatalf("message %d: %q, %v; want %q", i, got, err, w)
		}
	}
}

// The websocket library's own read limit (32 KiB by default) would close
// the connection; WSFrames applies protocol.MaxMessageBytes instead.
func TestWSFramesDefaultLimitIsNotTheLibraryReadLimit(t *testing.T) {
	big := bytes.Repeat([]byte("m"), 1<<20)
	f, _ := wsPair(t, 0, []wsMessage{
		{typ: websocket.MessageText, data: big},
		{typ: websocket.MessageText, data: []byte("after")},
	})
	ctx := context.Background()
	got, err := f.ReadFrame(ctx)
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("1 MiB message: %d bytes, %v", len(got), err)
	}
	got, err = f.ReadFrame(ctx)
	if err != nil || string(got) != "after" {
		t.Fatalf("next message: %q, %v", got, err)
	}
	if f.maxBytes != protocol.MaxMessageBytes {
		t.Fatalf("limit %d, want %d", f.maxBytes, protocol.MaxMessageBytes)
	}
}

func TestWSFramesReadsBinaryFrames(t *testing.T) {
	payload := []byte{0, 1, 2, 0xff, '{', '}'}
	f, _ := wsPair(t, 0, []wsMessage{{typ: websocket.MessageBinary, data: payload}})
	got, err := f.ReadFrame(context.Background())
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("binary message: %q, %v", got, err)
	}
}

func TestWSFramesWritesTextMessages(t *testing.T) {
	f, received := wsPair(t, 0, nil)
	ctx := context.Background()
	frames := []string{`{"id":1,"result":{}}`, `{"method":"x"}`}
	for _, fr := range frames {
		if err := f.WriteFrame(ctx, []byte(fr)); err != nil {
			t.Fatal(err)
		}
	}
	for _, fr := range frames {
		m := <-received
		if m.typ != websocket.MessageText || string(m.data) != fr {
			t.Fatalf("server got %v %q, want text %q", m.typ, m.data, fr)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-received; ok {
		t.Fatal("server received a message after Close")
	}
}

func TestWSFramesPeerCloseIsReportedWithItsStatus(t *testing.T) {
	f, _ := wsPair(t, 0, []wsMessage{
		{typ: websocket.MessageText, data: []byte("only")},
		{typ: 0}, // close
	})
	ctx := context.Background()
	if got, err := f.ReadFrame(ctx); err != nil || string(got) != "only" {
		t.Fatalf("%q, %v", got, err)
	}
	_, err := f.ReadFrame(ctx)
	if websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Fatalf("read after the peer closed: %v, want a normal closure", err)
	}
}

func TestWSFramesReadAfterCloseFails(t *testing.T) {
	f, _ := wsPair(t, 0, nil)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := f.ReadFrame(context.Background())
	if err == nil || errors.Is(err, ErrMessageTooLarge) {
		t.Fatalf("read after Close: %v, want a connection error", err)
	}
}

func TestJSONConnOverWSFramesRoundTrip(t *testing.T) {
	f, received := wsPair(t, 0, []wsMessage{
		{typ: websocket.MessageText, data: []byte(`{"id":1,"method":"initialize","params":{"clientName":"c"}}`)},
	})
	c := NewJSONConn(f)
	ctx := context.Background()
	m, err := c.ReadMessage(ctx)
	if err != nil || m.Kind != KindRequest || m.Method != protocol.MethodInitialize {
		t.Fatalf("%+v, %v", m, err)
	}
	if err := c.WriteResult(ctx, m.ID, map[string]string{"sessionId": "s"}); err != nil {
		t.Fatal(err)
	}
	got := <-received
	if string(got.data) != `{"id":1,"result":{"sessionId":"s"}}` {
		t.Fatalf("server got %q", got.data)
	}
}
