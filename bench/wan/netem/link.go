//go:build linux

package netem

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
)

// Side is one end of a link: a TUN named Dev in NS with address Addr (a
// /30 or /31 prefix, e.g. "10.77.1.1/30").
type Side struct {
	NS   *NS
	Dev  string
	Addr string
}

// Link is a point-to-point link between two namespaces: A's packets to B
// cross AB, B's to A cross BA.
type Link struct {
	Name   string
	A, B   Side
	AB, BA *Pipe
	fa, fb *os.File
	vnet   bool // the TUNs carry virtio headers (made with gso)
	gso    bool // offload wanted (NewLink, SetGSO); it is off while the link has loss
	stop   chan struct{}
	wg     sync.WaitGroup
	once   sync.Once
}

// NewLink builds the link: both TUNs created, addressed, brought up with
// mtu (and a 1000-packet transmit queue, the kernel's own bound before
// ours), and the pipes running with cfg in both directions.
//
// With gso, the TUNs carry TCP segmentation offload: the sending stack
// hands over up to 64 KiB of segments as one packet, which crosses the
// delay line whole (its bytes still paced at the rate, so a 64 KiB burst
// leaves as one) and reaches the receiving stack as one, as GRO would
// deliver it. That lifts the line's ceiling several-fold. Random loss
// would drop all of a burst's segments together, so while a link has
// loss its offload is off and every packet is one MTU.
func NewLink(name string, a, b Side, mtu int, gso bool, cfg Config, seed uint64) (_ *Link, err error) {
	if mtu < 576 || mtu > 65535 {
		return nil, fmt.Errorf("netem: mtu %d outside [576, 65535]", mtu)
	}
	l := &Link{Name: name, A: a, B: b, gso: gso, vnet: gso, stop: make(chan struct{})}
	defer func() {
		if err != nil {
			l.Close()
		}
	}()
	hdr := 0
	if gso {
		hdr = vnetHdrLen
	}
	if l.AB, err = NewPipe(RealClock{}, cfg, seed, DefaultMaxBytes, mtu+hdr); err != nil {
		return nil, err
	}
	if l.BA, err = NewPipe(RealClock{}, cfg, seed+1, DefaultMaxBytes, mtu+hdr); err != nil {
		return nil, err
	}
	l.AB.SetHeader(hdr)
	l.BA.SetHeader(hdr)
	if l.fa, err = openTUN(a.NS, a.Dev, gso); err != nil {
		return nil, err
	}
	if l.fb, err = openTUN(b.NS, b.Dev, gso); err != nil {
		return nil, err
	}
	if err := l.offload(cfg); err != nil {
		return nil, err
	}
	for _, s := range []Side{a, b} {
		if err := s.NS.IP("addr", "add", s.Addr, "dev", s.Dev); err != nil {
			return nil, err
		}
		if err := s.NS.IP("link", "set", s.Dev, "mtu", strconv.Itoa(mtu), "txqueuelen", "1000", "up"); err != nil {
			return nil, err
		}
	}
	l.wg.Add(2)
	go func() { defer l.wg.Done(); l.AB.Run(filePort{l.fa}, filePort{l.fb}, l.stop) }()
	go func() { defer l.wg.Done(); l.BA.Run(filePort{l.fb}, filePort{l.fa}, l.stop) }()
	return l, nil
}

// Set reshapes both directions.
func (l *Link) Set(cfg Config, seed uint64) error {
	if err := errors.Join(l.AB.Set(cfg, seed), l.BA.Set(cfg, seed+1)); err != nil {
		return err
	}
	return l.offload(cfg)
}

// offload turns a GSO link's offload on, or off while it has loss.
func (l *Link) offload(cfg Config) error {
	if !l.vnet {
		return nil
	}
	on := l.gso && cfg.Loss == 0
	return errors.Join(setOffload(l.fa, on), setOffload(l.fb, on))
}

// SetGSO turns offload on or off on a link made with gso (to measure the
// line with MTU-sized packets only); on a link made without, it fails.
func (l *Link) SetGSO(on bool) error {
	if !l.vnet {
		return errors.New("netem: the link was made without GSO")
	}
	l.gso = on
	return l.offload(l.AB.Config())
}

// GSO reports whether the link carries offloaded segments right now.
func (l *Link) GSO() bool { return l.gso && l.AB.Config().Loss == 0 }

// Close stops the pipes and closes both TUNs, which removes the devices.
func (l *Link) Close() {
	l.once.Do(func() {
		close(l.stop)
		for _, f := range []*os.File{l.fa, l.fb} {
			if f != nil {
				f.Close()
			}
		}
		l.wg.Wait()
	})
}
