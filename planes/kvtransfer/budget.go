package kvtransfer

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// DefaultBudget is the default per-worker staging budget (--transfer-budget).
const DefaultBudget = 512 << 20

// Budget bounds the staging memory of one worker's transfers. It accounts
// for allocated bytes, idle or not: released buffers are kept for reuse
// (blocks of one layout all have the same size) rather than left to the
// garbage collector, whose lag would otherwise let the heap, and the RSS,
// grow past the budget.
type Budget struct {
	limit int64

	mu        sync.Mutex
	allocated int64 // bytes of every buffer in use or idle
	inUse     int64
	peak      int64
	waited    time.Duration
	idle      map[int][][]byte
	changed   chan struct{} // closed and replaced whenever memory is returned
}

// NewBudget returns a budget of limit bytes (DefaultBudget if limit <= 0).
func NewBudget(limit int64) *Budget {
	if limit <= 0 {
		limit = DefaultBudget
	}
	return &Budget{limit: limit, idle: map[int][][]byte{}, changed: make(chan struct{})}
}

// Limit is the budget in bytes.
func (b *Budget) Limit() int64 { return b.limit }

// BudgetStats is a snapshot of a budget.
type BudgetStats struct {
	Limit, Allocated, InUse, Peak int64
	Waited                        time.Duration
}

// Stats returns the current accounting.
func (b *Budget) Stats() BudgetStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return BudgetStats{Limit: b.limit, Allocated: b.allocated, InUse: b.inUse, Peak: b.peak, Waited: b.waited}
}

// Acquire returns a buffer of n bytes, waiting until the budget allows it
// or ctx ends. A request larger than the whole budget fails at once: it
// could never be served.
func (b *Budget) Acquire(ctx context.Context, n int) ([]byte, error) {
	if int64(n) > b.limit {
		return nil, fmt.Errorf("kvtransfer: a %d-byte block exceeds the %d-byte transfer budget", n, b.limit)
	}
	var start time.Time
	for {
		b.mu.Lock()
		if l := b.idle[n]; len(l) > 0 {
			buf := l[len(l)-1]
			b.idle[n] = l[:len(l)-1]
			b.inUse += int64(n)
			b.noteWaitLocked(start)
			b.mu.Unlock()
			return buf, nil
		}
		// Idle buffers of other sizes are given up to make room.
		for size, l := range b.idle {
			for len(l) > 0 && b.allocated+int64(n) > b.limit {
				l = l[:len(l)-1]
				b.allocated -= int64(size)
			}
			b.idle[size] = l
		}
		if b.allocated+int64(n) <= b.limit {
			b.allocated += int64(n)
			b.inUse += int64(n)
			b.peak = max(b.peak, b.allocated)
			b.noteWaitLocked(start)
			b.mu.Unlock()
			return make([]byte, n), nil
		}
		ch := b.changed
		b.mu.Unlock()
		if start.IsZero() {
			start = time.Now()
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("kvtransfer: waiting for transfer budget: %w", ctx.Err())
		}
	}
}

func (b *Budget) noteWaitLocked(start time.Time) {
	if !start.IsZero() {
		b.waited += time.Since(start)
	}
}

// Release returns a buffer from Acquire. It must not be used afterwards.
func (b *Budget) Release(buf []byte) {
	if buf == nil {
		return
	}
	b.mu.Lock()
	b.inUse -= int64(len(buf))
	b.idle[len(buf)] = append(b.idle[len(buf)], buf)
	close(b.changed)
	b.changed = make(chan struct{})
	b.mu.Unlock()
}
