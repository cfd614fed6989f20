package relay

import (
	"encoding/binary"
	"testing"
	"time"
)

func stampAt(at time.Time, nonce byte) []byte {
	b := make([]byte, freshLen)
	binary.BigEndian.PutUint64(b, uint64(at.UnixMilli()))
	b[8] = nonce
	b[9] = nonce >> 4
	return b
}

// A stamp is fresh once, inside the window; the register forgets what
// left the window and refuses everything when full of live nonces.
func TestFreshnessRegisterTakesEachStampOnceInsideTheWindow(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	f := &freshness{now: func() time.Time { return now }}
	if !f.take(stampAt(now, 1)) || f.take(stampAt(now, 1)) {
		t.Fatal("a stamp must be fresh exactly once")
	}
	for _, c := range []struct {
		at   time.Time
		want bool
	}{
		{now.Add(-freshPast - time.Millisecond), false},
		{now.Add(freshFuture + time.Millisecond), false},
		{now.Add(-freshPast + time.Second), true},
		{now.Add(freshFuture - time.Second), true},
	} {
		if got := f.take(stampAt(c.at, byte(c.at.Unix()))); got != c.want {
			t.Errorf("stamp %v from now: fresh %v, want %v", c.at.Sub(now), got, c.want)
		}
	}
	if f.take(nil) || f.take(make([]byte, freshLen-1)) {
		t.Fatal("a malformed stamp is fresh")
	}
	// Past the window the nonce is forgotten, and its stamp is stale: a
	// recording is no good again.
	now = now.Add(freshPast + freshFuture + time.Second)
	if f.take(stampAt(now.Add(-freshPast-freshFuture-time.Second), 1)) {
		t.Fatal("an old recording was taken after its nonce was forgotten")
	}
	if len(f.seen) != 0 {
		t.Fatalf("%d nonces kept past the window", len(f.seen))
	}
	// Full of live nonces: refused, not flushed.
	for i := range freshMax {
		st := stampAt(now, 0)
		binary.BigEndian.PutUint32(st[8:], uint32(i))
		if !f.take(st) {
			t.Fatalf("nonce %d refused below the bound", i)
		}
	}
	if f.take(stampAt(now, 0xEE)) || len(f.seen) != freshMax {
		t.Fatalf("a full register took one more (%d kept)", len(f.seen))
	}
}
