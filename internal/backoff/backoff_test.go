package backoff

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// Waits take a random part of a ceiling that doubles from Initial to Max
// and starts over on Reset; measured on synctest's fake clock, so the
// timings are exact and the test takes no real time.
func TestWaitsDoubleUpToMaxAndResetStartsOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Rand: func(n int64) int64 { return n - 1 }}
		want := []time.Duration{100, 200, 400, 800, 1000, 1000}
		for i, w := range want {
			w *= time.Millisecond
			if c := b.Ceiling(); c != w {
				t.Fatalf("wait %d: ceiling %v, want %v", i, c, w)
			}
			start := time.Now()
			if err := b.Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
			// rand returned ceiling-1ns; the 1 ms floor is added to it.
			if got := time.Since(start); got != w-1+time.Millisecond {
				t.Fatalf("wait %d took %v, want %v", i, got, w-1+time.Millisecond)
			}
		}
		b.Reset()
		start := time.Now()
		b.Wait(context.Background())
		if got := time.Since(start); got != 100*time.Millisecond-1+time.Millisecond {
			t.Fatalf("after Reset the wait took %v", got)
		}
	})
}

// Full jitter: each delay is within [1 ms, ceiling + 1 ms), and they are
// not all the same.
func TestDelaysAreJitteredWithinTheCeiling(t *testing.T) {
	b := Backoff{Initial: 100 * time.Millisecond, Max: 100 * time.Millisecond}
	seen := map[time.Duration]bool{}
	for range 200 {
		d := b.Next()
		if d < time.Millisecond || d >= 101*time.Millisecond {
			t.Fatalf("delay %v outside [1ms, 101ms)", d)
		}
		seen[d] = true
	}
	if len(seen) < 50 {
		t.Fatalf("only %d distinct delays in 200", len(seen))
	}
}

// A wait ends as soon as its context does, not when its delay is over.
func TestWaitEndsWithItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := Backoff{Initial: time.Hour, Max: time.Hour, Rand: func(n int64) int64 { return n - 1 }}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- b.Wait(ctx) }()
		time.Sleep(5 * time.Second)
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("the wait ended before its context: %v", err)
		default:
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("wait returned %v", err)
		}
		if got := time.Since(start); got != 5*time.Second {
			t.Fatalf("the wait ended after %v, want at the cancel (5s)", got)
		}
		// An already-ended context does not wait at all.
		start = time.Now()
		if err := b.Wait(ctx); !errors.Is(err, context.Canceled) || time.Since(start) != 0 {
			t.Fatalf("%v after %v", err, time.Since(start))
		}
		// A deadline cuts a wait short.
		dctx, dcancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer dcancel()
		start = time.Now()
		if err := b.Wait(dctx); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != 3*time.Second {
			t.Fatalf("%v after %v", err, time.Since(start))
		}
	})
}

// The injected sleep receives every delay: callers can test their retry
// loops without a clock.
func TestInjectedSleepSeesEveryDelay(t *testing.T) {
	var got []time.Duration
	b := Backoff{Initial: 10 * time.Millisecond, Max: 40 * time.Millisecond,
		Rand:  func(n int64) int64 { return 0 },
		Sleep: func(_ context.Context, d time.Duration) error { got = append(got, d); return nil }}
	for range 4 {
		b.Wait(context.Background())
	}
	for i, d := range got {
		if d != time.Millisecond {
			t.Fatalf("delay %d: %v", i, d)
		}
	}
	if len(got) != 4 || b.Ceiling() != 40*time.Millisecond {
		t.Fatalf("%v, ceiling %v", got, b.Ceiling())
	}
}
