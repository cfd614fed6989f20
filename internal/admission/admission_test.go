package admission

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Unix(1_700_000_000, 0)} }

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newLimiter(t *testing.T, c *clock, tweak func(*Config)) *Limiter {
	t.Helper()
	cfg := Config{Now: c.now}
	if tweak != nil {
		tweak(&cfg)
	}
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// v4 is the n-th address of 10.0.0.0/8, v6 the first address of the
// n-th /64 of 2001:db8::/32.
func v4(n int) Key {
	return AddrKey(netip.AddrFrom4([4]byte{10, byte(n >> 16), byte(n >> 8), byte(n)}))
}

func v6(n int) Key {
	return AddrKey(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n), 15: 1}))
}

func failN(l *Limiter, k Key, n int) (s Strike) {
	for range n {
		s = l.Fail(k)
	}
	return s
}

// Sources are grouped: IPv4 by address, IPv6 by /64, IPv4-mapped IPv6
// as IPv4, zones dropped, whatever form the address arrives in.
func TestKeysGroupIPv6By64AndUnmapIPv4(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  Key
		want string
	}{
		{"v4", HostKey("192.0.2.7"), "192.0.2.7"},
		{"v4 host:port", HostKey("192.0.2.7:443"), "192.0.2.7"},
		{"mapped", HostKey("::ffff:192.0.2.7"), "192.0.2.7"},
		{"mapped host:port", HostKey("[::ffff:192.0.2.7]:80"), "192.0.2.7"},
		{"mapped TCPAddr", NetAddrKey(&net.TCPAddr{IP: net.ParseIP("192.0.2.7").To16(), Port: 1}), "192.0.2.7"},
		{"v6", HostKey("2001:db8:1:2:aaaa::1"), "2001:db8:1:2::/64"},
		{"v6 same /64", HostKey("[2001:db8:1:2:bbbb::9]:8080"), "2001:db8:1:2::/64"},
		{"v6 zone", HostKey("fe80::1%eth0"), "fe80::/64"},
		{"v6 UDPAddr", NetAddrKey(&net.UDPAddr{IP: net.ParseIP("2001:db8:1:2:ffff::1"), Port: 1}), "2001:db8:1:2::/64"},
		{"loopback v6", HostKey("::1"), "::/64"},
		{"unix", NetAddrKey(&net.UnixAddr{Name: "/run/x.sock", Net: "unix"}), "unix:/run/x.sock"},
	} {
		if tc.got.String() != tc.want {
			t.Errorf("%s: key %q, want %q", tc.name, tc.got, tc.want)
		}
	}
	if HostKey("2001:db8:1:2::1") == HostKey("2001:db8:1:3::1") {
		t.Error("two /64s share a key")
	}
	if Opaque("192.0.2.7") == HostKey("192.0.2.7") {
		t.Error("an opaque key equals an address's key")
	}
}

// A whole /64 is one source: failures from 100,001 of its addresses
// block every address in it, and no other prefix.
func TestOneIPv6PrefixIsOneSource(t *testing.T) {
	l := newLimiter(t, newClock(), nil)
	base := netip.MustParseAddr("2001:db8:7:7::").As16()
	for i := range 100_001 {
		a := base
		a[12], a[13], a[14], a[15] = byte(i>>24), byte(i>>16), byte(i>>8), byte(i)
		a[8] = byte(i) // the interface id varies in its high bits too
		l.Fail(AddrKey(netip.AddrFrom16(a)))
	}
	if st := l.Stats(); st.Entries != 1 || st.Blocked != 1 {
		t.Fatalf("stats %+v, want one entry, blocked", st)
	}
	if l.Allow(HostKey("2001:db8:7:7:dead:beef::1")) {
		t.Error("a fresh address of the blocked /64 was allowed")
	}
	if !l.Allow(HostKey("2001:db8:7:8::1")) {
		t.Error("the next /64 was refused")
	}
}

// MaxFailures failures within the window block the source for the rest
// of it; refusals neither extend it nor count as failures; at the
// window's end it may try again, from zero.
func TestBlockLastsTheRestOfTheWindow(t *testing.T) {
	c := newClock()
	l := newLimiter(t, c, func(cfg *Config) { cfg.MaxFailures = 3 })
	k := HostKey("192.0.2.1")
	if s := failN(l, k, 2); s.Blocked || s.Failures != 2 {
		t.Fatalf("after 2 failures: %+v, want 2 and not blocked", s)
	}
	c.advance(30 * time.Second)
	s := l.Fail(k)
	if !s.Blocked || !s.Crossed || !s.Until.Equal(c.now().Add(30*time.Second)) {
		t.Fatalf("third failure: %+v, want blocked, crossed, until the window of the first", s)
	}
	if s := l.Fail(k); !s.Blocked || s.Crossed {
		t.Fatalf("fourth failure: %+v, want blocked, not crossed again", s)
	}
	for range 5 {
		if l.Allow(k) {
			t.Fatal("a blocked source was allowed")
		}
	}
	if !l.Allow(HostKey("192.0.2.2")) {
		t.Fatal("another source was refused")
	}
	c.advance(30*time.Second - time.Nanosecond)
	if l.Allow(k) || !l.Blocked(k) {
		t.Fatal("allowed before the window ended")
	}
	if st := l.Stats(); st.Blocked != 1 || st.Refusals != 6 || st.Blocks != 1 || st.Failures != 4 {
		t.Fatalf("stats %+v, want 1 blocked, 6 refusals, 1 block, 4 failures", st)
	}
	c.advance(time.Nanosecond)
	if !l.Allow(k) || l.Blocked(k) {
		t.Fatal("still refused when its window ended")
	}
	if st := l.Stats(); st.Blocked != 0 || st.Entries != 0 {
		t.Fatalf("stats %+v after the window, want an empty table", st)
	}
	if s := l.Fail(k); s.Failures != 1 || s.Blocked {
		t.Fatalf("first failure of a new window: %+v", s)
	}
}

// Failures spread over more than a window never block: the window starts
// at the first failure and a failure after it starts a new one.
func TestFailuresOutsideTheWindowDoNotAddUp(t *testing.T) {
	c := newClock()
	l := newLimiter(t, c, func(cfg *Config) { cfg.MaxFailures = 3 })
	k := HostKey("192.0.2.1")
	failN(l, k, 2)
	c.advance(time.Minute)
	if s := failN(l, k, 2); s.Blocked || s.Failures != 2 {
		t.Fatalf("%+v, want 2 failures in the new window", s)
	}
}

// A full table makes room by dropping, in order: expired entries, the
// oldest window among unblocked sources (a later failure of a source
// does not renew its window), and only when all are blocked the oldest
// blocked one. Nothing else is lost.
func TestFullTableEvictsOldestWindowFirstAndBlockedLast(t *testing.T) {
	c := newClock()
	l := newLimiter(t, c, func(cfg *Config) { cfg.MaxEntries, cfg.MaxFailures = 3, 3 })
	a, b, d, e, x := v4(1), v4(2), v4(3), v4(4), v4(5)
	failN(l, x, 3) // x: blocked, the oldest window
	c.advance(time.Second)
	l.Fail(a)
	c.advance(time.Second)
	l.Fail(b)
	c.advance(time.Second)
	l.Fail(a) // a's window is still the oldest unblocked one
	l.Fail(d) // full: a goes, not x
	if st := l.Stats(); st.Entries != 3 || st.Evictions != 1 {
		t.Fatalf("stats %+v, want 3 entries and 1 eviction", st)
	}
	if s := l.Fail(a); s.Failures != 1 { // b goes to make room
		t.Fatalf("a kept its count (%d) though it was evicted", s.Failures)
	}
	if s := failN(l, d, 2); s.Failures != 3 || !s.Blocked {
		t.Fatalf("d lost its count: %+v", s)
	}
	if l.Allow(x) {
		t.Fatal("the blocked source was evicted while unblocked ones remained")
	}
	failN(l, a, 2) // a blocked: every entry is a blocked source
	c.advance(time.Second)
	l.Fail(e) // the oldest blocked one, x, goes
	if l.Blocked(x) || !l.Blocked(d) || !l.Blocked(a) {
		t.Fatalf("x blocked %v, d %v, a %v: want only x evicted", l.Blocked(x), l.Blocked(d), l.Blocked(a))
	}
	if st := l.Stats(); st.Entries != 3 || st.Blocked != 2 || st.Evictions != 3 {
		t.Fatalf("stats %+v, want 3 entries, 2 blocked, 3 evictions", st)
	}
	// Expired entries go first and are not counted as evictions.
	c.advance(time.Minute)
	l.Fail(b)
	if st := l.Stats(); st.Entries != 1 || st.Blocked != 0 || st.Evictions != 3 {
		t.Fatalf("stats %+v after the windows ended, want 1 entry and no new eviction", st)
	}
}

// The attack on the relay's old table, which forgot everyone at 100,000
// entries: failures from 100,001 distinct sources (IPv4 addresses, and
// IPv6 /64s) must not free a blocked source, at the default table size.
func TestManySourcesDoNotFreeABlockedOne(t *testing.T) {
	for name, src := range map[string]func(int) Key{"ipv4": v4, "ipv6": v6} {
		t.Run(name, func(t *testing.T) {
			c := newClock()
			l := newLimiter(t, c, nil)
			victim := HostKey("198.51.100.9")
			failN(l, victim, DefaultMaxFailures)
			for i := range 100_001 {
				l.Fail(src(i))
				if i%10_000 == 0 {
					c.advance(time.Millisecond)
				}
			}
			if l.Allow(victim) {
				t.Fatal("the blocked source was freed by a flood of others")
			}
			st := l.Stats()
			if st.Entries != DefaultMaxEntries || st.Blocked != 1 || st.Evictions != 100_001+1-DefaultMaxEntries {
				t.Fatalf("stats %+v, want a full table, 1 blocked, %d evictions", st, 100_001+1-DefaultMaxEntries)
			}
		})
	}
}

// Concurrent failures, checks and reads (run with -race): nothing is
// lost, the table stays within its bound, and a source that failed
// MaxFailures times in one window is blocked at the end.
func TestConcurrentUse(t *testing.T) {
	c := newClock()
	l := newLimiter(t, c, func(cfg *Config) { cfg.MaxEntries, cfg.MaxFailures = 64, 50 })
	const workers, each = 8, 2000
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				switch i % 4 {
				case 0:
					l.Fail(HostKey("192.0.2.1")) // shared by all
				case 1:
					l.Fail(v6(w*each + i)) // fresh sources: evictions
				case 2:
					l.Allow(v4(i % 100))
				case 3:
					if st := l.Stats(); st.Entries > 64 || st.Blocked > st.Entries {
						t.Errorf("stats %+v out of bounds", st)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	st := l.Stats()
	if st.Failures != workers*each/2 || st.Entries > 64 {
		t.Fatalf("stats %+v, want %d failures and at most 64 entries", st, workers*each/2)
	}
	if l.Allow(HostKey("192.0.2.1")) {
		t.Fatal("the shared source, failing far past the limit, is not blocked")
	}
}

// Zero fields are filled by New and refused by Validate.
func TestConfigDefaultsAndChecks(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	l, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Config(); got.MaxFailures != DefaultMaxFailures || got.Window != DefaultWindow || got.MaxEntries != DefaultMaxEntries || got.Now == nil {
		t.Fatalf("defaults %+v", got)
	}
	for _, tc := range []struct {
		name  string
		tweak func(*Config)
	}{
		{"MaxFailures", func(c *Config) { c.MaxFailures = 0 }},
		{"Window", func(c *Config) { c.Window = -time.Second }},
		{"MaxEntries", func(c *Config) { c.MaxEntries = 0 }},
		{"Now", func(c *Config) { c.Now = nil }},
	} {
		c := DefaultConfig()
		tc.tweak(&c)
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", tc.name, err)
		}
	}
	if _, err := New(Config{MaxFailures: -1}); !errors.Is(err, ErrConfig) {
		t.Errorf("New with MaxFailures -1: %v", err)
	}
}

func BenchmarkFailFreshSources(b *testing.B) {
	l, _ := New(Config{})
	keys := make([]Key, 1<<17)
	for i := range keys {
		keys[i] = v6(i)
	}
	b.ResetTimer()
	for i := range b.N {
		l.Fail(keys[i%len(keys)])
	}
}
