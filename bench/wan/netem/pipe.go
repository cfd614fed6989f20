package netem

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Clock is the time source of a Pipe: Now in nanoseconds on a monotonic
// clock, and a sleep until an instant on it.
type Clock interface {
	Now() int64
	SleepUntil(t int64)
}

// GoClock is time.Now and time.Sleep: under testing/synctest it runs on the
// bubble's fake clock. It wakes up to about a millisecond late on Linux (the
// Go runtime's timer resolution when idle), so real links use RealClock.
type GoClock struct{ base time.Time }

// NewGoClock returns a GoClock whose zero is now.
func NewGoClock() *GoClock { return &GoClock{base: time.Now()} }

func (c *GoClock) Now() int64 { return int64(time.Since(c.base)) }

func (c *GoClock) SleepUntil(t int64) {
	if d := time.Duration(t - c.Now()); d > 0 {
		time.Sleep(d)
	}
}

// PacketReader reads one whole packet per call.
type PacketReader interface {
	ReadPacket(buf []byte) (int, error)
}

// PacketWriter writes one whole packet per call.
type PacketWriter interface {
	WritePacket(pkt []byte) error
}

// Stats counts what a Pipe did; every field only grows.
type Stats struct {
	Packets, Bytes uint64 // delivered
	Lost           uint64 // random loss
	Dropped        uint64 // drop-tail queue full
	Overflow       uint64 // the buffer bound (maxBytes) was reached
	WriteErrors    uint64
	MaxInFlight    uint64 // the most packets held at once
}

// Pipe carries packets one way: a reader goroutine stamps each packet with
// the Shaper's release instant and queues it; a writer goroutine sleeps
// until the head's instant and writes it. Packets wait in buffers of two
// sizes (small: one MTU; large: a 64 KiB GSO packet), allocated as needed
// and reused; MaxBytes bounds their total, whatever the rate and delay —
// that is the whole memory bound (DefaultMaxBytes, 64 MiB, holds 80 ms at
// 6 Gbit/s). A packet that finds it reached is dropped as Overflow.
type Pipe struct {
	clock     Clock
	maxBytes  int
	smallSize int
	// slack is how early a packet may leave: sleeping for less is not
	// worth a wake-up, and writing a few tens of microseconds early is
	// below what the delays measure.
	slack int64
	// hdr is a per-packet header (virtio_net_hdr with GSO) not counted as
	// wire bytes by the shaper.
	hdr int

	mu     sync.Mutex
	shaper *Shaper // replaced by Set; used by the reader only, under mu

	q                    chan item   // FIFO of queued packets; never blocks: see NewPipe
	freeSmall, freeLarge chan []byte // buffers back from the writer
	held                 atomic.Int64

	packets, bytes, lost, dropped, overflow, writeErrs, maxInFlight atomic.Uint64
	inFlight                                                        atomic.Int64
}

type item struct {
	buf     []byte
	n       int
	release int64
}

// DefaultMaxBytes bounds the buffers of one direction of a link.
const DefaultMaxBytes = 64 << 20

// largeSize is the largest packet a TUN hands over with GSO (64 KiB plus
// the virtio header).
const largeSize = 65535 + 16

// NewPipe returns a pipe shaping with cfg. maxBytes bounds the buffered
// packets (DefaultMaxBytes when <= 0); smallSize is the MTU (plus any
// per-packet header): larger packets take a 64 KiB buffer.
func NewPipe(clock Clock, cfg Config, seed uint64, maxBytes, smallSize int) (*Pipe, error) {
	sh, err := NewShaper(cfg, seed)
	if err != nil {
		return nil, err
	}
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	if smallSize < 576 || smallSize > largeSize {
		return nil, fmt.Errorf("netem: packet size must be in [576, %d] bytes", largeSize)
	}
	if maxBytes < largeSize {
		return nil, fmt.Errorf("netem: buffer bound %d is below one 64 KiB packet", maxBytes)
	}
	// Every queued item holds a buffer of at least smallSize bytes, so
	// maxBytes/smallSize items fill the queue: sends never block.
	return &Pipe{clock: clock, maxBytes: maxBytes, smallSize: smallSize, slack: int64(50 * time.Microsecond), shaper: sh,
		q: make(chan item, maxBytes/smallSize+1), freeSmall: make(chan []byte, maxBytes/smallSize+1), freeLarge: make(chan []byte, maxBytes/largeSize+1)}, nil
}

// SetSlack sets how early a packet may be written (0: exactly on time).
func (p *Pipe) SetSlack(d time.Duration) { p.slack = int64(d) }

// Set replaces the shaping; packets already queued keep their instants.
func (p *Pipe) Set(cfg Config, seed uint64) error {
	sh, err := NewShaper(cfg, seed)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.shaper = sh
	p.mu.Unlock()
	return nil
}

// Config is the current shaping.
func (p *Pipe) Config() Config {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.shaper.Config()
}

// Stats returns the counters so far.
func (p *Pipe) Stats() Stats {
	return Stats{Packets: p.packets.Load(), Bytes: p.bytes.Load(), Lost: p.lost.Load(), Dropped: p.dropped.Load(),
		Overflow: p.overflow.Load(), WriteErrors: p.writeErrs.Load(), MaxInFlight: p.maxInFlight.Load()}
}

// Run carries packets from src to dst until reading src fails (its
// device closed) or stop is closed, and returns the read error. Packets
// still queued then are discarded. A write error is counted, not fatal:
// a TUN refuses a packet now and then (its interface going down).
func (p *Pipe) Run(src PacketReader, dst PacketWriter, stop <-chan struct{}) error {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		p.write(dst, stop, done)
	}()
	err := p.read(src, stop)
	close(done)
	wg.Wait()
	return err
}

// SetHeader says each packet starts with n bytes of header (virtio_net_hdr)
// that the shaper does not count as wire bytes.
func (p *Pipe) SetHeader(n int) { p.hdr = n }

// buffer returns a buffer for an n-byte packet, or nil when the bound is
// reached.
func (p *Pipe) buffer(n int) []byte {
	free, size := p.freeSmall, p.smallSize
	if n > p.smallSize {
		free, size = p.freeLarge, largeSize
	}
	select {
	case b := <-free:
		p.held.Add(int64(size))
		return b
	default:
	}
	if p.held.Load()+int64(size) > int64(p.maxBytes) {
		return nil
	}
	p.held.Add(int64(size))
	return make([]byte, size)
}

// release returns a buffer to its free list.
func (p *Pipe) release(b []byte) {
	p.held.Add(-int64(len(b)))
	if len(b) == p.smallSize {
		p.freeSmall <- b // cap: every small buffer that can exist
	} else {
		p.freeLarge <- b
	}
}

func (p *Pipe) read(src PacketReader, stop <-chan struct{}) error {
	buf := make([]byte, largeSize)
	for {
		n, err := src.ReadPacket(buf)
		if err != nil {
			return err
		}
		select {
		case <-stop:
			return nil
		default:
		}
		slot := p.buffer(n)
		if slot == nil {
			p.overflow.Add(1)
			continue
		}
		now := p.clock.Now()
		p.mu.Lock()
		release, v := p.shaper.Admit(now, max(n-p.hdr, 1))
		p.mu.Unlock()
		switch v {
		case Lost:
			p.lost.Add(1)
			p.release(slot)
			continue
		case Dropped:
			p.dropped.Add(1)
			p.release(slot)
			continue
		}
		copy(slot, buf[:n])
		if f := p.inFlight.Add(1); uint64(f) > p.maxInFlight.Load() {
			p.maxInFlight.Store(uint64(f)) // only this goroutine raises it
		}
		p.q <- item{buf: slot, n: n, release: release} // never blocks: see NewPipe
	}
}

func (p *Pipe) write(dst PacketWriter, stop <-chan struct{}, done <-chan struct{}) {
	for {
		var it item
		select {
		case it = <-p.q:
		case <-stop:
			return
		case <-done:
			return
		}
		if it.release-p.clock.Now() > p.slack {
			p.clock.SleepUntil(it.release)
		}
		if err := dst.WritePacket(it.buf[:it.n]); err != nil {
			p.writeErrs.Add(1)
		} else {
			p.packets.Add(1)
			p.bytes.Add(uint64(it.n))
		}
		p.inFlight.Add(-1)
		p.release(it.buf)
	}
}
