package transport

import (
	"errors"
	"net"
	"testing"
	"testing/synctest"

	"github.com/outpost-exec/outpost/transport/mux"
)

// muxPair runs a client session with the defaults against a server one
// with cfg, over net.Pipe.
func muxPair(t *testing.T, cfg MuxConfig) (client, server *mux.Session) {
	t.Helper()
	a, b := net.Pipe()
	c, err := MuxClient(a, DefaultMuxConfig())
	if err != nil {
		t.Fatal(err)
	}
	s, err := MuxServer(b, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c, s
}

// resetByPeer reports whether the peer reset st (its Read then fails
// with ErrStreamReset) rather than keeping it open.
func resetByPeer(t *testing.T, st *mux.Stream) bool {
	t.Helper()
	synctest.Wait() // the peer has read the SYN and answered, or not
	done := make(chan error, 1)
	go func() { _, err := st.Read(make([]byte, 1)); done <- err }()
	synctest.Wait()
	select {
	case err := <-done:
		return errors.Is(err, mux.ErrStreamReset)
	default:
		st.Reset()
		<-done
		return false
	}
}

// MaxStreams reaches the mux: with 1, a second stream the client opens
// while the first is open is reset by the server.
func TestMuxConfigMaxStreams(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := DefaultMuxConfig()
		cfg.MaxStreams = 1
		c, s := muxPair(t, cfg)
		go func() {
			for {
				if _, err := s.AcceptStream(); err != nil {
					return
				}
			}
		}()
		first, err := c.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		second, err := c.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		if !resetByPeer(t, second) {
			t.Fatal("the second stream was kept open with MaxStreams 1")
		}
		if resetByPeer(t, first) {
			t.Fatal("the first stream was reset")
		}
	})
}

// AcceptBacklog reaches the mux: with 1 and nobody accepting, a second
// stream is reset.
func TestMuxConfigAcceptBacklog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := DefaultMuxConfig()
		cfg.AcceptBacklog = 1
		c, _ := muxPair(t, cfg)
		first, _ := c.OpenStream()
		second, _ := c.OpenStream()
		if !resetByPeer(t, second) {
			t.Fatal("the second stream was kept with AcceptBacklog 1")
		}
		if resetByPeer(t, first) {
			t.Fatal("the first stream was reset")
		}
	})
}

// The defaults keep the mux's own (1024 streams, backlog 256); 0 selects
// the mux default, a negative MaxStreams is refused.
func TestMuxConfigStreamDefaults(t *testing.T) {
	d := DefaultMuxConfig()
	if d.MaxStreams != 1024 || d.AcceptBacklog != 256 {
		t.Fatalf("defaults MaxStreams %d, AcceptBacklog %d", d.MaxStreams, d.AcceptBacklog)
	}
	if m := d.mux(); m.MaxStreams != 1024 || m.AcceptBacklog != 256 {
		t.Fatalf("passed to the mux: MaxStreams %d, AcceptBacklog %d", m.MaxStreams, m.AcceptBacklog)
	}
	d.MaxStreams = 0
	if err := d.Validate(); err != nil {
		t.Fatalf("MaxStreams 0: %v", err)
	}
	d.MaxStreams = -1
	if err := d.Validate(); err == nil {
		t.Fatal("MaxStreams -1 accepted")
	}
}

// AcceptBacklogBytes reaches the mux: with the least allowed (256 KiB)
// and nobody accepting, a stream that sends a full initial window is
// kept, and one more that sends any data is reset. 0 selects the mux's
// default; below 256 KiB is refused.
func TestMuxConfigAcceptBacklogBytes(t *testing.T) {
	d := DefaultMuxConfig()
	if d.AcceptBacklogBytes != 4<<20 || d.mux().AcceptBacklogBytes != 4<<20 {
		t.Fatalf("default %d, passed on %d", d.AcceptBacklogBytes, d.mux().AcceptBacklogBytes)
	}
	for v, ok := range map[int64]bool{0: true, mux.InitialWindow: true, mux.InitialWindow - 1: false, -1: false} {
		c := DefaultMuxConfig()
		c.AcceptBacklogBytes = v
		if err := c.Validate(); (err == nil) != ok {
			t.Errorf("AcceptBacklogBytes %d: %v", v, err)
		}
	}
	synctest.Test(t, func(t *testing.T) {
		cfg := DefaultMuxConfig()
		cfg.AcceptBacklogBytes = mux.InitialWindow
		c, _ := muxPair(t, cfg)
		first, _ := c.OpenStream()
		go first.Write(make([]byte, mux.InitialWindow))
		synctest.Wait()
		second, _ := c.OpenStream()
		go second.Write([]byte("x"))
		if !resetByPeer(t, second) {
			t.Fatal("a stream past the backlog's bytes was kept")
		}
		if resetByPeer(t, first) {
			t.Fatal("the stream within the backlog's bytes was reset")
		}
	})
}
