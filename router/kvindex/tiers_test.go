package kvindex

import (
	"fmt"
	"testing"
	"unsafe"

	"github.com/tandemllm/tandem/blockhash"
	"github.com/tandemllm/tandem/planes/kvevents"
)

// TestLowerTiers: with LowerTiers, a block the engine moved from its pool
// to host memory or disk (BlockStored with medium CPU/STORAGE, then the
// pool's BlockRemoved, as an offloading engine publishes them) stays
// matched; leaving every tier unmatches it. Without LowerTiers the lower
// tiers' events are ignored as before.
func TestLowerTiers(t *testing.T) {
	a := seqTokens(1, 6)
	ea := engineHash(1)
	in := func(medium string, from, to int) kvevents.Event {
		e := stored(a, from, to, ea, bs)
		e.Medium = medium
		return e
	}
	out := func(medium string, hs ...uint64) kvevents.Event {
		e := removed(hs...)
		e.Medium = medium
		return e
	}
	// Blocks 3..5 go to host memory one by one (parent in the pool, then
	// in host memory), 5 goes on to disk.
	offload := []kvevents.Event{stored(a, 0, 6, ea, bs),
		in("CPU", 3, 4), out("GPU", ea(3)), in("CPU", 4, 5), out("GPU", ea(4)), in("CPU", 5, 6), out("GPU", ea(5)),
		in("STORAGE", 5, 6), out("CPU", ea(5))}
	tests := []struct {
		name   string
		lower  bool
		events []kvevents.Event
		want   map[string]int
	}{
		{"pool only: offloaded tail unmatched", false, offload, map[string]int{"w0": 3}},
		{"lower tiers: offloaded tail still matched", true, offload, map[string]int{"w0": 6}},
		{"lower tiers: dropped from disk", true, append(offload[:len(offload):len(offload)], out("STORAGE", ea(5))), map[string]int{"w0": 5}},
		{"lower tiers: onboarded back, then host copy dropped", true,
			append(offload[:len(offload):len(offload)], in("GPU", 3, 5), out("CPU", ea(3), ea(4))), map[string]int{"w0": 6}},
		{"lower tiers: SGLang names", true, []kvevents.Event{stored(a, 0, 3, ea, bs), in("CPU_PINNED", 3, 5), in("DISK", 5, 6)}, map[string]int{"w0": 6}},
		{"lower tiers: placeholder without tokens ignored", true,
			[]kvevents.Event{stored(a, 0, 3, ea, bs), tokenless(in("CPU", 3, 6))}, map[string]int{"w0": 3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ix := mustNew(t, Config{LowerTiers: tc.lower})
			if err := ix.AddWorker("w0", bs); err != nil {
				t.Fatal(err)
			}
			if _, err := ix.Apply("w0", tc.events); err != nil {
				t.Fatal(err)
			}
			got := lookupMap(ix, blockhash.Blocks(a, bs))
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("lookup = %v, want %v", got, tc.want)
			}
			if err := ix.check(); err != nil {
				t.Fatal(err)
			}
		})
	}
	// A lower tier's residence is a residence like the pool's: no byte more.
	if n := unsafe.Sizeof(node{}); n != 32 {
		t.Fatalf("a residence is %d bytes, was 32", n)
	}
}
