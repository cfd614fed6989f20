// Package backoff is the jittered exponential backoff outpost retries
// with: a client resuming a dropped connection, an executor rejoining its
// relay.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff waits a random part of a ceiling that starts at Initial and
// doubles after every wait, up to Max ("full jitter": retries from many
// peers spread out instead of arriving together). The zero value is not
// usable: set Initial and Max.
type Backoff struct {
	Initial time.Duration
	Max     time.Duration
	// Sleep waits d or until ctx ends, returning ctx's error then. nil
	// means Sleep (a timer); tests inject their own clock here.
	Sleep func(ctx context.Context, d time.Duration) error
	// Rand returns a random integer in [0, n). nil means math/rand/v2.
	Rand func(n int64) int64

	ceiling time.Duration
}

// Ceiling is the most the next wait may last.
func (b *Backoff) Ceiling() time.Duration {
	if b.ceiling <= 0 {
		return max(b.Initial, time.Millisecond)
	}
	return b.ceiling
}

// Next returns the next delay — a random part of the ceiling, at least
// 1 ms — and doubles the ceiling (up to Max).
func (b *Backoff) Next() time.Duration {
	ceiling := b.Ceiling()
	rnd := b.Rand
	if rnd == nil {
		rnd = rand.Int64N
	}
	d := time.Duration(rnd(int64(ceiling))) + time.Millisecond
	b.ceiling = min(ceiling*2, max(b.Max, b.Initial))
	return d
}

// Wait sleeps the next delay. It returns early, with ctx's error, when
// ctx ends first.
func (b *Backoff) Wait(ctx context.Context) error {
	sleep := b.Sleep
	if sleep == nil {
		sleep = Sleep
	}
	return sleep(ctx, b.Next())
}

// Reset starts again from Initial (after a success).
func (b *Backoff) Reset() { b.ceiling = 0 }

// Sleep waits d, or until ctx ends and returns its error.
func Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
