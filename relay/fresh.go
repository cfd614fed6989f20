package relay

// The freshness register: which relay/connect messages 1 this relay has
// taken as fresh.
//
// A client that knows the executor's key stamps its relay/connect with
// Fresh: its clock (Unix milliseconds) and a random nonce, under the
// handshake's AEAD, so a replay cannot change them. The relay takes a
// message 1 as fresh — and spends on it at once: the token's use, the
// slot, the inner handshake written to the executor — only if the stamp
// lies in [now − freshPast, now + freshFuture] and the nonce is not in the
// register, which keeps every nonce it took while its stamp can still be
// in the window. Anything else (a replay, a client whose clock is off, a
// full register) is served a round trip later, once the client's first
// record has proven the connection fresh (confirm.go).
//
// What this leaves a replayer: each relay takes a recording at most once,
// and only while the original's stamp is in the window; at the relay that
// took the original, never. A recording replayed at another member of a
// cluster within the window spends nothing (the client key holds its use
// already) and holds one slot until the executor, which refuses the
// replayed inner early data by its own strike register, and the relay,
// which waits for a confirmation that never comes, hang up
// (Config.HandshakeTimeout).
//
// Bound: freshMax nonces (24 bytes each, with the FIFO ~1.5 MiB); when
// it is full of live ones, connects take the confirmed path.

import (
	"encoding/binary"
	"sync"
	"time"
)

const (
	freshPast   = 30 * time.Second
	freshFuture = 5 * time.Second
	freshMax    = 65536
	// FreshLen is the length of RelayConnectParams.Fresh: 8 bytes of
	// Unix milliseconds, big-endian, then a 16-byte nonce.
	freshLen = 24
)

// freshness is the register.
type freshness struct {
	now func() time.Time

	mu   sync.Mutex
	seen map[[16]byte]struct{}
	fifo []freshEntry // in the order taken; stamps expire roughly in order
}

type freshEntry struct {
	nonce [16]byte
	until time.Time // when its stamp leaves the window
}

// take reports whether stamp is fresh, and records it if so.
func (f *freshness) take(stamp []byte) bool {
	if len(stamp) != freshLen {
		return false
	}
	at := time.UnixMilli(int64(binary.BigEndian.Uint64(stamp[:8])))
	var nonce [16]byte
	copy(nonce[:], stamp[8:])
	now := f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	// Forget what left the window. An entry is kept until its stamp's
	// window ends, measured from when it was taken, however the stamps
	// arrived (a late one may sit behind an early one a little longer).
	for len(f.fifo) > 0 && now.After(f.fifo[0].until) {
		delete(f.seen, f.fifo[0].nonce)
		f.fifo = f.fifo[1:]
	}
	if at.Before(now.Add(-freshPast)) || at.After(now.Add(freshFuture)) {
		return false
	}
	if _, dup := f.seen[nonce]; dup || len(f.seen) >= freshMax {
		return false
	}
	if f.seen == nil {
		f.seen = map[[16]byte]struct{}{}
	}
	f.seen[nonce] = struct{}{}
	// Until now + the whole window: a stamp can be at most freshFuture
	// ahead of now, and stays acceptable freshPast after itself.
	f.fifo = append(f.fifo, freshEntry{nonce: nonce, until: now.Add(freshPast + freshFuture)})
	return true
}
