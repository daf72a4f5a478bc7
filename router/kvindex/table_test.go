package kvindex

import (
	"math/rand/v2"
	"testing"
)

// TestTableAgainstMap checks the open-addressing table against Go's map under
// random churn, with keys drawn from a small range (long probe runs, many
// backward shifts) and including 0.
func TestTableAgainstMap(t *testing.T) {
	for _, keyRange := range []uint64{8, 200, 1 << 40} {
		rng := rand.New(rand.NewPCG(keyRange, 3))
		var tb table[uint32]
		ref := map[uint64]uint32{}
		for step := range 20000 {
			k := rng.Uint64N(keyRange)
			switch rng.IntN(3) {
			case 0, 1:
				v := rng.Uint32()
				tb.put(k, v)
				ref[k] = v
			case 2:
				tb.del(k)
				delete(ref, k)
			}
			if tb.len() != len(ref) {
				t.Fatalf("range %d step %d: len %d, want %d", keyRange, step, tb.len(), len(ref))
			}
			q := rng.Uint64N(keyRange)
			got, ok := tb.get(q)
			want, wok := ref[q]
			if ok != wok || got != want {
				t.Fatalf("range %d step %d: get(%d) = %d,%v want %d,%v", keyRange, step, q, got, ok, want, wok)
			}
		}
		n := 0
		tb.each(func(k uint64, v uint32) {
			n++
			if ref[k] != v {
				t.Fatalf("each: %d=%d, want %d", k, v, ref[k])
			}
		})
		if n != len(ref) {
			t.Fatalf("each visited %d, want %d", n, len(ref))
		}
	}
}
