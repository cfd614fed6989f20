package executor

// Early data (0-RTT) on the native transport: a client that pinned the
// executor's key may put the first bytes of its mux stream — the
// control stream's opening, initialize, initialized and process/start — in
// the payload of Noise IK message 1, so that a cold start costs one round
// trip after TCP's instead of two (PROTOCOL.md section 2.7).
//
// Message 1 can be replayed by anyone who recorded it, and process/start
// has effects, so the executor accepts early data only from a message 1
// it has provably not seen before. Two things make that provable:
//
//   - The instance. Each earlyGuard (one per Server, in memory only) has a
//     random id, handed to every client in message 2; early data must name
//     it. The strike register below lives in one process, but the key does
//     not: copied to a second machine (containers, an HA pair), or loaded
//     by a second executor started on the same state directory, it serves
//     a process whose register never saw the first's messages. Such a copy
//     has another instance id, so a message 1 recorded on its way to one
//     instance is refused by every other — and by the same executor
//     restarted, whatever its clock did meanwhile (set back past the old
//     run's last timestamps, say): nothing made before an instance existed
//     can name it.
//   - The strike register, for replays to the same instance: the payload
//     carries the client's clock and a random nonce (both under the
//     handshake's AEAD, bound to message 1's ephemeral key), and the guard
//     remembers every nonce it accepted while its timestamp is in the
//     window.
//
// Anything it cannot vouch for — another instance, out of the window, a
// nonce seen before, a full register — is refused, and the client sends the
// same bytes again over the established (forward-secret, unreplayable)
// channel: refusing costs a round trip, never correctness. (A nonce seen
// before is the exception: the client then sends nothing, see judge.)

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

// earlyGuard is the executor's strike register: it accepts early data only
// for its own instance, a payload's nonce at most once, for as long as the
// payload's timestamp could be in the window, and never one that it had no
// room to record.
//
// Its clock is the wall clock read once, at creation, advanced by the
// monotonic clock: stepping the system clock back after start cannot
// bring a consumed timestamp back into the window. (Stepping it back
// before a restart does not matter either: the restarted process is a new
// instance.)
type earlyGuard struct {
	now      func() time.Time
	instance transport.EarlyInstance // random, never stored: see the file comment

	// Counters (tests, logs): early data taken, refused as a replay,
	// refused as naming another instance.
	taken, replayed, otherInstance atomic.Int64

	mu sync.Mutex
	// floor: a timestamp at or below it is refused. It rises past
	// everything the guard failed to record when the register was full.
	// (Before instances it started at the guard's creation + skew, for a
	// restarted executor that lost its register; the instance does that
	// now, and clock-proof.)
	floor  int64
	seen   map[[16]byte]int64 // nonce → its timestamp
	oldest int64              // no entry is older (a lower bound), for pruning
}

// newEarlyGuard makes a guard with a fresh instance; now nil is the clock
// described at earlyGuard. It panics if the system has no randomness (as
// the Noise handshakes would fail anyway).
func newEarlyGuard(now func() time.Time) *earlyGuard {
	if now == nil {
		base := time.Now()
		now = func() time.Time { return base.Add(time.Since(base)) }
	}
	inst, err := transport.NewEarlyInstance()
	if err != nil {
		panic("executor: no randomness for the early data instance: " + err.Error())
	}
	return &earlyGuard{now: now, instance: inst, seen: map[[16]byte]int64{}}
}

// answer judges IK message 1's payload: early is what to take as the
// start of the stream (nil for nothing), reply is message 2's payload — the
// verdict and this guard's instance, which a client names in its next
// early data. A nil guard takes nothing and answers nothing.
func (g *earlyGuard) answer(payload []byte) (early, reply []byte) {
	if g == nil {
		return nil, nil
	}
	early, status := g.judge(payload)
	return early, transport.EncodeEarlyReply(status, g.instance)
}

// admit parses payload and reports the early bytes it may take as the
// start of the stream; ok false means refuse them.
func (g *earlyGuard) admit(payload []byte) (early []byte, ok bool) {
	early, status := g.judge(payload)
	return early, status == transport.EarlyDataAccepted
}

// judge is admit with the status to answer. EarlyDataReplayed: the
// payload's nonce was taken before, so a copy of this message 1 may
// already have run its requests on another connection, and the client
// must not re-send them in band — an attacker who races a copy of a
// client's message 1 ahead of the original would otherwise get the
// client's process/start run twice. The instance is checked first (a
// nonce in the register was for this instance), then the nonce, then the
// window, so a copy taken in time and an original delayed out of the
// window is still reported replayed.
func (g *earlyGuard) judge(payload []byte) (early []byte, status byte) {
	d, ok := transport.ParseEarlyData(payload)
	if g == nil || !ok {
		return nil, transport.EarlyDataRefused
	}
	if d.Instance != g.instance {
		g.otherInstance.Add(1)
		return nil, transport.EarlyDataOtherInstance
	}
	ts := d.UnixMilli
	now := g.now().UnixMilli()
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, dup := g.seen[d.Nonce]; dup {
		g.replayed.Add(1)
		return nil, transport.EarlyDataReplayed // a replay, or a copy that came first
	}
	low := now - earlyPastWindow.Milliseconds()
	if ts <= g.floor || ts < low || ts > now+earlyFutureSkew.Milliseconds() {
		return nil, transport.EarlyDataRefused
	}
	if len(g.seen) >= earlyMaxEntries {
		g.prune(low)
	}
	if len(g.seen) >= earlyMaxEntries {
		// Full of live entries: this one cannot be recorded, so it and
		// everything before it must never be accepted: the floor rises
		// past any timestamp accepted so far. The entries stay until they
		// expire (prune): forgetting a nonce that was taken would let a
		// delayed original of it be re-sent in band (see judge).
		g.floor = now + earlyFutureSkew.Milliseconds()
		return nil, transport.EarlyDataRefused
	}
	if len(g.seen) == 0 || ts < g.oldest {
		g.oldest = ts
	}
	g.seen[d.Nonce] = ts
	g.taken.Add(1)
	return d.Bytes, transport.EarlyDataAccepted
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
