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
