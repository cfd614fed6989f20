// Package admission refuses, for a while, the sources that keep failing
// to authenticate: failed Noise handshakes at the relay and at the
// executor's native listener, wrong bearer tokens at the bridge's
// WebSocket listener. It is the one implementation of that defence, so
// every front end has the same bounds and the same weaknesses.
//
// What it is for: a scanner, a brute-forcer or a client with a stale key
// must not be able to fail forever at full speed; after MaxFailures
// failures within Window its source is refused on sight (before any
// crypto or token comparison) for the rest of that window.
//
// Why a source is an IPv4 address or an IPv6 /64 (Key): a /64 is one
// subscriber's usual allocation, so counting exact IPv6 addresses would
// let one attacker mint 2^64 fresh sources. An IPv4-mapped IPv6 address
// is its IPv4 address, whichever socket family it arrived on.
//
// Why the table is bounded, and how: every source that fails once takes
// an entry until its window ends, so the table must have a bound
// (Config.MaxEntries, default 16,384, about 250 bytes each: ~4 MiB). When
// a new source needs an entry and the table is full, expired entries go
// first, then the entry of the oldest window among the sources not
// blocked, and only when every entry is a blocked source the oldest
// blocked one. The table is never flushed as a whole: an attacker with
// many addresses (any IPv6 user, a botnet) who fails once from each of
// them only pushes out other unblocked sources; to free a blocked one
// it must first get MaxEntries sources of its own blocked, MaxFailures
// failures each, within one window.
//
// Costs: every operation is O(1) (amortized: expired entries are dropped
// as they reach the front of the table), under one mutex.
package admission

import (
	"cmp"
	"container/list"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"
)

// Defaults of Config.
const (
	DefaultMaxFailures = 20
	DefaultWindow      = time.Minute
	DefaultMaxEntries  = 16384
)

// ErrConfig marks an invalid Config.
var ErrConfig = errors.New("admission: invalid configuration")

// Config configures a Limiter. Start from DefaultConfig; New fills any
// field left zero from it.
type Config struct {
	// MaxFailures failures from one source within Window block it for
	// the rest of that window (default 20). The window starts at the
	// source's first failure; refusals do not extend it.
	MaxFailures int
	// Window is how long failures count (default 1 minute).
	Window time.Duration
	// MaxEntries bounds the sources tracked at once (default 16,384,
	// about 250 bytes each); see the package comment for what goes when
	// the table is full.
	MaxEntries int
	// Now replaces time.Now (tests). It must not go backwards
	// (time.Now's monotonic reading does not). nil: time.Now.
	Now func() time.Time
}

// DefaultConfig returns the default configuration: 20 failures a
// minute, 16,384 sources, the real clock.
func DefaultConfig() Config {
	return Config{MaxFailures: DefaultMaxFailures, Window: DefaultWindow, MaxEntries: DefaultMaxEntries, Now: time.Now}
}

// WithDefaults fills every zero field from DefaultConfig; the rest is
// left to Validate.
func (c Config) WithDefaults() Config {
	d := DefaultConfig()
	c.MaxFailures = cmp.Or(c.MaxFailures, d.MaxFailures)
	c.Window = cmp.Or(c.Window, d.Window)
	c.MaxEntries = cmp.Or(c.MaxEntries, d.MaxEntries)
	if c.Now == nil {
		c.Now = d.Now
	}
	return c
}

// Validate reports the first invalid field, taking c as it is (a zero
// field is invalid here, though New would fill it).
func (c Config) Validate() error {
	switch {
	case c.MaxFailures < 1:
		return fmt.Errorf("%w: MaxFailures must be at least 1", ErrConfig)
	case c.Window <= 0:
		return fmt.Errorf("%w: Window must be positive", ErrConfig)
	case c.MaxEntries < 1:
		return fmt.Errorf("%w: MaxEntries must be at least 1", ErrConfig)
	case c.Now == nil:
		return fmt.Errorf("%w: Now is required", ErrConfig)
	}
	return nil
}

// Key names a source: see AddrKey, NetAddrKey, HostKey and Opaque. The
// zero Key is a source like any other (callers should not need it).
type Key struct {
	s      string
	opaque bool // not an IP address, so never equal to one
}

// String is the key's printable form: "192.0.2.7", "2001:db8:1:2::/64",
// or an opaque key's own text.
func (k Key) String() string { return k.s }

// AddrKey is the key of an IP address: IPv4 (or IPv4-mapped IPv6) as
// itself, other IPv6 as its /64; any zone is dropped. An invalid address
// has the key "invalid IP".
func AddrKey(a netip.Addr) Key {
	a = a.Unmap().WithZone("")
	if a.Is6() {
		p, _ := a.Prefix(64)
		return Key{s: p.String()}
	}
	return Key{s: a.String()}
}

// NetAddrKey is the key of a connection's remote address: AddrKey for a
// TCP or UDP address (or any whose String is IP:port), else an opaque
// key of its network and text.
func NetAddrKey(a net.Addr) Key {
	switch a := a.(type) {
	case *net.TCPAddr:
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			return AddrKey(ip)
		}
	case *net.UDPAddr:
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			return AddrKey(ip)
		}
	case nil:
		return Opaque("")
	}
	if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		return AddrKey(ap.Addr())
	}
	return Opaque(a.Network() + ":" + a.String())
}

// HostKey is the key of an address written as text: "IP", "IP:port",
// "[IPv6]:port" (as in http.Request.RemoteAddr), a zone allowed; text
// that is none of those is an opaque key of itself.
func HostKey(s string) Key {
	if a, err := netip.ParseAddr(s); err == nil {
		return AddrKey(a)
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return AddrKey(ap.Addr())
	}
	if host, _, err := net.SplitHostPort(s); err == nil {
		if a, err := netip.ParseAddr(host); err == nil {
			return AddrKey(a)
		}
	}
	return Opaque(s)
}

// Opaque is the key of a source that is not an IP address (a Unix
// socket peer's uid, a relay session), taken as it is; it never equals
// an address's key, whatever its text.
func Opaque(s string) Key { return Key{s: s, opaque: true} }

// Strike is what one recorded failure did.
type Strike struct {
	Failures int       // the source's failures in its current window, this one included
	Blocked  bool      // the source is refused now
	Crossed  bool      // this failure is the one that blocked it (reached MaxFailures)
	Until    time.Time // its window's end (Config.Now's clock)
}

// Stats are a Limiter's counters: since it was made, and (Entries,
// Blocked) now.
type Stats struct {
	Entries   int    // sources in the table now (at most MaxEntries)
	Blocked   int    // sources refused now
	Failures  uint64 // failures recorded
	Blocks    uint64 // times a source reached MaxFailures
	Refusals  uint64 // Allow calls that refused a blocked source
	Evictions uint64 // entries still in their window dropped to make room for a new source
}

// entry is a source with failures in its current window.
type entry struct {
	key   Key
	n     int
	since time.Time
	all   *list.Element // in Limiter.all
	open  *list.Element // in Limiter.open; nil once blocked
}

// Limiter counts failures per source and refuses the sources that had
// too many. It is safe for concurrent use; the zero value is not usable
// (see New).
type Limiter struct {
	cfg Config

	mu      sync.Mutex
	entries map[Key]*entry
	// all holds every entry, oldest window first (an entry whose window
	// restarts moves to the back), so expired entries are a prefix of it;
	// open holds the entries not blocked, in the same order.
	all, open list.List
	st        Stats // Entries and Blocked kept current
}

// New validates cfg, its zero fields filled from DefaultConfig, and
// returns a Limiter.
func New(cfg Config) (*Limiter, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Limiter{cfg: cfg, entries: make(map[Key]*entry)}, nil
}

// Config is the limiter's configuration, defaults filled in.
func (l *Limiter) Config() Config { return l.cfg }

// Allow reports whether k may try (again): false while it is blocked,
// counted as a refusal.
func (l *Limiter) Allow(k Key) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.entries[k]
	if e == nil {
		return true
	}
	if l.expired(e, l.cfg.Now()) {
		l.remove(e)
		return true
	}
	if e.n < l.cfg.MaxFailures {
		return true
	}
	l.st.Refusals++
	return false
}

// Blocked reports whether k is refused now, without counting a refusal.
func (l *Limiter) Blocked(k Key) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.entries[k]
	return e != nil && e.n >= l.cfg.MaxFailures && !l.expired(e, l.cfg.Now())
}

// Fail records a failure of k.
func (l *Limiter) Fail(k Key) Strike {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.cfg.Now()
	l.pruneExpired(now)
	e := l.entries[k]
	if e != nil && l.expired(e, now) {
		l.remove(e)
		e = nil
	}
	if e == nil {
		for len(l.entries) >= l.cfg.MaxEntries {
			l.evictOne()
		}
		e = &entry{key: k, since: now}
		e.all = l.all.PushBack(e)
		e.open = l.open.PushBack(e)
		l.entries[k] = e
		l.st.Entries++
	}
	e.n++
	l.st.Failures++
	crossed := e.n == l.cfg.MaxFailures
	if crossed {
		l.open.Remove(e.open)
		e.open = nil
		l.st.Blocks++
		l.st.Blocked++
	}
	return Strike{Failures: e.n, Blocked: e.n >= l.cfg.MaxFailures, Crossed: crossed, Until: e.since.Add(l.cfg.Window)}
}

// Stats returns the counters.
func (l *Limiter) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pruneExpired(l.cfg.Now())
	return l.st
}

func (l *Limiter) expired(e *entry, now time.Time) bool {
	return now.Sub(e.since) >= l.cfg.Window
}

// pruneExpired drops the expired entries, the prefix of all.
func (l *Limiter) pruneExpired(now time.Time) {
	for f := l.all.Front(); f != nil; f = l.all.Front() {
		e := f.Value.(*entry)
		if !l.expired(e, now) {
			return
		}
		l.remove(e)
	}
}

// evictOne drops the oldest window among the sources not blocked, else
// the oldest of all (the table is full of blocked sources). Expired
// entries are already gone (pruneExpired).
func (l *Limiter) evictOne() {
	f := l.open.Front()
	if f == nil {
		f = l.all.Front()
	}
	l.remove(f.Value.(*entry))
	l.st.Evictions++
}

func (l *Limiter) remove(e *entry) {
	l.all.Remove(e.all)
	if e.open != nil {
		l.open.Remove(e.open)
	} else {
		l.st.Blocked--
	}
	delete(l.entries, e.key)
	l.st.Entries--
}
