package kvindex

import (
	"fmt"
	"testing"
	"unsafe"

	"github.com/tandemllm/tandem/blockhash"
	"github.com/tandemllm/tandem/kvcache"
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

// TestShareGroup: w0 and w1 share a disk tier, w2 does not. A G3 block w0
// publishes is a residence of w0 and w1 (w1 places it under the parent
// w0 holds in its pool when w1 holds none); its removal leaves both; w2
// never holds it; an index without the disk tier (NoDisk) ignores it.
func TestShareGroup(t *testing.T) {
	a := seqTokens(1, 6)
	ea := engineHash(1)
	disk := func(from, to int) kvevents.Event {
		e := stored(a, from, to, ea, bs)
		e.Medium = "STORAGE"
		return e
	}
	out := removed(ea(5))
	out.Medium = "STORAGE"
	tests := []struct {
		name   string
		noDisk bool
		w1     []kvevents.Event // w1's own events first
		w0     []kvevents.Event
		want   map[string]int
	}{
		{"whole prefix on the shared disk", false, nil,
			[]kvevents.Event{disk(0, 6)}, map[string]int{"w0": 6, "w1": 6}},
		{"parent in the publisher's pool only", false, nil,
			[]kvevents.Event{stored(a, 0, 3, ea, bs), disk(3, 6)}, map[string]int{"w0": 6}},
		{"w1 holds the head in its pool, the rest is shared", false, []kvevents.Event{stored(a, 0, 3, ea, bs)},
			[]kvevents.Event{stored(a, 0, 3, ea, bs), disk(3, 6)}, map[string]int{"w0": 6, "w1": 6}},
		{"removed from the shared disk: from every member", false, nil,
			[]kvevents.Event{disk(0, 6), out}, map[string]int{"w0": 5, "w1": 5}},
		{"NoDisk index ignores the shared disk", true, nil,
			[]kvevents.Event{stored(a, 0, 3, ea, bs), disk(3, 6)}, map[string]int{"w0": 3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ix := mustNew(t, Config{LowerTiers: true, NoDisk: tc.noDisk})
			for _, w := range []string{"w0", "w1", "w2"} {
				if err := ix.AddWorker(w, bs); err != nil {
					t.Fatal(err)
				}
			}
			ix.SetShareGroup("w0", "host")
			ix.SetShareGroup("w1", "host")
			if _, err := ix.Apply("w1", tc.w1); err != nil {
				t.Fatal(err)
			}
			if _, err := ix.Apply("w0", tc.w0); err != nil {
				t.Fatal(err)
			}
			got := lookupMap(ix, blockhash.Blocks(a, bs))
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("lookup = %v, want %v", got, tc.want)
			}
			if err := ix.check(); err != nil {
				t.Fatal(err)
			}
			// Removing a member leaves the group to the others.
			ix.RemoveWorker("w1")
			if err := ix.check(); err != nil {
				t.Fatal(err)
			}
			if ix.SetShareGroup("w1", "host") {
				t.Fatal("SetShareGroup of a removed worker reported it")
			}
		})
	}
}

// TestShareGroupHost: a host-memory group applies a member's G2 events to
// every member, in a full index and in a NoDisk one (which prices host
// copies apart from disk reads); its disk events stay the publisher's
// unless the disk is shared too, under its own group.
func TestShareGroupHost(t *testing.T) {
	a := seqTokens(1, 6)
	ea := engineHash(1)
	in := func(medium string, from, to int) kvevents.Event {
		e := stored(a, from, to, ea, bs)
		e.Medium = medium
		return e
	}
	out := removed(ea(5))
	out.Medium = "CPU"
	tests := []struct {
		name    string
		noDisk  bool
		diskToo bool // w0 and w1 share their disk as well
		events  []kvevents.Event
		want    map[string]int
	}{
		{"whole prefix in the shared host pool", false, false,
			[]kvevents.Event{in("CPU", 0, 6)}, map[string]int{"w0": 6, "w1": 6}},
		{"NoDisk index takes the shared host pool", true, false,
			[]kvevents.Event{in("CPU", 0, 6)}, map[string]int{"w0": 6, "w1": 6}},
		{"removed from the pool: from every member", false, false,
			[]kvevents.Event{in("CPU", 0, 6), out}, map[string]int{"w0": 5, "w1": 5}},
		{"host shared, disk not: the disk part is the publisher's", false, false,
			[]kvevents.Event{in("CPU", 0, 3), in("STORAGE", 3, 6)}, map[string]int{"w0": 6, "w1": 3}},
		{"host and disk shared", false, true,
			[]kvevents.Event{in("CPU", 0, 3), in("STORAGE", 3, 6)}, map[string]int{"w0": 6, "w1": 6}},
		{"host and disk shared, NoDisk", true, true,
			[]kvevents.Event{in("CPU", 0, 3), in("STORAGE", 3, 6)}, map[string]int{"w0": 3, "w1": 3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ix := mustNew(t, Config{LowerTiers: true, NoDisk: tc.noDisk})
			for _, w := range []string{"w0", "w1", "w2"} {
				if err := ix.AddWorker(w, bs); err != nil {
					t.Fatal(err)
				}
			}
			for _, w := range []string{"w0", "w1"} {
				ix.SetShareGroupTier(w, kvcache.TierG2, "host")
				if tc.diskToo {
					ix.SetShareGroupTier(w, kvcache.TierG3, "host")
				}
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
			// Leaving the host group leaves the disk group as it was.
			ix.SetShareGroupTier("w1", kvcache.TierG2, "")
			if got := len(ix.shares[shareKey{kvcache.TierG2, "host"}]); got != 1 {
				t.Fatalf("host group has %d members after one left, want 1", got)
			}
			if tc.diskToo && len(ix.shares[shareKey{kvcache.TierG3, "host"}]) != 2 {
				t.Fatal("leaving the host group left the disk group")
			}
			ix.RemoveWorker("w0")
			if err := ix.check(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
