package netem

import (
	"errors"
	"math"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

const ms = int64(time.Millisecond)

func TestShaperDelayOnly(t *testing.T) {
	s, err := NewShaper(Config{Delay: 10 * time.Millisecond}, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, now := range []int64{0, 1, 5 * ms, 5 * ms, 100 * ms} {
		rel, v := s.Admit(now, 1500)
		if v != Pass || rel != now+10*ms {
			t.Fatalf("at %d: release %d verdict %v, want %d Pass", now, rel, v, now+10*ms)
		}
	}
}

func TestShaperRateAndQueue(t *testing.T) {
	// 12 Mbit/s: a 1500-byte packet takes exactly 1 ms to serialise.
	s, err := NewShaper(Config{Rate: 12e6, Delay: 5 * time.Millisecond, Queue: 300_000}, 1)
	if err != nil {
		t.Fatal(err)
	}
	// A burst at t=0: packet i leaves after (i+1) ms of serialisation.
	for i := range 10 {
		rel, v := s.Admit(0, 1500)
		if want := int64(i+1)*ms + 5*ms; v != Pass || rel != want {
			t.Fatalf("packet %d: release %v verdict %v, want %v", i, rel, v, want)
		}
	}
	// Arriving after the serialiser is idle again: no queueing.
	if rel, _ := s.Admit(20*ms, 1500); rel != 26*ms {
		t.Fatalf("idle link: release %v, want %v", rel, 26*ms)
	}
	// Fill the queue: 300,000 bytes is 200 packets; the 201st in the same
	// instant is dropped, and one serialisation time later there is room.
	s, _ = NewShaper(Config{Rate: 12e6, Queue: 300_000}, 1)
	for i := range 200 {
		if _, v := s.Admit(0, 1500); v != Pass {
			t.Fatalf("packet %d of 200 dropped with a 300 kB queue", i)
		}
	}
	if _, v := s.Admit(0, 1500); v != Dropped {
		t.Fatalf("packet 201 verdict %v, want Dropped", v)
	}
	if _, v := s.Admit(ms, 1500); v != Pass {
		t.Fatalf("after 1 ms the queue has room again, verdict %v", v)
	}
	// Small packets still fit where a large one did not.
	if _, v := s.Admit(ms, 1500); v != Dropped {
		t.Fatalf("full again, verdict %v", v)
	}
}

func TestShaperLoss(t *testing.T) {
	s, _ := NewShaper(Config{Loss: 0.01}, 42)
	lost := 0
	const n = 200_000
	for i := range n {
		if _, v := s.Admit(int64(i), 100); v == Lost {
			lost++
		}
	}
	// Binomial: mean 2000, sd ~44.5; 5 sd either way.
	if lost < 1777 || lost > 2223 {
		t.Fatalf("lost %d of %d at 1%%", lost, n)
	}
	// The same seed loses the same packets.
	a, _ := NewShaper(Config{Loss: 0.5}, 7)
	b, _ := NewShaper(Config{Loss: 0.5}, 7)
	for i := range 1000 {
		_, va := a.Admit(int64(i), 1)
		_, vb := b.Admit(int64(i), 1)
		if va != vb {
			t.Fatal("same seed, different losses")
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{{Rate: -1}, {Rate: math.NaN()}, {Rate: math.Inf(1)}, {Loss: 1.5}, {Loss: -0.1}, {Loss: math.NaN()},
		{Delay: -time.Second}, {Delay: time.Hour}, {Queue: -1}} {
		if _, err := NewShaper(c, 1); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	if _, err := NewPipe(NewGoClock(), Config{}, 1, 0, 100); err == nil {
		t.Error("a 100-byte MTU accepted")
	}
	if _, err := NewPipe(NewGoClock(), Config{}, 1, 1000, 1500); err == nil {
		t.Error("a bound below one large packet accepted")
	}
	if q := BDPQueue(100e6, 160*time.Millisecond, 1.5); q != 3_000_000 {
		t.Errorf("BDPQueue(100 Mbit/s, 160 ms, 1.5) = %d, want 3,000,000", q)
	}
	if q := BDPQueue(1e3, time.Millisecond, 1); q != MinQueue {
		t.Errorf("tiny BDP queue %d, want MinQueue", q)
	}
}

// chanPort is an in-memory packet port: Read takes from in, Write records
// (packet, instant) on out.
type chanPort struct {
	in    chan []byte
	clock Clock
	mu    sync.Mutex
	got   []arrival
}

type arrival struct {
	seq int
	at  int64
}

var errClosed = errors.New("closed")

func (p *chanPort) ReadPacket(b []byte) (int, error) {
	pkt, ok := <-p.in
	if !ok {
		return 0, errClosed
	}
	return copy(b, pkt), nil
}

func (p *chanPort) WritePacket(b []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.got = append(p.got, arrival{seq: int(b[0])<<8 | int(b[1]), at: p.clock.Now()})
	return nil
}

func packet(seq, size int) []byte {
	b := make([]byte, size)
	b[0], b[1] = byte(seq>>8), byte(seq)
	return b
}

// runPipe feeds sends (packet sizes, each at its instant) through a pipe
// under a fake clock and returns what came out, when.
func runPipe(t *testing.T, cfg Config, maxBytes int, sends []int64, size int) ([]arrival, Stats) {
	t.Helper()
	var got []arrival
	var st Stats
	synctest.Test(t, func(t *testing.T) {
		clock := NewGoClock()
		p, err := NewPipe(clock, cfg, 3, maxBytes, 1500)
		if err != nil {
			t.Fatal(err)
		}
		p.SetSlack(0)
		port := &chanPort{in: make(chan []byte), clock: clock}
		stop := make(chan struct{})
		done := make(chan error)
		go func() { done <- p.Run(port, port, stop) }()
		for i, at := range sends {
			clock.SleepUntil(at)
			port.in <- packet(i, size)
		}
		time.Sleep(10 * time.Second) // fake time: lets everything drain
		close(port.in)
		<-done
		got, st = port.got, p.Stats()
	})
	return got, st
}

func TestPipeDelay(t *testing.T) {
	sends := []int64{0, 1 * ms, 2 * ms, 50 * ms}
	got, st := runPipe(t, Config{Delay: 10 * time.Millisecond}, 0, sends, 100)
	if len(got) != len(sends) {
		t.Fatalf("delivered %d of %d (%+v)", len(got), len(sends), st)
	}
	for i, a := range got {
		if a.seq != i || a.at != sends[i]+10*ms {
			t.Errorf("packet %d arrived as #%d at %v, want at %v", i, a.seq, time.Duration(a.at), time.Duration(sends[i]+10*ms))
		}
	}
}

func TestPipeRate(t *testing.T) {
	// 100 packets of 1500 bytes at once on a 12 Mbit/s link (1 ms each)
	// with a 20 ms delay: they arrive 1 ms apart from 21 ms on.
	sends := make([]int64, 100)
	got, st := runPipe(t, Config{Rate: 12e6, Delay: 20 * time.Millisecond, Queue: 1 << 20}, 0, sends, 1500)
	if len(got) != 100 {
		t.Fatalf("delivered %d of 100 (%+v)", len(got), st)
	}
	for i, a := range got {
		if want := int64(i+1)*ms + 20*ms; a.seq != i || a.at != want {
			t.Fatalf("packet %d arrived as #%d at %v, want %v", i, a.seq, time.Duration(a.at), time.Duration(want))
		}
	}
	// Rate over the burst: 150,000 bytes in 100 ms = 12 Mbit/s.
	if d := got[99].at - got[0].at + ms; d != 100*ms {
		t.Fatalf("burst took %v, want 100ms", time.Duration(d))
	}
}

func TestPipeDropTail(t *testing.T) {
	// A 15,000-byte queue is raised to MinQueue (262,140 bytes: 174 full
	// packets); of a burst of 300, the last 126 are dropped.
	sends := make([]int64, 300)
	got, st := runPipe(t, Config{Rate: 12e6, Queue: 15_000}, 0, sends, 1500)
	if len(got) != MinQueue/1500 || st.Dropped != uint64(300-MinQueue/1500) {
		t.Fatalf("delivered %d, dropped %d; want %d and %d", len(got), st.Dropped, MinQueue/1500, 300-MinQueue/1500)
	}
	for i, a := range got {
		if a.seq != i {
			t.Fatalf("reordered: #%d at position %d", a.seq, i)
		}
	}
}

func TestPipeMemoryBound(t *testing.T) {
	// Unlimited rate, 1 s delay, a bound of 100 small buffers: of 150
	// packets sent 1 ms apart, the last 50 find the bound reached.
	sends := make([]int64, 150)
	for i := range sends {
		sends[i] = int64(i) * ms
	}
	got, st := runPipe(t, Config{Delay: time.Second}, 100*1500, sends, 100)
	if len(got) != 100 || st.Overflow != 50 || st.MaxInFlight != 100 {
		t.Fatalf("delivered %d, overflow %d, max in flight %d; want 100, 50, 100", len(got), st.Overflow, st.MaxInFlight)
	}
	// A large (GSO) packet takes a 64 KiB buffer: two fit in 150,000
	// bytes, the third does not.
	got, st = runPipe(t, Config{Delay: time.Second}, 150_000, sends[:3], 20_000)
	if len(got) != 2 || st.Overflow != 1 {
		t.Fatalf("large packets: delivered %d, overflow %d; want 2, 1", len(got), st.Overflow)
	}
}

func TestPipeLoss(t *testing.T) {
	sends := make([]int64, 5000)
	for i := range sends {
		sends[i] = int64(i) * int64(time.Microsecond)
	}
	got, st := runPipe(t, Config{Loss: 0.1, Delay: time.Millisecond}, 0, sends, 100)
	// mean 500, sd ~21
	if st.Lost < 400 || st.Lost > 600 || len(got)+int(st.Lost) != 5000 {
		t.Fatalf("lost %d, delivered %d of 5000 at 10%%", st.Lost, len(got))
	}
	last := -1
	for _, a := range got {
		if a.seq <= last {
			t.Fatal("reordered or duplicated under loss")
		}
		last = a.seq
	}
}
