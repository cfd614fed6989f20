package mux

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// delayLine is one direction of an emulated link for tests in a synctest
// bubble: a write is serialised at rate bytes/s (0: unlimited) and
// readable delay after it leaves. Writes never block (the queue is the
// network; the multiplexer's windows bound it), reads sleep until the
// next write is due — durably, so the bubble's clock moves.
type delayLine struct {
	delay time.Duration
	rate  float64

	mu     sync.Mutex
	cond   *sync.Cond
	q      []packet
	cur    []byte
	free   time.Time // when the serialiser is next idle
	closed bool
	done   chan struct{} // closed with closed, to end a read's wait
}

type packet struct {
	at time.Time
	b  []byte
}

func newDelayLine(delay time.Duration, rate float64) *delayLine {
	d := &delayLine{delay: delay, rate: rate, done: make(chan struct{})}
	d.cond = sync.NewCond(&d.mu)
	return d
}

func (d *delayLine) write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return 0, net.ErrClosed
	}
	now := time.Now()
	depart := now
	if d.rate > 0 {
		if d.free.After(now) {
			depart = d.free
		}
		depart = depart.Add(time.Duration(float64(len(p)) / d.rate * float64(time.Second)))
		d.free = depart
	}
	d.q = append(d.q, packet{at: depart.Add(d.delay), b: append([]byte(nil), p...)})
	d.cond.Broadcast()
	return len(p), nil
}

func (d *delayLine) read(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for {
		if len(d.cur) > 0 {
			n := copy(p, d.cur)
			d.cur = d.cur[n:]
			return n, nil
		}
		if d.closed {
			return 0, io.EOF
		}
		if len(d.q) == 0 {
			d.cond.Wait()
			continue
		}
		if wait := time.Until(d.q[0].at); wait > 0 {
			d.mu.Unlock()
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-d.done:
				t.Stop()
			}
			d.mu.Lock()
			continue
		}
		d.cur, d.q = d.q[0].b, d.q[1:]
	}
}

func (d *delayLine) close() {
	d.mu.Lock()
	if !d.closed {
		close(d.done)
	}
	d.closed = true
	d.cond.Broadcast()
	d.mu.Unlock()
}

// linkConn is one end of a pair of delay lines.
type linkConn struct {
	in, out *delayLine
}

func (c *linkConn) Read(p []byte) (int, error)       { return c.in.read(p) }
func (c *linkConn) Write(p []byte) (int, error)      { return c.out.write(p) }
func (c *linkConn) Close() error                     { c.in.close(); c.out.close(); return nil }
func (c *linkConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *linkConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *linkConn) SetDeadline(time.Time) error      { return nil }
func (c *linkConn) SetReadDeadline(time.Time) error  { return nil }
func (c *linkConn) SetWriteDeadline(time.Time) error { return nil }

// link returns the two ends of an emulated link with the given round trip
// and rate (each way).
func link(rtt time.Duration, rate float64) (net.Conn, net.Conn) {
	ab, ba := newDelayLine(rtt/2, rate), newDelayLine(rtt/2, rate)
	return &linkConn{in: ba, out: ab}, &linkConn{in: ab, out: ba}
}

// transfer sends total bytes over one stream from c to s with the reader
// taking chunk bytes every pause (0: as fast as it can), and returns the
// receiving stream and the time its second half took (the first half
// includes the window's growth).
func transfer(t *testing.T, c, s *Session, total, chunk int, pause time.Duration) (*Stream, time.Duration) {
	t.Helper()
	st, err := c.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		buf := make([]byte, 1<<20)
		for sent := 0; sent < total; {
			n, err := st.Write(buf[:min(len(buf), total-sent)])
			if err != nil {
				return
			}
			sent += n
		}
		st.Close()
	}()
	rs, err := s.AcceptStream()
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, chunk)
	var half time.Time
	got := 0
	for {
		n, err := rs.Read(buf)
		got += n
		if got >= total/2 && half.IsZero() {
			half = time.Now()
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		rs.mu.Lock()
		if b := rs.buffered(); b > rs.rx.window {
			t.Errorf("%d bytes buffered with a window of %d", b, rs.rx.window)
		}
		rs.mu.Unlock()
		if pause > 0 {
			time.Sleep(pause)
		}
	}
	if got != total {
		t.Fatalf("read %d of %d bytes", got, total)
	}
	rs.Close()
	return rs, time.Since(half)
}

// A fast reader on a 40 ms path without a rate limit: the window grows
// from 256 KiB to its cap, and once grown nearly the whole window is in
// flight (a quarter-window refresh keeps ≥ 3/4 of it out).
func TestWindowGrowsToCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const rtt = 40 * time.Millisecond
		a, b := link(rtt, 0)
		cfg := Config{MaxStreamWindow: 8 << 20, KeepAlive: -1}
		c, _ := Client(a, cfg)
		s, _ := Server(b, cfg)
		defer c.Close()
		defer s.Close()
		rs, d := transfer(t, c, s, 256<<20, 1<<20, 0)
		if rs.rx.window != 8<<20 {
			t.Fatalf("window %d, want the 8 MiB cap", rs.rx.window)
		}
		// The second half, with the window grown: at window/RTT (200
		// MiB/s) it would take 0.64 s.
		rate := float64(128<<20) / d.Seconds()
		ideal := float64(8<<20) / rtt.Seconds()
		t.Logf("second 128 MiB in %v: %.0f MiB/s, %.0f%% of window/RTT", d, rate/(1<<20), 100*rate/ideal)
		if rate < 0.75*ideal {
			t.Fatalf("%.0f MiB/s, below 3/4 of window/RTT (%.0f MiB/s)", rate/(1<<20), ideal/(1<<20))
		}
	})
}

// On a 100 Mbit/s link with 160 ms of round trip (BDP 2 MB) the link is
// kept full. This emulation's queue is unbounded (a real sender's socket
// buffer is not), and the RTT the tuner uses includes it, so the window
// grows to its cap here: what bounds it is the cap and the budgets.
func TestRateLimitedLinkFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const rtt, rate = 160 * time.Millisecond, 12.5e6
		a, b := link(rtt, rate)
		cfg := Config{MaxStreamWindow: 8 << 20, SessionBudget: 6 << 20, KeepAlive: -1}
		c, _ := Client(a, cfg)
		s, _ := Server(b, cfg)
		defer c.Close()
		defer s.Close()
		rs, d := transfer(t, c, s, 100e6, 1<<20, 0)
		t.Logf("window %d, %.1f MB/s", rs.rx.window, 50e6/d.Seconds()/1e6)
		if got := 50e6 / d.Seconds(); got < 0.95*rate {
			t.Fatalf("%.1f MB/s on a %.1f MB/s link", got/1e6, rate/1e6)
		}
		if w := rs.rx.window; w > InitialWindow+6<<20 {
			t.Fatalf("window %d beyond the session budget", w)
		}
	})
}

// A reader slower than window/(2·RTT) never grows its window, and never
// has more than the window buffered (checked on every read in transfer).
func TestSlowReaderKeepsInitialWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := link(40*time.Millisecond, 0)
		cfg := Config{KeepAlive: -1}
		c, _ := Client(a, cfg)
		s, _ := Server(b, cfg)
		defer c.Close()
		defer s.Close()
		// 64 KiB per 50 ms: 1.3 MB/s, under 256 KiB / 80 ms = 3.3 MB/s.
		rs, _ := transfer(t, c, s, 8<<20, 64<<10, 50*time.Millisecond)
		if rs.rx.window != InitialWindow {
			t.Fatalf("window grew to %d for a slow reader", rs.rx.window)
		}
	})
}

// A reader that does not read at all: the writer stops once the window is
// sent, the receiver holds exactly the window, and the budget is untouched.
func TestStalledReaderBoundsMemory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := link(10*time.Millisecond, 0)
		c, _ := Client(a, Config{KeepAlive: -1})
		s, _ := Server(b, Config{KeepAlive: -1})
		defer c.Close()
		defer s.Close()
		st, _ := c.OpenStream()
		wrote := make(chan int, 1)
		go func() {
			n, _ := st.Write(make([]byte, 4<<20))
			wrote <- n
		}()
		rs, _ := s.AcceptStream()
		synctest.Wait()
		time.Sleep(time.Second)
		synctest.Wait()
		rs.mu.Lock()
		buffered, chunks := rs.buffered(), len(rs.chunks)
		rs.mu.Unlock()
		if buffered != InitialWindow || chunks > InitialWindow/chunkSize+1 {
			t.Fatalf("%d bytes in %d chunks buffered, want the 256 KiB window", buffered, chunks)
		}
		if s.own.Used() != 0 {
			t.Fatalf("budget used %d", s.own.Used())
		}
		st.SetWriteDeadline(time.Now())
		if n := <-wrote; n != InitialWindow {
			t.Fatalf("wrote %d before the deadline, want %d", n, InitialWindow)
		}
	})
}

// Two streams share a session budget: together they never grow beyond
// it, and a finished stream returns its share.
func TestSessionBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := link(40*time.Millisecond, 0)
		cfg := Config{MaxStreamWindow: 8 << 20, SessionBudget: 6 << 20, KeepAlive: -1}
		shared := NewBudget(5 << 20)
		scfg := cfg
		scfg.Shared = shared
		c, _ := Client(a, cfg)
		s, _ := Server(b, scfg)
		defer c.Close()
		defer s.Close()
		var wg sync.WaitGroup
		for i := 0; i < 2; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				transfer(t, c, s, 32<<20, 1<<20, 0)
			}()
		}
		wg.Wait()
		// The receiver's FIN reaches the sender a half round trip later;
		// the sender's reached the receiver before its EOF, so the
		// receiver has forgotten both streams already.
		synctest.Wait()
		if u := s.own.Used(); u != 0 {
			t.Fatalf("session budget still holds %d after the streams ended", u)
		}
		if u := shared.Used(); u != 0 {
			t.Fatalf("shared budget still holds %d", u)
		}
	})
}

// A peer that sends beyond the window is cut off with a protocol error
// before its excess is read, so it cannot make the session buffer more.
func TestPeerBeyondWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := net.Pipe()
		s, _ := Server(b, Config{KeepAlive: -1})
		go io.Copy(io.Discard, a) // the peer ignores what we send
		var h header
		h.encode(typeData, flagSYN, 1, 0)
		a.Write(h[:])
		h.encode(typeData, 0, 1, InitialWindow)
		a.Write(h[:])
		a.Write(make([]byte, InitialWindow))
		h.encode(typeData, 0, 1, 1)
		a.Write(h[:])
		<-s.CloseChan()
		var pe *ProtocolError
		if !errors.As(s.Err(), &pe) {
			t.Fatalf("session ended with %v, want a protocol error", s.Err())
		}
		a.Close()
	})
}

// A peer that never answers pings is dropped after KeepAlive +
// WriteTimeout.
func TestKeepAliveTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := net.Pipe()
		go io.Copy(io.Discard, a)
		start := time.Now()
		s, _ := Server(b, Config{KeepAlive: time.Second, WriteTimeout: 500 * time.Millisecond})
		<-s.CloseChan()
		if !errors.Is(s.Err(), ErrKeepAliveTimeout) {
			t.Fatalf("closed with %v", s.Err())
		}
		if d := time.Since(start); d != 1500*time.Millisecond {
			t.Fatalf("closed after %v, want 1.5 s", d)
		}
		a.Close()
	})
}

// A peer that answers keeps the session up indefinitely.
func TestKeepAliveAnswered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := link(100*time.Millisecond, 0)
		cfg := Config{KeepAlive: time.Second, WriteTimeout: 500 * time.Millisecond}
		c, _ := Client(a, cfg)
		s, _ := Server(b, cfg)
		time.Sleep(time.Minute)
		if c.IsClosed() || s.IsClosed() {
			t.Fatalf("closed: %v, %v", c.Err(), s.Err())
		}
		if c.RTT() != 100*time.Millisecond {
			t.Fatalf("RTT %v, want 100ms", c.RTT())
		}
		c.Close()
		s.Close()
	})
}

// A peer flooding pings while never reading our answers is dropped once
// ctrlQueue answers are waiting, rather than queued without bound.
func TestPingFlood(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := net.Pipe()
		s, _ := Server(b, Config{KeepAlive: -1})
		var h header
		for i := 0; i < 10*ctrlQueue; i++ {
			h.encode(typePing, 0, 0, uint32(i))
			if _, err := a.Write(h[:]); err != nil {
				break
			}
		}
		<-s.CloseChan()
		var pe *ProtocolError
		if !errors.As(s.Err(), &pe) {
			t.Fatalf("closed with %v", s.Err())
		}
		a.Close()
	})
}

// yamux's first byte is version 0: an old peer is named as such.
func TestOldPeer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := net.Pipe()
		s, _ := Server(b, Config{KeepAlive: -1})
		go io.Copy(io.Discard, a)
		hdr := make([]byte, 12)
		binary.BigEndian.PutUint32(hdr[4:], 1)
		a.Write(hdr)
		<-s.CloseChan()
		if !errors.Is(s.Err(), ErrVersion) {
			t.Fatalf("closed with %v", s.Err())
		}
		a.Close()
	})
}

func TestBudgetPartialGrants(t *testing.T) {
	b := NewBudget(10)
	if got := b.take(6); got != 6 {
		t.Fatalf("took %d of 6", got)
	}
	if got := b.take(6); got != 4 {
		t.Fatalf("took %d, want the 4 left", got)
	}
	if got := b.take(1); got != 0 {
		t.Fatalf("took %d from an empty budget", got)
	}
	b.release(10)
	if b.Used() != 0 {
		t.Fatalf("used %d after release", b.Used())
	}
}

// Frames a correct peer never sends end the session with a protocol
// error.
func TestProtocolViolations(t *testing.T) {
	for name, frames := range map[string][][3]uint32{ // type, flags, stream
		"SYN with the server's parity":   {{uint32(typeData), uint32(flagSYN), 2}},
		"SYN ids not increasing":         {{uint32(typeData), uint32(flagSYN), 3}, {uint32(typeData), uint32(flagSYN), 1}},
		"data for a stream never opened": {{uint32(typeData), 0, 5}},
		"window for our unopened stream": {{uint32(typeWindow), 0, 2}},
		"data after FIN":                 {{uint32(typeData), uint32(flagSYN | flagFIN), 1}, {uint32(typeData), 0, 1}},
		"unknown frame type":             {{9, 0, 0}},
		"ping on a stream":               {{uint32(typePing), 0, 1}},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a, b := net.Pipe()
				s, _ := Server(b, Config{KeepAlive: -1})
				go io.Copy(io.Discard, a)
				for _, f := range frames {
					var h header
					length := uint32(0)
					if f[0] == uint32(typeData) && f[1]&uint32(flagSYN) == 0 {
						length = 1 // data after FIN, or for an unopened stream
					}
					h.encode(byte(f[0]), byte(f[1]), f[2], length)
					a.Write(h[:])
					if length > 0 {
						a.Write([]byte{0})
					}
				}
				<-s.CloseChan()
				var pe *ProtocolError
				if !errors.As(s.Err(), &pe) {
					t.Fatalf("closed with %v, want a protocol error", s.Err())
				}
				a.Close()
			})
		})
	}
}
