package mux

import (
	"errors"
	"os"
	"runtime"
	"testing"
	"time"
)

// heapInUse is the live heap after a collection.
func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}

// readErr is what a Read on st reports within a moment: ErrStreamReset
// for a stream the peer reset, a deadline error for one still open.
func readErr(st *Stream) error {
	st.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	defer st.SetReadDeadline(time.Time{})
	_, err := st.Read(make([]byte, 1))
	return err
}

// The reported attack: a peer opens the whole accept backlog (256
// streams) and fills each one's initial window (256 KiB), and nobody
// accepts them: 64 MiB of heap before AcceptBacklogBytes. Now the backlog
// holds at most AcceptBacklogBytes (4 MiB): the streams past it are reset
// (the peer sees ErrStreamReset), those within it keep their data, and
// the backlog's bytes come back as streams are accepted.
func TestUnacceptedStreamsAreBoundedInBytes(t *testing.T) {
	cfg := DefaultConfig()
	c, s := pair(t, Config{}, Config{})
	base := heapInUse()

	data := make([]byte, InitialWindow)
	streams := make([]*Stream, cfg.AcceptBacklog)
	for i := range streams {
		st, err := c.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		streams[i] = st
		// Within the initial window: sent at once, one frame. The write
		// may see the reset of an earlier stream, not of this one (its
		// data is sent before the server can refuse it).
		if _, err := st.Write(data); err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
	}
	// The server answers the ping after it has read every frame before it,
	// and queues the resets it owes before the answer.
	if _, err := c.Ping(); err != nil {
		t.Fatal(err)
	}
	held := heapInUse() - base
	t.Logf("%d unaccepted streams with %d KiB each: %d KiB of heap", len(streams), InitialWindow>>10, held>>10)
	if limit := cfg.AcceptBacklogBytes + 4<<20; held > limit {
		t.Fatalf("the unaccepted streams hold %d bytes of heap, want at most %d (AcceptBacklogBytes %d + slack)", held, limit, cfg.AcceptBacklogBytes)
	}
	kept := int(cfg.AcceptBacklogBytes / InitialWindow)
	for i, st := range streams {
		err := readErr(st)
		if reset := errors.Is(err, ErrStreamReset); reset != (i >= kept) {
			t.Fatalf("stream %d of %d (backlog bytes for %d): read %v", i, len(streams), kept, err)
		}
	}
	s.mu.Lock()
	backlog := s.backlogBytes
	s.mu.Unlock()
	if backlog != cfg.AcceptBacklogBytes {
		t.Fatalf("backlog charged %d, want %d", backlog, cfg.AcceptBacklogBytes)
	}

	// Accepting returns only the streams kept, each with all its data,
	// and gives the backlog its bytes back.
	buf := make([]byte, InitialWindow)
	for i := range kept {
		st, err := s.AcceptStream()
		if err != nil {
			t.Fatal(err)
		}
		if st.StreamID() != streams[i].StreamID() {
			t.Fatalf("accepted stream %d, want %d (reset streams must be skipped)", st.StreamID(), streams[i].StreamID())
		}
		n := 0
		for n < len(buf) {
			k, err := st.Read(buf[n:])
			if err != nil {
				t.Fatalf("stream %d: %v after %d bytes", i, err, n)
			}
			n += k
		}
	}
	s.mu.Lock()
	backlog = s.backlogBytes
	s.mu.Unlock()
	if backlog != 0 {
		t.Fatalf("backlog still charged %d after every stream was accepted", backlog)
	}
	next, err := c.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := next.Write(data); err != nil {
		t.Fatal(err)
	}
	c.Ping()
	if err := readErr(next); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a stream opened once the backlog was free: %v", err)
	}
	st, err := s.AcceptStream()
	if err != nil || st.StreamID() != next.StreamID() {
		t.Fatalf("accepted %v, %v; want stream %d", st, err, next.StreamID())
	}
}

// A stream's first chunk is small when its first frame is: a backlog of
// streams that each carry one small message (a relay's spliced clients,
// an executor's control streams arriving together) is charged 4 KiB
// apiece, so the whole count fits in the bytes.
func TestSmallFirstFramesFitTheWholeBacklog(t *testing.T) {
	cfg := DefaultConfig()
	c, s := pair(t, Config{}, Config{})
	msg := make([]byte, 300)
	streams := make([]*Stream, cfg.AcceptBacklog)
	for i := range streams {
		st, err := c.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Write(msg); err != nil {
			t.Fatal(err)
		}
		streams[i] = st
	}
	if _, err := c.Ping(); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	backlog := s.backlogBytes
	s.mu.Unlock()
	if want := int64(len(streams) * smallChunk); backlog != want {
		t.Fatalf("backlog charged %d for %d small first frames, want %d", backlog, len(streams), want)
	}
	for i := range streams {
		st, err := s.AcceptStream()
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(msg)+1)
		st.SetReadDeadline(time.Now().Add(time.Second))
		if n, err := st.Read(got); err != nil || n != len(msg) {
			t.Fatalf("stream %d: read %d, %v", i, n, err)
		}
	}
}
