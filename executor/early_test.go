package executor

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/outpost-exec/outpost/client"
	"github.com/outpost-exec/outpost/identity"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/transport"
)

// earlyClock is the guard's injectable clock.
type earlyClock struct{ t time.Time }

func (c *earlyClock) now() time.Time        { return c.t }
func (c *earlyClock) add(d time.Duration)   { c.t = c.t.Add(d) }
func earlyAt(t time.Time, b string) []byte  { return transport.EncodeEarlyData(t, []byte(b)) }
func admitted(g *earlyGuard, p []byte) bool { _, ok := g.admit(p); return ok }
func withNonce(p []byte, n byte) []byte     { q := bytes.Clone(p); q[9] = n; q[10] = n ^ 0x5a; return q }
func stamp(p []byte, t time.Time) []byte {
	q := bytes.Clone(p)
	binary.BigEndian.PutUint64(q[1:9], uint64(t.UnixMilli()))
	return q
}

func TestEarlyGuardAcceptsEachMessageOnceWithinItsWindow(t *testing.T) {
	clk := &earlyClock{t: time.Unix(1_800_000_000, 0)}
	g := newEarlyGuard(clk.now)
	// Just after start: nothing stamped before start+skew is taken (a
	// previous run of the executor may have taken it).
	if admitted(g, earlyAt(clk.t, "x")) {
		t.Fatal("early data stamped at the executor's start was taken")
	}
	clk.add(earlyFutureSkew + time.Second)
	p := earlyAt(clk.t, "start")
	early, ok := g.admit(p)
	if !ok || string(early) != "start" {
		t.Fatalf("admit = %q, %v", early, ok)
	}
	if admitted(g, p) {
		t.Fatal("a replayed message 1 was taken twice")
	}
	clk.add(earlyPastWindow / 2)
	if admitted(g, p) {
		t.Fatal("a replay later in the window was taken")
	}
	clk.add(earlyPastWindow)
	if admitted(g, p) {
		t.Fatal("a replay after the window was taken")
	}
	if admitted(g, earlyAt(clk.t.Add(-earlyPastWindow-time.Millisecond), "old")) {
		t.Fatal("a timestamp older than the window was taken")
	}
	if admitted(g, earlyAt(clk.t.Add(earlyFutureSkew+time.Millisecond), "future")) {
		t.Fatal("a timestamp too far ahead was taken")
	}
	if !admitted(g, earlyAt(clk.t.Add(-earlyPastWindow+time.Second), "late but in window")) {
		t.Fatal("a timestamp inside the window was refused")
	}
	for _, junk := range [][]byte{nil, {}, {0x02, 1, 2}, p[:25]} {
		if admitted(g, junk) {
			t.Fatalf("payload %x taken", junk)
		}
	}
	var nilGuard *earlyGuard
	if admitted(nilGuard, earlyAt(clk.t, "x")) {
		t.Fatal("a nil guard took early data")
	}
}

func TestEarlyGuardWhenFullRefusesEverythingItCouldNotRecord(t *testing.T) {
	clk := &earlyClock{t: time.Unix(1_800_000_000, 0)}
	g := newEarlyGuard(clk.now)
	clk.add(earlyFutureSkew + time.Second)
	base := earlyAt(clk.t, "s")
	for i := range earlyMaxEntries {
		q := stamp(base, clk.t)
		binary.BigEndian.PutUint32(q[9:13], uint32(i))
		if !admitted(g, q) {
			t.Fatalf("entry %d refused", i)
		}
	}
	// Full of live entries: this one cannot be recorded, so it is
	// refused, and so is it again later, when there is room.
	over := withNonce(stamp(base, clk.t), 0xee)
	binary.BigEndian.PutUint32(over[9:13], 0xffffffff)
	if admitted(g, over) {
		t.Fatal("taken although the register is full")
	}
	// The live entries stay (a taken nonce must never be forgotten in its
	// window: a delayed original would be re-sent in band, see judge).
	if len(g.seen) != earlyMaxEntries {
		t.Fatalf("register holds %d entries after raising its floor, want them all kept", len(g.seen))
	}
	clk.add(time.Second)
	if admitted(g, over) {
		t.Fatal("a message refused for want of room was taken later")
	}
	taken0 := stamp(base, clk.t)
	binary.BigEndian.PutUint32(taken0[9:13], 0)
	if _, replayed := g.judge(taken0); !replayed {
		t.Fatal("a taken nonce was not reported replayed after the register filled")
	}
	clk.add(earlyPastWindow)
	if !admitted(g, earlyAt(clk.t, "fresh")) {
		t.Fatal("fresh early data refused once the full register's entries expired")
	}
	// Entries out of the window make room without raising the floor.
	for i := range earlyMaxEntries - len(g.seen) {
		q := stamp(base, clk.t)
		binary.BigEndian.PutUint32(q[9:13], uint32(i))
		q[13] = 0x77
		if !admitted(g, q) {
			t.Fatalf("entry %d refused", i)
		}
	}
	clk.add(earlyPastWindow + time.Second)
	floor := g.floor
	if !admitted(g, earlyAt(clk.t, "after expiry")) || g.floor != floor || len(g.seen) != 1 {
		t.Fatalf("after expiry: floor %d→%d, %d entries", floor, g.floor, len(g.seen))
	}
}

// recorder forwards a TCP connection to target, keeping the first bytes
// the client sent (its preamble and message 1, early data inside).
type recorder struct {
	ln     net.Listener
	mu     sync.Mutex
	first  []byte // what the first connection's client sent first
	done   bool   // the first connection ended
	target string
}

func (r *recorder) serve(t *testing.T) {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", r.target)
		if err != nil {
			c.Close()
			continue
		}
		go func() {
			defer func() { r.mu.Lock(); r.done = true; r.mu.Unlock() }()
			defer u.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					r.mu.Lock()
					if !r.done && len(r.first) < 8<<10 {
						r.first = append(r.first, buf[:n]...)
					}
					r.mu.Unlock()
					u.Write(buf[:n])
				}
				if err != nil {
					return
				}
			}
		}()
		go func() { defer c.Close(); io.Copy(c, u) }()
	}
}

// msg1 cuts the preamble and the first record out of what the client
// sent first.
func (r *recorder) msg1(t *testing.T) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.first) < 6 {
		t.Fatalf("recorded %d bytes", len(r.first))
	}
	n := int(binary.BigEndian.Uint16(r.first[4:6]))
	if len(r.first) < 6+n {
		t.Fatalf("message 1 not recorded whole: %d of %d bytes", len(r.first)-6, n)
	}
	return bytes.Clone(r.first[:6+n])
}

func earlyServer(t *testing.T, key identity.Key) (*Server, *NativeListener) {
	cfg := DefaultConfig()
	cfg.Logger = zaptest.NewLogger(t)
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := srv.ListenNative("tcp://127.0.0.1:0", NativeConfig{Key: key.Keypair()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ln.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return srv, ln
}

// A recorded message 1 carrying early data (initialize and a process/start
// that appends a line to a file) is replayed to the executor, and again to
// the executor restarted with the same key: the command runs once.
func TestReplayedMessage1NeverStartsACommandTwice(t *testing.T) {
	key, err := identity.Generate()
	if err != nil {
		t.Fatal(err)
	}
	srv, ln := earlyServer(t, key)
	srv.early.floor = 0 // started long ago: take early data at once
	taken := &srv.early.taken
	rl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer rl.Close()
	rec := &recorder{ln: rl, target: ln.Addr().String()}
	go rec.serve(t)

	out := filepath.Join(t.TempDir(), "runs")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := client.Config{Key: mustKey(t), KnownExecutors: filepath.Join(t.TempDir(), "known"), Pin: key.PublicKey().Fingerprint()}
	r, p, err := client.DialStart(ctx, "tcp://"+rl.Addr().String(), cfg, protocol.ExecParams{
		Argv: []string{"/bin/sh", "-c", "echo ran >> " + out}, Env: map[string]string{"PATH": "/usr/bin:/bin"}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if res, err := p.Wait(ctx); err != nil || res.ExitCode != 0 {
		t.Fatalf("wait: %+v %v", res, err)
	}
	if taken.Load() != 1 {
		t.Fatalf("the executor took early data %d times, want 1 (the start rode in message 1)", taken.Load())
	}
	msg1 := rec.msg1(t)

	replay := func(addr string) {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write(msg1); err != nil {
			t.Fatal(err)
		}
		// Message 2 (or the end): the executor has judged the early data
		// before it sends anything.
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		var hdr [2]byte
		io.ReadFull(bufio.NewReader(c), hdr[:])
	}
	replay(ln.Addr().String())
	if taken.Load() != 1 {
		t.Fatalf("a replayed message 1's early data was taken (%d)", taken.Load())
	}

	// The executor restarts (same key, empty register): the replay is
	// still refused — it is stamped before the new process's floor.
	srv2, ln2 := earlyServer(t, key)
	taken2 := &srv2.early.taken
	replay(ln2.Addr().String())
	if taken2.Load() != 0 {
		t.Fatal("a restarted executor took a replayed message 1's early data")
	}

	// A later command on a new connection runs (and is the only other
	// line): nothing else was started meanwhile.
	r2, p2, err := client.DialStart(ctx, "tcp://"+ln.Addr().String(), cfg, protocol.ExecParams{
		Argv: []string{"/bin/sh", "-c", "echo ran >> " + out}, Env: map[string]string{"PATH": "/usr/bin:/bin"}})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	if _, err := p2.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if taken.Load() != 2 {
		t.Fatalf("taken %d, want 2", taken.Load())
	}
	b, _ := os.ReadFile(out)
	if got := strings.Count(string(b), "ran\n"); got != 2 {
		t.Fatalf("the command ran %d times for 2 legitimate starts and 2 replays:\n%s", got, b)
	}
}

func mustKey(t *testing.T) identity.Key {
	k, err := identity.Generate()
	if err != nil {
		t.Fatal(err)
	}
	return k
}
