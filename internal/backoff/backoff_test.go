package backoff

import (
	"context"
	"math"
	"testing"
	"time"
)

// fixed returns a Rand that always draws the fraction f of its range.
func fixed(f float64) func(int64) int64 {
	return func(n int64) int64 {
		if f >= 1 {
			return n - 1 // float64(n) may round past MaxInt64
		}
		return min(int64(float64(n)*f), n-1)
	}
}

func TestNext(t *testing.T) {
	const ms = time.Millisecond
	tests := []struct {
		name      string
		base, max time.Duration
		rand      func(int64) int64
		want      []time.Duration
	}{
		{"lowest draw stays at base", 10 * ms, time.Second, fixed(0), []time.Duration{10 * ms, 10 * ms, 10 * ms}},
		{"highest draw doubles to max", 10 * ms, 70 * ms, fixed(1), []time.Duration{10 * ms, 20 * ms, 40 * ms, 70 * ms, 70 * ms}},
		{"half draw", 100 * ms, time.Second, fixed(0.5), []time.Duration{100 * ms, 150 * ms, 250 * ms, 450 * ms, 550 * ms, 550 * ms}},
		{"max below base is base", 50 * ms, ms, fixed(1), []time.Duration{50 * ms, 50 * ms}},
		{"no base, no wait", 0, time.Second, fixed(1), []time.Duration{0, 0}},
		{"huge max never overflows", time.Nanosecond, math.MaxInt64, fixed(1), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := Backoff{Base: tt.base, Max: tt.max, Rand: tt.rand}
			if tt.want == nil {
				prev := time.Duration(0)
				for i := range 200 {
					d := b.Next()
					if d < prev || d <= 0 {
						t.Fatalf("attempt %d: %v after %v", i, d, prev)
					}
					prev = d
				}
				if prev != math.MaxInt64 {
					t.Fatalf("ceiling %v, want MaxInt64", prev)
				}
				return
			}
			for i, w := range tt.want {
				if got := b.Next(); got != w {
					t.Fatalf("attempt %d: got %v, want %v", i, got, w)
				}
			}
		})
	}
}

func TestReset(t *testing.T) {
	b := Backoff{Base: time.Millisecond, Max: time.Second, Rand: fixed(1)}
	for range 5 {
		b.Next()
	}
	if b.Attempts() != 5 || b.Ceiling() != 32*time.Millisecond {
		t.Fatalf("attempts %d ceiling %v", b.Attempts(), b.Ceiling())
	}
	b.Reset()
	if got := b.Next(); got != time.Millisecond {
		t.Fatalf("after Reset: %v, want 1ms", got)
	}
}

func TestJitterStaysInRange(t *testing.T) {
	// The default source: every draw within [Base, Ceiling].
	b := Backoff{Base: time.Millisecond, Max: 64 * time.Millisecond}
	for range 1000 {
		c := b.Ceiling()
		if d := b.Next(); d < b.Base || d > c {
			t.Fatalf("%v outside [%v, %v]", d, b.Base, c)
		}
	}
}

func TestSleep(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	tests := []struct {
		name string
		ctx  context.Context
		d    time.Duration
		want bool
	}{
		{"elapses", ctx, time.Millisecond, true},
		{"zero is at once", ctx, 0, true},
		{"negative is at once", ctx, -time.Second, true},
	}
	for _, tt := range tests {
		if got := Sleep(tt.ctx, tt.d); got != tt.want {
			t.Errorf("%s: got %v", tt.name, got)
		}
	}
	cancel()
	for _, d := range []time.Duration{0, time.Hour} {
		if Sleep(ctx, d) {
			t.Errorf("ended ctx, %v: slept", d)
		}
	}
}
