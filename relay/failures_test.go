package relay

// The failed-handshake table (internal/admission) at the relay's real
// listener: an attacker with many source addresses must not be able to
// unblock an address by failing from all of them (the old table forgot
// every address at 100,000 entries), and IPv6 sources count by /64.

import (
	"context"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/outpost-exec/outpost/internal/admission"
	"github.com/outpost-exec/outpost/transport"
)

func failuresRelay(t *testing.T, maxFailed int) (srv *Server, addr string, relayKey []byte) {
	t.Helper()
	tokens, err := OpenStore(filepath.Join(t.TempDir(), "relay.db"))
	if err != nil {
		t.Fatal(err)
	}
	k := key(t)
	srv, err = NewServer(Config{Key: k.Keypair(), Tokens: tokens, Logger: zaptest.NewLogger(t), MaxFailedHandshakes: maxFailed, FailureWindow: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := srv.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return srv, ln.Addr().String(), k.Keypair().Public
}

// dialFrom connects to addr from the loopback address src (all of
// 127.0.0.0/8 is local on Linux).
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial from %s: %v", src, err)
	}
	return c
}

// junkFrom fails one handshake from src: junk, then the relay hangs up.
func junkFrom(t *testing.T, src, addr string) {
	c := dialFrom(t, src, addr)
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "GET / HTTP/1.1\r\n\r\n")
	io.Copy(io.Discard, c)
}

// handshakeFrom makes a real Noise handshake from src with a fresh key.
func handshakeFrom(t *testing.T, src, addr string, relayKey []byte) error {
	c := dialFrom(t, src, addr)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	nc, err := transport.NoiseInitiator(ctx, c, transport.NoiseConfig{Static: key(t).Keypair(), Purpose: Purpose, PeerStatic: relayKey})
	if err != nil {
		return err
	}
	return nc.Close()
}

// loopback is the n-th address of 127.1.0.0/16.
func loopback(n int) string { return fmt.Sprintf("127.1.%d.%d", n>>8&255, n&255) }

func TestFloodOfFailingAddressesLeavesABlockedAddressBlocked(t *testing.T) {
	srv, addr, relayKey := failuresRelay(t, 3)
	const victim = "127.0.0.2"
	for range 3 {
		junkFrom(t, victim, addr)
	}
	if err := handshakeFrom(t, "127.0.0.3", addr, relayKey); err != nil {
		t.Fatalf("a real handshake from a clean address failed: %v", err)
	}
	if handshakeFrom(t, victim, addr, relayKey) == nil {
		t.Fatal("a real handshake from the blocked address succeeded")
	}

	// The flood: failed handshakes from 100,001 distinct addresses, the
	// first ones over real sockets from as many loopback addresses (from
	// 127.1.0.0/16), the rest through the same call serve makes.
	const flood, overSockets = 100_001, 2000
	var wg sync.WaitGroup
	next := make(chan int)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				junkFrom(t, loopback(i), addr)
			}
		}()
	}
	for i := range overSockets {
		next <- i
	}
	close(next)
	wg.Wait()
	for i := overSockets; i < flood; i++ {
		srv.failed(fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255))
	}
	st := srv.Stats()
	if st.FailedHandshakes != 3+overSockets || st.FailureTable.Failures != 3+flood {
		t.Fatalf("stats %+v, want %d failed handshakes, %d failures recorded", st, 3+overSockets, 3+flood)
	}
	if st.FailureTable.Entries != admission.DefaultMaxEntries || st.FailureTable.Evictions == 0 || st.BlockedAddresses != 1 {
		t.Fatalf("failure table %+v (blocked %d), want a full table that evicted others, and the victim blocked", st.FailureTable, st.BlockedAddresses)
	}

	// Still refused at accept: its handshake fails, and is not counted
	// as a failure but as a refusal.
	before := srv.Stats()
	if handshakeFrom(t, victim, addr, relayKey) == nil {
		t.Fatal("the blocked address was unblocked by a flood from other addresses")
	}
	after := srv.Stats()
	if after.FailedHandshakes != before.FailedHandshakes || after.FailureTable.Refusals != before.FailureTable.Refusals+1 {
		t.Fatalf("stats before %+v, after %+v: want one more refusal, no more failures", before, after)
	}
	// Flood addresses, under the limit, are still served.
	if err := handshakeFrom(t, loopback(1), addr, relayKey); err != nil {
		t.Fatalf("a flood address under the limit: %v", err)
	}
}

// IPv6 sources count by /64: failures from different addresses of one
// /64 add up and block all of it, and nothing else.
func TestFailedHandshakesFromOneIPv6PrefixAddUp(t *testing.T) {
	srv, _, _ := failuresRelay(t, 3)
	srv.failed("2001:db8:1:2::a")
	srv.failed("2001:db8:1:2:ffff::b")
	srv.failed("2001:db8:1:2:1234:5678:9abc:def0")
	if !srv.blocked("2001:db8:1:2::77") {
		t.Fatal("an address of the /64 that failed 3 times is not blocked")
	}
	if srv.blocked("2001:db8:1:3::a") {
		t.Fatal("the next /64 is blocked")
	}
	// An IPv4-mapped IPv6 source is its IPv4 address.
	for range 3 {
		srv.failed("::ffff:192.0.2.7")
	}
	if !srv.blocked("192.0.2.7") {
		t.Fatal("failures from ::ffff:192.0.2.7 did not block 192.0.2.7")
	}
}
