package mocker

import (
	"sync"
	"time"
)

// Clock is the mocker's source of time. The scheduler only ever reads Now
// and waits on After, so swapping in a VirtualClock makes every simulated
// duration exact and tests free of wall-clock flakiness.
type Clock interface {
	Now() time.Time
	// After fires once d has elapsed.
	After(d time.Duration) <-chan time.Time
}

type wallClock struct{}

func (wallClock) Now() time.Time                         { return time.Now() }
func (wallClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// VirtualClock is a Clock whose time only moves when the scheduler sleeps:
// After(d) advances it by d and fires at once. A simulation therefore runs
// as fast as the CPU allows while every timestamp it records (TTFT,
// inter-token latency) is exactly what the timing model says. Share one
// VirtualClock between workers only if their sleeps may add up.
type VirtualClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewVirtualClock returns a clock reading start.
func NewVirtualClock(start time.Time) *VirtualClock { return &VirtualClock{now: start} }

// Now implements Clock.
func (c *VirtualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After implements Clock by advancing the clock.
func (c *VirtualClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	c.now = c.now.Add(d)
	now := c.now
	c.mu.Unlock()
	ch := make(chan time.Time, 1)
	ch <- now
	return ch
}

// Advance moves the clock forward, for tests that simulate idle time.
func (c *VirtualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
