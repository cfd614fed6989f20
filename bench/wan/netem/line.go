// Package netem emulates wide-area links in user space, for a kernel
// without sch_netem: a link is a TUN device in each of two network
// namespaces, and this process carries IP packets from one to the other
// through a delay line that applies a one-way delay, a rate limit with a
// bounded drop-tail queue, and random loss.
//
// The delay line is split in two so that its timing can be tested without
// sleeping: Shaper decides, for a packet arriving at a given instant,
// whether it is lost or dropped and when it leaves; Pipe moves packets
// between two ports on a Clock, using a Shaper.
package netem

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Config is one direction of a link.
type Config struct {
	// Rate is the link's rate in bits per second; 0 is unlimited (no
	// serialisation delay and no queue, only the propagation delay).
	Rate float64
	// Delay is the one-way propagation delay, added after serialisation.
	Delay time.Duration
	// Loss is the probability in [0, 1] that a packet is lost, each packet
	// independently (before it is queued, as netem does).
	Loss float64
	// Queue bounds, in bytes, the backlog waiting for serialisation when
	// Rate > 0: a packet that would make it larger is dropped (drop-tail).
	// Values below MinQueue are raised to it so that a burst of a few full
	// packets always fits.
	Queue int
}

// MinQueue is the smallest drop-tail queue, in bytes: a few full-size
// packets at the largest MTU a TUN carries.
const MinQueue = 4 * 65535

// Validate reports the first setting that cannot describe a link.
func (c Config) Validate() error {
	switch {
	case math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) || c.Rate < 0:
		return fmt.Errorf("netem: rate %v is not a non-negative number of bits per second", c.Rate)
	case c.Delay < 0 || c.Delay > time.Minute:
		return fmt.Errorf("netem: delay %v is outside [0, 1m]", c.Delay)
	case math.IsNaN(c.Loss) || c.Loss < 0 || c.Loss > 1:
		return fmt.Errorf("netem: loss %v is outside [0, 1]", c.Loss)
	case c.Queue < 0:
		return errors.New("netem: queue is negative")
	}
	return nil
}

// BDPQueue is a drop-tail bound of factor times the bandwidth-delay product
// of rate (bits/s) and rtt: the classic router buffer, large enough for one
// TCP flow to keep the link busy, small enough to bound the queueing delay
// at factor × rtt.
func BDPQueue(rate float64, rtt time.Duration, factor float64) int {
	q := rate / 8 * rtt.Seconds() * factor
	if q > math.MaxInt32 {
		return math.MaxInt32
	}
	return max(int(q), MinQueue)
}

// Verdict is what happens to an arriving packet.
type Verdict int

const (
	// Pass: the packet leaves at the returned instant.
	Pass Verdict = iota
	// Lost: random loss.
	Lost
	// Dropped: the drop-tail queue is full.
	Dropped
)

// Shaper is the timing model of one direction: loss, then a FIFO
// serialiser at Rate behind a drop-tail queue of Queue bytes, then the
// propagation delay. It keeps one number of state (when the serialiser
// is next idle), so its queue needs no memory of its own; the packets
// themselves wait in a Pipe. Instants are nanoseconds on any monotonic
// clock. A Shaper is not safe for concurrent use.
type Shaper struct {
	cfg       Config
	rnd       *rand.Rand
	busyUntil int64 // the instant the serialiser finishes the last admitted packet
}

// NewShaper returns a shaper for cfg with its own random source (seeded,
// so a run's losses can be reproduced). cfg must be valid.
func NewShaper(cfg Config, seed uint64) (*Shaper, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Rate > 0 {
		cfg.Queue = max(cfg.Queue, MinQueue)
	}
	return &Shaper{cfg: cfg, rnd: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}, nil
}

// Config is the shaper's configuration (its Queue raised to MinQueue).
func (s *Shaper) Config() Config { return s.cfg }

// Admit decides the fate of a packet of size bytes arriving at now, and
// for a passing packet returns when it is to be delivered. Instants passed
// to successive calls must not decrease; release instants then do not
// decrease either, so packets leave in the order they came (a FIFO link).
func (s *Shaper) Admit(now int64, size int) (release int64, v Verdict) {
	if s.cfg.Loss > 0 && s.rnd.Float64() < s.cfg.Loss {
		return 0, Lost
	}
	depart := now
	if s.cfg.Rate > 0 {
		start := max(now, s.busyUntil)
		// What is still waiting for (or in) the serialiser, in bytes.
		backlog := float64(start-now) * s.cfg.Rate / 8e9
		if backlog+float64(size) > float64(s.cfg.Queue) {
			return 0, Dropped
		}
		s.busyUntil = start + int64(math.Ceil(float64(size)*8e9/s.cfg.Rate))
		depart = s.busyUntil
	}
	return depart + int64(s.cfg.Delay), Pass
}
