package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff hands out the delays of one retry loop. Its zero value is not
// useful: set Base and Max. It is not safe for concurrent use; a loop
// owns its Backoff (the router keeps one per worker under its lock).
type Backoff struct {
	// Base is the first delay and the floor of every delay (a
	// non-positive Base means no waiting at all).
	Base time.Duration
	// Max caps the ceiling; a Max below Base is taken as Base.
	Max time.Duration
	// Rand returns a uniform integer in [0, n) for n > 0; nil means
	// math/rand/v2's Int64N (safe to share). Tests inject a fixed one.
	Rand func(n int64) int64

	attempt int
}

// Ceiling is the largest delay the next call to Next may return:
// min(Max, Base·2^attempts), computed without overflow.
func (b *Backoff) Ceiling() time.Duration {
	if b.Base <= 0 {
		return 0
	}
	limit := max(b.Max, b.Base)
	c := b.Base
	for range b.attempt {
		if c > limit/2 {
			return limit
		}
		c *= 2
	}
	return min(c, limit)
}

// Next returns the next delay, uniform in [Base, Ceiling()], and counts an
// attempt.
func (b *Backoff) Next() time.Duration {
	c := b.Ceiling()
	// The attempt count stops growing once the ceiling is reached, so a
	// loop retrying for days cannot overflow it.
	if c < max(b.Max, b.Base) {
		b.attempt++
	}
	span := int64(c - b.Base)
	if span <= 0 {
		return c
	}
	rnd := b.Rand
	if rnd == nil {
		rnd = rand.Int64N
	}
	// span+1 so the ceiling itself can be drawn; span < MaxInt64 since
	// Base > 0.
	return b.Base + time.Duration(rnd(span+1))
}

// Reset starts over from Base: the retried thing worked.
func (b *Backoff) Reset() { b.attempt = 0 }

// Attempts is how many delays were handed out since the last Reset
// (it stops counting at the ceiling).
func (b *Backoff) Attempts() int { return b.attempt }

// Sleep waits d or until ctx ends, reporting whether d elapsed (false
// means ctx ended). A non-positive d returns at once, true unless ctx has
// already ended.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
