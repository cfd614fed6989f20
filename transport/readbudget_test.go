package transport

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math/rand"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/coder/websocket"

	"github.com/outpost-exec/outpost/protocol"
)

// A reservation is taken from a budget and every budget above it, or
// from none; a refusal names the budget that was short, is
// ErrReadBudgetExhausted and of kind exhausted.
func TestReadBudgetReserveIsAllOrNothingUpTheChain(t *testing.T) {
	proc := NewReadBudget("process", 100, nil)
	a := NewReadBudget("connection", 60, proc)
	b := NewReadBudget("connection", 60, proc)
	if err := a.Reserve(60); err != nil {
		t.Fatal(err)
	}
	err := a.Reserve(1)
	var be *ReadBudgetError
	if !errors.As(err, &be) || be.Scope != "connection" || be.Limit != 60 || be.Want != 1 {
		t.Fatalf("past the connection's budget: %v", err)
	}
	if !errors.Is(err, ErrReadBudgetExhausted) || protocol.KindOf(err) != protocol.KindExhausted {
		t.Fatalf("%v: not ErrReadBudgetExhausted of kind exhausted (kind %q)", err, protocol.KindOf(err))
	}
	// b has room of its own, the process has not: b is not charged.
	err = b.Reserve(41)
	if !errors.As(err, &be) || be.Scope != "process" {
		t.Fatalf("past the process's budget: %v", err)
	}
	if b.Used() != 0 || proc.Used() != 60 {
		t.Fatalf("a refused reservation left b %d, process %d", b.Used(), proc.Used())
	}
	if err := b.Reserve(40); err != nil {
		t.Fatal(err)
	}
	a.Release(60)
	b.Release(40)
	if a.Used() != 0 || b.Used() != 0 || proc.Used() != 0 {
		t.Fatalf("after release: %d %d %d", a.Used(), b.Used(), proc.Used())
	}
	// Nothing to take always fits; a nil budget bounds nothing.
	if err := NewReadBudget("x", 0, nil).Reserve(0); err != nil {
		t.Fatal(err)
	}
	var none *ReadBudget
	if err := none.Reserve(1 << 40); err != nil || none.Used() != 0 {
		t.Fatal(err)
	}
	none.Release(1 << 40)
}

func TestReadBudgetReleasingMoreThanReservedPanics(t *testing.T) {
	b := NewReadBudget("x", 10, nil)
	b.Reserve(5)
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	b.Release(6)
}

// Under contention (run with -race) no budget is ever over its limit, and
// everything comes back.
func TestReadBudgetConcurrentReservationsNeverExceedTheLimits(t *testing.T) {
	proc := NewReadBudget("process", 1000, nil)
	conns := []*ReadBudget{NewReadBudget("connection", 400, proc), NewReadBudget("connection", 400, proc), NewReadBudget("connection", 700, proc)}
	// A reservation held throughout makes refusals certain on the first
	// connection (300 of its 400), however the goroutines interleave.
	if err := conns[0].Reserve(300); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var refused, granted int
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewSource(int64(g)))
			c := conns[g%len(conns)]
			for range 2000 {
				n := int64(1 + r.Intn(150))
				if err := c.Reserve(n); err != nil {
					if !errors.Is(err, ErrReadBudgetExhausted) {
						t.Error(err)
					}
					mu.Lock()
					refused++
					mu.Unlock()
					continue
				}
				if u := proc.Used(); u > proc.Limit() {
					t.Errorf("process budget at %d of %d", u, proc.Limit())
				}
				if u := c.Used(); u > c.Limit() {
					t.Errorf("connection budget at %d of %d", u, c.Limit())
				}
				mu.Lock()
				granted++
				mu.Unlock()
				c.Release(n)
			}
		}()
	}
	wg.Wait()
	conns[0].Release(300)
	if proc.Used() != 0 || conns[0].Used() != 0 || conns[1].Used() != 0 || conns[2].Used() != 0 {
		t.Fatalf("left reserved: %d", proc.Used())
	}
	if granted == 0 || refused == 0 {
		t.Fatalf("granted %d, refused %d: the test did not contend", granted, refused)
	}
}

// A frame's buffer grows at most 4× what has arrived, and to exactly the
// frame's size at the end (a 1 MiB block: one step from 256 KiB).
func TestFrameGrowth(t *testing.T) {
	for _, tc := range []struct{ have, n, want int }{
		{0, 100, 100},
		{0, 128 << 10, 128 << 10}, // within FreeFrameBytes of the end: all of it
		{0, 64 << 20, 64 << 10},
		{64 << 10, 64 << 20, 256 << 10},
		{256 << 10, 1<<20 + 60, 1<<20 + 60},
		{1 << 20, 64 << 20, 4 << 20},
		{16 << 20, 64 << 20, 64 << 20},
	} {
		if got := frameGrowth(tc.have, tc.n); got != tc.want {
			t.Errorf("frameGrowth(%d, %d) = %d, want %d", tc.have, tc.n, got, tc.want)
		}
	}
}

// stallPipe is a net.Pipe: the test reads one end and writes the other.
func stallPipe(t *testing.T) (reader, writer net.Conn) {
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// A frame past the budget is dropped as soon as the budget refuses it —
// not after the peer has sent it all — with the request's id, kind
// exhausted; the budget is whole again, the rest of the frame is
// discarded and the next frame decodes. A frame within the budget is
// read, and its reservation returned once it is decoded. Frames within
// FreeFrameBytes need no budget at all.
func TestMsgpackFramePastTheReadBudgetIsDroppedAtOnce(t *testing.T) {
	ctx := context.Background()
	budget := NewReadBudget("connection", 1<<20, nil)
	r, w := stallPipe(t)
	c := NewMsgpackConn(r, 0)
	c.SetReadBudget(budget)

	const frame = 4 << 20
	head := mpHeadOfRequest(IntID(42), "fs/writeFile", frame)
	rest := make([]byte, frame+4-len(head))
	more := make(chan struct{})
	go func() {
		w.Write(head)
		w.Write(rest[:2<<20]) // then stalls until the refusal has been read
		<-more
		w.Write(rest[2<<20:])
		w.Write(mpFrames(mpValidBody))
		// Within the budget: 512 KiB.
		NewMsgpackConn(w, 0).WriteRequest(ctx, IntID(43), "fs/writeFile", protocol.FsWriteFileParams{Path: "/x", Data: make([]byte, 512<<10)})
	}()
	_, err := c.ReadMessage(ctx)
	var me *MalformedError
	if !errors.As(err, &me) || !errors.Is(err, ErrReadBudgetExhausted) || protocol.KindOf(err) != protocol.KindExhausted {
		t.Fatalf("a frame past the budget: %v", err)
	}
	if !me.HasID || me.ReplyID() != IntID(42) {
		t.Fatalf("the refusal's reply id is %v (has %v), want 42", me.ReplyID(), me.HasID)
	}
	if budget.Used() != 0 {
		t.Fatalf("%d bytes still reserved after the drop", budget.Used())
	}
	close(more)
	mpWantPing(t, c)
	m, err := c.ReadMessage(ctx)
	if err != nil || m.ID != IntID(43) {
		t.Fatalf("a frame within the budget: %+v, %v", m, err)
	}
	if budget.Used() != 0 {
		t.Fatalf("%d bytes still reserved after the frame was decoded", budget.Used())
	}

	// A budget of nothing still reads every frame up to FreeFrameBytes.
	small := NewMsgpackConn(newMpBuf(mpFrames(mpValidBody)), 0)
	small.SetReadBudget(NewReadBudget("none", 0, nil))
	mpWantPing(t, small)
}

// mpHeadOfRequest is the frame header and the body's start of a request
// whose payload is a bin filling a frame of frame bytes.
func mpHeadOfRequest(id ID, method string, frame int) []byte {
	body := []byte{0x94, 0x01, 0xd3}
	body = binary.BigEndian.AppendUint64(body, uint64(id.Num))
	body = append(body, 0xa0|byte(len(method)))
	body = append(body, method...)
	body = append(body, 0xc6)
	body = binary.BigEndian.AppendUint32(body, uint32(frame-len(body)-4))
	return append(binary.BigEndian.AppendUint32(nil, uint32(frame)), body...)
}

// The id of a request dropped part way is read from what arrived, in any
// id form; a notification or a cut-short id has none.
func TestMsgpackPrefixID(t *testing.T) {
	for _, tc := range []struct {
		name string
		body []byte
		id   ID
		ok   bool
	}{
		{"int id", mpBody(t, 1, 7, "m", nil), IntID(7), true},
		{"string id", mpBody(t, 1, "abc", "m", nil), ID{Str: "abc", IsStr: true}, true},
		{"notification", mpBody(t, 2, nil, "m", nil), ID{}, false},
		{"response", mpBody(t, 3, 7, "", nil), ID{}, false},
		{"id cut short", []byte{0x94, 0x01, 0xd3, 0, 0}, ID{}, false},
		{"not an array", []byte{0x81}, ID{}, false},
		{"empty", nil, ID{}, false},
	} {
		id, ok := msgpackPrefixID(tc.body)
		if ok != tc.ok || id != tc.id {
			t.Errorf("%s: %v %v, want %v %v", tc.name, id, ok, tc.id, tc.ok)
		}
	}
}

// stdio lines: a line past the budget is dropped with its request's id
// (kind exhausted) and the next line decodes; a long line within it is
// read and its reservation returned by the JSONConn once decoded.
func TestJSONLineFramesPastTheReadBudget(t *testing.T) {
	ctx := context.Background()
	big := `{"id":7,"method":"fs/writeFile","params":{"dataBase64":"` + strings.Repeat("A", 2<<20) + `"}}`
	fits := `{"id":8,"method":"fs/writeFile","params":{"dataBase64":"` + strings.Repeat("A", 512<<10) + `"}}`
	in := big + "\n" + `{"id":9,"method":"ping"}` + "\n" + fits + "\n"
	budget := NewReadBudget("process", 1<<20, nil)
	lf := NewLineFrames(strings.NewReader(in), io.Discard, nil, 0)
	lf.SetReadBudget(budget)
	c := NewJSONConn(lf)
	_, err := c.ReadMessage(ctx)
	var me *MalformedError
	if !errors.As(err, &me) || protocol.KindOf(err) != protocol.KindExhausted || me.ReplyID() != IntID(7) {
		t.Fatalf("a line past the budget: %v (reply id %v)", err, me)
	}
	if budget.Used() != 0 {
		t.Fatalf("%d bytes reserved after the drop", budget.Used())
	}
	if m, err := c.ReadMessage(ctx); err != nil || m.ID != IntID(9) {
		t.Fatalf("the next line: %+v, %v", m, err)
	}
	m, err := c.ReadMessage(ctx)
	if err != nil || m.ID != IntID(8) {
		t.Fatalf("a line within the budget: %+v, %v", m, err)
	}
	var p protocol.FsWriteFileParams
	if err := m.Params.Decode(&p); err != nil || len(p.Data) != 3*(512<<10)/4 {
		t.Fatalf("its params: %d bytes, %v", len(p.Data), err)
	}
	if budget.Used() != 0 {
		t.Fatalf("%d bytes reserved after the line was decoded", budget.Used())
	}
}

// WebSocket messages: the same, over a real WebSocket.
func TestJSONWSFramesPastTheReadBudget(t *testing.T) {
	ctx := context.Background()
	big := []byte(`{"id":"big","method":"fs/writeFile","params":{"dataBase64":"` + strings.Repeat("A", 2<<20) + `"}}`)
	fits := []byte(`{"id":8,"method":"fs/writeFile","params":{"dataBase64":"` + strings.Repeat("A", 512<<10) + `"}}`)
	f, _ := wsPair(t, 0, []wsMessage{
		{typ: websocket.MessageText, data: big, parts: 16},
		{typ: websocket.MessageText, data: []byte(`{"id":9,"method":"ping"}`)},
		{typ: websocket.MessageText, data: fits, parts: 5},
	})
	budget := NewReadBudget("process", 1<<20, nil)
	f.SetReadBudget(budget)
	c := NewJSONConn(f)
	_, err := c.ReadMessage(ctx)
	var me *MalformedError
	if !errors.As(err, &me) || protocol.KindOf(err) != protocol.KindExhausted || me.ReplyID() != (ID{Str: "big", IsStr: true}) {
		t.Fatalf("a message past the budget: %v (reply id %v)", err, me)
	}
	if budget.Used() != 0 {
		t.Fatalf("%d bytes reserved after the drop", budget.Used())
	}
	if m, err := c.ReadMessage(ctx); err != nil || m.ID != IntID(9) {
		t.Fatalf("the next message: %+v, %v", m, err)
	}
	m, err := c.ReadMessage(ctx)
	if err != nil || m.ID != IntID(8) {
		t.Fatalf("a message within the budget: %+v, %v", m, err)
	}
	if budget.Used() != 0 {
		t.Fatalf("%d bytes reserved after the message was decoded", budget.Used())
	}
	var p protocol.FsWriteFileParams
	if err := m.Params.Decode(&p); err != nil || !bytes.Equal(p.Data, make([]byte, 3*(512<<10)/4)) {
		t.Fatalf("its params: %d bytes, %v", len(p.Data), err)
	}
}

func TestJSONPrefixID(t *testing.T) {
	for _, tc := range []struct {
		head string
		id   ID
		ok   bool
	}{
		{`{"id":7,"method":"x","params":{"a":"bbbb`, IntID(7), true},
		{`{"method":"x","id":"s","params":[1,2`, ID{Str: "s", IsStr: true}, true},
		{`{"method":"x","params":{"a":"bbbb`, ID{}, false},
		{`{"id":null,"method":"x"`, ID{}, false},
		{`{"id":1.5,`, ID{}, false},
		{`[1,2`, ID{}, false},
		{``, ID{}, false},
	} {
		id, ok := jsonPrefixID([]byte(tc.head))
		if ok != tc.ok || id != tc.id {
			t.Errorf("%s: %v %v, want %v %v", tc.head, id, ok, tc.id, tc.ok)
		}
	}
}
