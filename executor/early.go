package executor

// Early data (0-RTT) on the native transport: a client that pinned the
// executor's key may put the first bytes of its mux stream — the
// control stream's opening, initialize, initialized and process/start — in
// the payload of Noise IK message 1, so that a cold start costs one round
// trip after TCP's instead of two (PROTOCOL.md section 2.7).
//
// Message 1 can be replayed by anyone who recorded it, and process/start
// has effects, so the executor accepts early data only from a message 1
// it has provably not seen before: the payload carries the client's clock
// and a random nonce (both under the handshake's AEAD, bound to message
// 1's ephemeral key), and earlyGuard remembers every nonce it accepted
// while its timestamp is in the window. Anything it cannot vouch for —
// out of the window, a nonce seen before, older than this executor's
// start, a full register — is refused, and the client sends the same
// bytes again over the established (forward-secret, unreplayable)
// channel: refusing costs a round trip, never correctness.

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/outpost-exec/outpost/transport"
)

// Bounds of early data acceptance.
const (
	earlyPastWindow = 30 * time.Second // a timestamp may be this far behind the executor's clock
	earlyFutureSkew = 5 * time.Second  // and this far ahead
	earlyMaxEntries = 1 << 16          // nonces remembered (≈ 3 MiB at most)
)

// earlyGuard is the executor's strike register: it accepts a payload's
// nonce at most once, for as long as the payload's timestamp could be in
// the window, and never one that may have been seen before it existed or
// that it had no room to record.
//
// Its clock is the wall clock read once, at creation, advanced by the
// monotonic clock: stepping the system clock back after start cannot
// bring a consumed timestamp back into the window.
type earlyGuard struct {
	now   func() time.Time
	taken atomic.Int64 // early data accepted (tests, metrics)

	mu sync.Mutex
	// floor: a timestamp at or below it is refused. It starts at the
	// guard's creation plus earlyFutureSkew — an executor that restarted
	// lost its register, and a message 1 made before could carry a
	// timestamp up to that — and rises past everything it failed to
	// record when the register was full.
	floor  int64
	seen   map[[16]byte]int64 // nonce → its timestamp
	oldest int64              // no entry is older (a lower bound), for pruning
}

func newEarlyGuard(now func() time.Time) *earlyGuard {
	if now == nil {
		base := time.Now()
		now = func() time.Time { return base.Add(time.Since(base)) }
	}
	return &earlyGuard{now: now, floor: now().Add(earlyFutureSkew).UnixMilli(), seen: map[[16]byte]int64{}}
}

// admit parses payload and reports the early bytes it may take as the
// start of the stream; ok false means refuse them (the client sends them
// again in band). A payload that is not early data (none, or another
// version) is refused.
func (g *earlyGuard) admit(payload []byte) (early []byte, ok bool) {
	early, replayed := g.judge(payload)
	return early, early != nil && !replayed
}

// judge is admit that also says whether the payload's nonce was taken
// before (replayed): then a copy of this message 1 may already have run
// its requests on another connection, and the client must not re-send
// them in band (transport.EarlyDataReplayed) — an attacker who races a
// copy of a client's message 1 ahead of the original would otherwise get
// the client's process/start run twice. The nonce is checked before the
// window, so a copy taken in time and an original delayed out of the
// window is still reported replayed.
func (g *earlyGuard) judge(payload []byte) (early []byte, replayed bool) {
	ts, nonce, early, ok := transport.ParseEarlyData(payload)
	if g == nil || !ok {
		return nil, false
	}
	now := g.now().UnixMilli()
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, dup := g.seen[nonce]; dup {
		return nil, true // a replay, or a copy that came first
	}
	low := now - earlyPastWindow.Milliseconds()
	if ts <= g.floor || ts < low || ts > now+earlyFutureSkew.Milliseconds() {
		return nil, false
	}
	if len(g.seen) >= earlyMaxEntries {
		g.prune(low)
	}
	if len(g.seen) >= earlyMaxEntries {
		// Full of live entries: this one cannot be recorded, so it and
		// everything before it must never be accepted. Raising the floor
		// past any timestamp accepted so far makes the register's entries
		// moot: drop them.
		// The entries stay until they expire (prune): forgetting a
		// nonce that was taken would let a delayed original of it be
		// re-sent in band (see judge).
		g.floor = now + earlyFutureSkew.Milliseconds()
		return nil, false
	}
	if len(g.seen) == 0 || ts < g.oldest {
		g.oldest = ts
	}
	g.seen[nonce] = ts
	g.taken.Add(1)
	return early, false
}

// prune drops the entries whose timestamps are below low: out of the
// window for good, since the guard's clock never goes back.
func (g *earlyGuard) prune(low int64) {
	if g.oldest >= low {
		return
	}
	oldest := int64(1<<63 - 1)
	for k, ts := range g.seen {
		if ts < low {
			delete(g.seen, k)
		} else if ts < oldest {
			oldest = ts
		}
	}
	g.oldest = oldest
}
