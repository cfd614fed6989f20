package executor

import (
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
type earlyClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *earlyClock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *earlyClock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// earlyAt is early data for g's instance stamped t.
func earlyAt(g *earlyGuard, t time.Time, b string) []byte {
	return transport.EncodeEarlyData(t, g.instance, []byte(b))
}
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
	p := earlyAt(g, clk.now(), "start")
	early, ok := g.admit(p)
	if !ok || string(early) != "start" {
		t.Fatalf("admit = %q, %v", early, ok)
	}
	if _, st := g.judge(p); st != transport.EarlyDataReplayed {
		t.Fatalf("a replayed message 1: status %#x, want replayed", st)
	}
	clk.add(earlyPastWindow / 2)
	if admitted(g, p) {
		t.Fatal("a replay later in the window was taken")
	}
	clk.add(earlyPastWindow)
	if admitted(g, p) {
		t.Fatal("a replay after the window was taken")
	}
	now := clk.now()
	if _, st := g.judge(earlyAt(g, now.Add(-earlyPastWindow-time.Millisecond), "old")); st != transport.EarlyDataRefused {
		t.Fatalf("a timestamp older than the window: status %#x", st)
	}
	if admitted(g, earlyAt(g, now.Add(earlyFutureSkew+time.Millisecond), "future")) {
		t.Fatal("a timestamp too far ahead was taken")
	}
	if !admitted(g, earlyAt(g, now.Add(-earlyPastWindow+time.Second), "late but in window")) {
		t.Fatal("a timestamp inside the window was refused")
	}
	// Early data for another instance (another process with this key, or
	// this executor before a restart) is never taken, nor remembered.
	other := newEarlyGuard(clk.now)
	q := earlyAt(other, now, "elsewhere")
	for range 2 {
		if _, st := g.judge(q); st != transport.EarlyDataOtherInstance {
			t.Fatalf("early data for another instance: status %#x", st)
		}
	}
	if g.otherInstance.Load() != 2 || len(g.seen) != 2 {
		t.Fatalf("other-instance refusals %d, register %d entries", g.otherInstance.Load(), len(g.seen))
	}
	v1 := append([]byte{0x01}, p[1:25]...) // version 1: no instance
	v1 = append(v1, "start"...)
	for _, junk := range [][]byte{nil, {}, {0x02, 1, 2}, p[:41], v1} {
		if _, st := g.judge(junk); st != transport.EarlyDataRefused {
			t.Fatalf("payload %x: status %#x", junk, st)
		}
	}
	var nilGuard *earlyGuard
	if admitted(nilGuard, earlyAt(g, now, "x")) {
		t.Fatal("a nil guard took early data")
	}
	if e, r := nilGuard.answer(p); e != nil || r != nil {
		t.Fatal("a nil guard answered")
	}
	// Message 2 names the guard's instance, whatever the verdict.
	fresh := earlyAt(g, now, "fresh")
	for _, c := range []struct {
		payload []byte
		status  byte
	}{{fresh, transport.EarlyDataAccepted}, {fresh, transport.EarlyDataReplayed}, {q, transport.EarlyDataOtherInstance}, {nil, transport.EarlyDataRefused}} {
		_, reply := g.answer(c.payload)
		r := transport.ParseEarlyReply(reply)
		if !r.HasInstance || r.Instance != g.instance || r.Status != c.status {
			t.Fatalf("reply %+v, want status %#x and instance %s", r, c.status, g.instance)
		}
	}
}

func TestEarlyGuardWhenFullRefusesEverythingItCouldNotRecord(t *testing.T) {
	clk := &earlyClock{t: time.Unix(1_800_000_000, 0)}
	g := newEarlyGuard(clk.now)
	base := earlyAt(g, clk.now(), "s")
	for i := range earlyMaxEntries {
		q := stamp(base, clk.now())
		binary.BigEndian.PutUint32(q[9:13], uint32(i))
		if !admitted(g, q) {
			t.Fatalf("entry %d refused", i)
		}
	}
	// Full of live entries: this one cannot be recorded, so it is
	// refused, and so is it again later, when there is room.
	over := withNonce(stamp(base, clk.now()), 0xee)
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
	taken0 := stamp(base, clk.now())
	binary.BigEndian.PutUint32(taken0[9:13], 0)
	if _, st := g.judge(taken0); st != transport.EarlyDataReplayed {
		t.Fatal("a taken nonce was not reported replayed after the register filled")
	}
	clk.add(earlyPastWindow)
	if !admitted(g, earlyAt(g, clk.now(), "fresh")) {
		t.Fatal("fresh early data refused once the full register's entries expired")
	}
	// Entries out of the window make room without raising the floor.
	for i := range earlyMaxEntries - len(g.seen) {
		q := stamp(base, clk.now())
		binary.BigEndian.PutUint32(q[9:13], uint32(i))
		q[13] = 0x77
		if !admitted(g, q) {
			t.Fatalf("entry %d refused", i)
		}
	}
	clk.add(earlyPastWindow + time.Second)
	floor := g.floor
	if !admitted(g, earlyAt(g, clk.now(), "after expiry")) || g.floor != floor || len(g.seen) != 1 {
		t.Fatalf("after expiry: floor %d→%d, %d entries", floor, g.floor, len(g.seen))
	}
}

// The executor took a message 1 at T, then restarted after the wall clock
// was set back a minute. When its clock reaches T again the message's
// timestamp is inside the new process's window — and would have been above
// the restart floor of before instances (start + 5 s) — but the new process
// is a new instance: the replay is refused.
func TestEarlyGuardRestartAfterClockSteppedBackRefusesOldMessages(t *testing.T) {
	at := time.Unix(1_800_000_000, 0)
	clk := &earlyClock{t: at}
	g1 := newEarlyGuard(clk.now)
	p := earlyAt(g1, at, "start")
	if !admitted(g1, p) {
		t.Fatal("refused")
	}
	clk2 := &earlyClock{t: at.Add(-time.Minute)}
	g2 := newEarlyGuard(clk2.now) // the restart, clock stepped back
	clk2.add(time.Minute - time.Second)
	now := clk2.now()
	if ts := at.UnixMilli(); ts < now.Add(-earlyPastWindow).UnixMilli() || ts > now.Add(earlyFutureSkew).UnixMilli() ||
		ts <= now.Add(-time.Minute+time.Second+earlyFutureSkew).UnixMilli() {
		t.Fatal("test setup: the message is not in the new run's window above its old restart floor")
	}
	if _, st := g2.judge(p); st != transport.EarlyDataOtherInstance {
		t.Fatalf("replay to the restarted executor: status %#x, want other instance", st)
	}
	// What protects it is the instance alone: a run that reused the old
	// instance (one that stored it, say) would take the replay.
	g3 := newEarlyGuard(clk2.now)
	g3.instance = g1.instance
	if !admitted(g3, p) {
		t.Fatal("test setup: the message is not acceptable but for its instance")
	}
}

// recorder forwards TCP connections to its target (which may change: a
// restarted executor, or another behind the same address), keeping what
// each client sent first (its preamble and message 1, early data inside).
type recorder struct {
	ln     net.Listener
	mu     sync.Mutex
	target string
	firsts [][]byte // per connection, in accept order
	conns  []net.Conn
}

func startRecorder(t *testing.T, target string) *recorder {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{ln: ln, target: target}
	t.Cleanup(func() {
		ln.Close()
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, c := range r.conns {
			c.Close()
		}
	})
	go r.serve()
	return r
}

func (r *recorder) url() string { return "tcp://" + r.ln.Addr().String() }

func (r *recorder) retarget(addr string) { r.mu.Lock(); r.target = addr; r.mu.Unlock() }

func (r *recorder) serve() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		target, i := r.target, len(r.firsts)
		r.firsts = append(r.firsts, nil)
		r.conns = append(r.conns, c)
		r.mu.Unlock()
		u, err := net.Dial("tcp", target)
		if err != nil {
			c.Close()
			continue
		}
		r.mu.Lock()
		r.conns = append(r.conns, u)
		r.mu.Unlock()
		go func() {
			defer u.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					r.mu.Lock()
					if len(r.firsts[i]) < 8<<10 {
						r.firsts[i] = append(r.firsts[i], buf[:n]...)
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
// sent first on the last connection.
func (r *recorder) msg1(t *testing.T) []byte {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.firsts) == 0 {
		t.Fatal("no connection recorded")
	}
	first := r.firsts[len(r.firsts)-1]
	if len(first) < 6 {
		t.Fatalf("recorded %d bytes", len(first))
	}
	n := int(binary.BigEndian.Uint16(first[4:6]))
	if len(first) < 6+n {
		t.Fatalf("message 1 not recorded whole: %d of %d bytes", len(first)-6, n)
	}
	return bytes.Clone(first[:6+n])
}

// replay sends a recorded message 1 to addr and waits for message 2: the
// executor has judged the early data before it sends it.
func replay(t *testing.T, addr string, msg1 []byte) {
	t.Helper()
	replayOpen(t, addr, msg1).Close()
}

// replayOpen is replay leaving the connection open (the session of early
// data taken ends with it).
func replayOpen(t *testing.T, addr string, msg1 []byte) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write(msg1); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(testTimeout))
	var hdr [2]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		t.Fatalf("replay to %s: no message 2: %v", addr, err)
	}
	return c
}

func earlyServer(t *testing.T, key identity.Key) (*Server, *NativeListener) {
	return earlyServerAt(t, key, "tcp://127.0.0.1:0")
}

func earlyServerAt(t *testing.T, key identity.Key, url string) (*Server, *NativeListener) {
	cfg := DefaultConfig()
	cfg.Logger = zaptest.NewLogger(t)
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := srv.ListenNative(url, NativeConfig{Key: key.Keypair()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopEarlyServer(srv, ln) })
	return srv, ln
}

func stopEarlyServer(srv *Server, ln *NativeListener) {
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv.Shutdown(ctx)
}

// earlyClient is a client configuration pinning key, with a known
// executors file (and so an instances file) of its own.
func earlyClient(t *testing.T, key identity.Key) client.Config {
	return client.Config{Key: mustKey(t), KnownExecutors: filepath.Join(t.TempDir(), "known"), Pin: key.PublicKey().Fingerprint()}
}

// learnInstance makes a connection (initialize only) that teaches cfg's
// client the instance of the executor at url.
func learnInstance(t *testing.T, ctx context.Context, url string, cfg client.Config) {
	t.Helper()
	r, err := client.Dial(ctx, url, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
}

// appendRun runs "echo ran >> out" with DialStart.
func appendRun(t *testing.T, ctx context.Context, url string, cfg client.Config, out string) {
	t.Helper()
	r, p, err := client.DialStart(ctx, url, cfg, protocol.ExecParams{
		Argv: []string{"/bin/sh", "-c", "echo ran >> " + out}, Env: map[string]string{"PATH": "/usr/bin:/bin"}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if res, err := p.Wait(ctx); err != nil || res.ExitCode != 0 {
		t.Fatalf("wait: %+v %v", res, err)
	}
}

func runs(t *testing.T, out string) int {
	t.Helper()
	b, err := os.ReadFile(out)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Count(string(b), "ran\n")
}

// A recorded message 1 carrying early data (initialize and a process/start
// that appends a line to a file) is replayed to the executor, and again to
// the executor restarted with the same key: the command runs once.
func TestReplayedMessage1NeverStartsACommandTwice(t *testing.T) {
	key := mustKey(t)
	srv, ln := earlyServer(t, key)
	rec := startRecorder(t, ln.Addr().String())
	out := filepath.Join(t.TempDir(), "runs")
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cfg := earlyClient(t, key)

	learnInstance(t, ctx, rec.url(), cfg)
	if srv.early.taken.Load() != 0 {
		t.Fatal("early data taken from a client that did not know the executor's instance")
	}
	appendRun(t, ctx, rec.url(), cfg, out)
	if srv.early.taken.Load() != 1 {
		t.Fatalf("the executor took early data %d times, want 1 (the start rode in message 1)", srv.early.taken.Load())
	}
	msg1 := rec.msg1(t)

	replay(t, ln.Addr().String(), msg1)
	if srv.early.taken.Load() != 1 || srv.early.replayed.Load() != 1 {
		t.Fatalf("a replayed message 1: taken %d, replayed %d", srv.early.taken.Load(), srv.early.replayed.Load())
	}

	// The executor restarts (same key, empty register, new instance): the
	// replay is refused as naming another instance.
	srv2, ln2 := earlyServer(t, key)
	replay(t, ln2.Addr().String(), msg1)
	if srv2.early.taken.Load() != 0 || srv2.early.otherInstance.Load() != 1 {
		t.Fatalf("a restarted executor: taken %d, other instance %d", srv2.early.taken.Load(), srv2.early.otherInstance.Load())
	}

	// A later command on a new connection runs (and is the only other
	// line): nothing else was started meanwhile.
	appendRun(t, ctx, rec.url(), cfg, out)
	if srv.early.taken.Load() != 2 {
		t.Fatalf("taken %d, want 2", srv.early.taken.Load())
	}
	if got := runs(t, out); got != 2 {
		t.Fatalf("the command ran %d times for 2 legitimate starts and 2 replays", got)
	}
}

// executor.key copied to a second executor — here both executors load it
// from one state directory, as two `outpost executor serve` with the same
// --state-dir would, or two containers from one image: a message 1
// recorded on its way to A and replayed to B is refused by B (another
// instance), and replayed to A again is refused as a replay. The command
// ran once.
func TestCopiedKeyReplayToSecondExecutorIsRefused(t *testing.T) {
	stateDir := t.TempDir()
	keyA, _, err := identity.LoadOrCreate(filepath.Join(stateDir, "executor.key"))
	if err != nil {
		t.Fatal(err)
	}
	keyB, created, err := identity.LoadOrCreate(filepath.Join(stateDir, "executor.key"))
	if err != nil || created || keyB != keyA {
		t.Fatalf("second executor on the state dir: created %v, same key %v, %v", created, keyB == keyA, err)
	}
	a, lnA := earlyServer(t, keyA)
	b, lnB := earlyServer(t, keyB)
	if a.early.instance == b.early.instance {
		t.Fatal("two executor processes share an instance")
	}
	rec := startRecorder(t, lnA.Addr().String())
	out := filepath.Join(t.TempDir(), "runs")
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cfg := earlyClient(t, keyA)
	learnInstance(t, ctx, rec.url(), cfg)
	appendRun(t, ctx, rec.url(), cfg, out)
	if a.early.taken.Load() != 1 {
		t.Fatalf("A took early data %d times, want 1", a.early.taken.Load())
	}
	msg1 := rec.msg1(t)

	replay(t, lnB.Addr().String(), msg1)
	if b.early.taken.Load() != 0 || b.early.otherInstance.Load() != 1 {
		t.Fatalf("B: taken %d, other instance %d: the copy's strike register never saw A's message", b.early.taken.Load(), b.early.otherInstance.Load())
	}
	replay(t, lnA.Addr().String(), msg1)
	if a.early.taken.Load() != 1 || a.early.replayed.Load() != 1 {
		t.Fatalf("A: taken %d, replayed %d", a.early.taken.Load(), a.early.replayed.Load())
	}
	// B still runs its own clients' commands; afterwards the file holds
	// that one and A's: no replay ran.
	appendRun(t, ctx, "tcp://"+lnB.Addr().String(), earlyClient(t, keyB), out)
	if got := runs(t, out); got != 2 {
		t.Fatalf("the command ran %d times for 2 legitimate starts and 2 replays", got)
	}
}

// The executor behind an address restarts (or fails over to another with
// its key): the client still names the old instance; the new one refuses
// the early data and the client sends the same requests in band — the
// command runs exactly once, with no error — and names the new instance
// next time, so its early data is taken again.
func TestStaleInstanceAfterRestartRunsCommandOnce(t *testing.T) {
	key := mustKey(t)
	srv1, ln1 := earlyServer(t, key)
	rec := startRecorder(t, ln1.Addr().String())
	out := filepath.Join(t.TempDir(), "runs")
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cfg := earlyClient(t, key)
	learnInstance(t, ctx, rec.url(), cfg)
	appendRun(t, ctx, rec.url(), cfg, out)
	if srv1.early.taken.Load() != 1 {
		t.Fatalf("taken %d", srv1.early.taken.Load())
	}
	stopEarlyServer(srv1, ln1)

	srv2, ln2 := earlyServer(t, key)
	rec.retarget(ln2.Addr().String())
	appendRun(t, ctx, rec.url(), cfg, out)
	if srv2.early.taken.Load() != 0 || srv2.early.otherInstance.Load() != 1 {
		t.Fatalf("restarted: taken %d, other instance %d", srv2.early.taken.Load(), srv2.early.otherInstance.Load())
	}
	if got := runs(t, out); got != 2 {
		t.Fatalf("after the restart: %d runs, want 2", got)
	}
	appendRun(t, ctx, rec.url(), cfg, out)
	if srv2.early.taken.Load() != 1 {
		t.Fatalf("the client did not learn the new instance: taken %d", srv2.early.taken.Load())
	}
	if got := runs(t, out); got != 3 {
		t.Fatalf("%d runs, want 3", got)
	}
}

// The executor restarts after its host's wall clock was set back past its
// last run (the restart floor of before instances would have let the
// replay in once the clock caught up): the replay of a message 1 it took
// before is refused, and the command is not run again. The restarted
// executor's clock is injected.
func TestClockSteppedBackRestartDoesNotReopenReplays(t *testing.T) {
	key := mustKey(t)
	srv1, ln1 := earlyServer(t, key)
	rec := startRecorder(t, ln1.Addr().String())
	out := filepath.Join(t.TempDir(), "runs")
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cfg := earlyClient(t, key)
	learnInstance(t, ctx, rec.url(), cfg)
	before := time.Now()
	appendRun(t, ctx, rec.url(), cfg, out)
	sent := time.Now() // the message's timestamp is in [before, sent]
	msg1 := rec.msg1(t)
	stopEarlyServer(srv1, ln1)

	// Restarted with the clock a minute back, and 58 s later: the message
	// is in the window [now − 30 s, now + 5 s] and above the old restart
	// floor (start + 5 s).
	clk := &earlyClock{t: sent.Add(-time.Minute)}
	restarted := func() (*Server, *NativeListener) {
		srv, ln := earlyServer(t, key)
		srv.early = newEarlyGuard(clk.now)
		return srv, ln
	}
	srv2, ln2 := restarted()
	clk.add(time.Minute - 2*time.Second)
	if sent.Sub(before) > earlyPastWindow-5*time.Second {
		t.Skip("the first run was too slow for the window")
	}
	replay(t, ln2.Addr().String(), msg1)
	if srv2.early.taken.Load() != 0 || srv2.early.otherInstance.Load() != 1 {
		t.Fatalf("restarted with the clock set back: taken %d, other instance %d", srv2.early.taken.Load(), srv2.early.otherInstance.Load())
	}

	// Control: only the instance stood in the way. The same restart that
	// kept the old run's instance (as if it were stored in the state
	// directory) takes the replay and runs the command again.
	srv3, ln3 := restarted()
	srv3.early.instance = srv1.early.instance
	defer replayOpen(t, ln3.Addr().String(), msg1).Close()
	if srv3.early.taken.Load() != 1 {
		t.Fatal("control: the replay was not acceptable but for its instance")
	}
	for tick := time.NewTicker(10 * time.Millisecond); runs(t, out) < 2; {
		select {
		case <-ctx.Done():
			t.Fatal("control: the accepted replay did not run its command")
		case <-tick.C:
		}
	}
	// A command of its own on the restarted executor; then the file holds
	// the original run, the control's, and that one: the refused replay
	// ran nothing.
	appendRun(t, ctx, "tcp://"+ln2.Addr().String(), earlyClient(t, key), out)
	if got := runs(t, out); got != 3 {
		t.Fatalf("%d runs, want 3", got)
	}
}

func mustKey(t *testing.T) identity.Key {
	k, err := identity.Generate()
	if err != nil {
		t.Fatal(err)
	}
	return k
}
