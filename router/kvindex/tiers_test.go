package kvindex

import (
	"fmt"
	"math/rand/v2"
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

// TestShareGroupLateJoin: a worker that joins a shared host pool after
// the others filled it is credited with the blocks already there, the
// members with what it published before it joined (engine blocks of one
// and of two index blocks), later events reach it like the others, and a
// worker that leaves the pool loses the pool's blocks and only them.
func TestShareGroupLateJoin(t *testing.T) {
	for _, k := range []int{1, 2} {
		t.Run(fmt.Sprint("index blocks per engine block ", k), func(t *testing.T) {
			ebs := k * bs
			a, b := seqTokens(1, 6*k), seqTokens(2, 4*k)
			ea, eb := engineHash(1), engineHash(2)
			cpu := func(tokens []int32, from, to int, eng func(int) uint64) kvevents.Event {
				e := stored(tokens, from, to, eng, ebs)
				e.Medium = "CPU"
				return e
			}
			ix := mustNew(t, Config{LowerTiers: true})
			for _, w := range []string{"w0", "w1", "w2"} {
				if err := ix.AddWorker(w, ebs); err != nil {
					t.Fatal(err)
				}
			}
			ix.SetShareGroupTier("w0", kvcache.TierG2, "host")
			ix.SetShareGroupTier("w1", kvcache.TierG2, "host")
			apply := func(w string, evs ...kvevents.Event) {
				t.Helper()
				if _, err := ix.Apply(w, evs); err != nil {
					t.Fatal(err)
				}
				if err := ix.check(); err != nil {
					t.Fatal(err)
				}
			}
			// w0 fills the pool with a (the first two blocks in its own
			// pool only); w2, not yet a member, offloads b and keeps a
			// block of a in its pool.
			apply("w0", stored(a, 0, 2, ea, ebs), cpu(a, 0, 6, ea))
			apply("w2", cpu(b, 0, 4, eb), stored(a, 0, 1, ea, ebs))
			expect := func(what string, tokens []int32, want map[string]int) {
				t.Helper()
				if got := lookupMap(ix, blockhash.Blocks(tokens, bs)); fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("%s: lookup = %v, want %v", what, got, want)
				}
			}
			expect("a before w2 joins", a, map[string]int{"w0": 6 * k, "w1": 6 * k, "w2": k})
			expect("b before w2 joins", b, map[string]int{"w2": 4 * k})
			ix.SetShareGroupTier("w2", kvcache.TierG2, "host")
			expect("a after w2 joins", a, map[string]int{"w0": 6 * k, "w1": 6 * k, "w2": 6 * k})
			expect("b after w2 joins", b, map[string]int{"w0": 4 * k, "w1": 4 * k, "w2": 4 * k})
			if err := ix.check(); err != nil {
				t.Fatal(err)
			}
			// A later removal from the pool reaches the late member too.
			out := removed(ea(5))
			out.Medium = "CPU"
			apply("w1", out)
			expect("a after its last block left the pool", a, map[string]int{"w0": 5 * k, "w1": 5 * k, "w2": 5 * k})
			// Leaving: w2 keeps its pool block of a, loses the pool's.
			ix.SetShareGroupTier("w2", kvcache.TierG2, "")
			expect("a after w2 left", a, map[string]int{"w0": 5 * k, "w1": 5 * k, "w2": k})
			expect("b after w2 left", b, map[string]int{"w0": 4 * k, "w1": 4 * k})
			if err := ix.check(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestLookupTiers: LookupTiers answers each worker's leading blocks in any
// tier, in its pool, and in its pool or host memory as a walk of every
// chain finds them, over random stores and removals of prefixes in every
// tier by several workers, with and without a host pool shared by two of
// them. (The separate pool-only and NoDisk indexes it replaces in the
// router answered less: they dropped a block stored while its parent was
// in a tier they leave out.)
func TestLookupTiers(t *testing.T) {
	media := []string{"GPU", "CPU", "STORAGE"}
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprint("shared=", shared), func(t *testing.T) {
			full := mustNew(t, Config{LowerTiers: true})
			ixs := []*Index{full}
			workers := []string{"w0", "w1", "w2", "w3"}
			for k, w := range workers {
				for _, ix := range ixs {
					if err := ix.AddWorker(w, bs); err != nil {
						t.Fatal(err)
					}
					ix.SetTag(w, int32(k))
					if shared && k < 2 {
						ix.SetShareGroupTier(w, kvcache.TierG2, "pool")
					}
				}
			}
			prefixes := [][]int32{seqTokens(1, 8), seqTokens(2, 8), append(seqTokens(1, 4)[:4*bs:4*bs], seqTokens(3, 4)...)}
			hashes := make([][]uint64, len(prefixes))
			for p, toks := range prefixes {
				hashes[p] = blockhash.Blocks(toks, bs)
			}
			// A worker's engine hash of block i of prefix p (prefix 2
			// shares prefix 0's first four blocks).
			eng := func(p int) func(int) uint64 {
				return func(i int) uint64 {
					if p == 2 && i < 4 {
						p = 0
					}
					return engineHash(p + 1)(i)
				}
			}
			rng := rand.New(rand.NewPCG(7, 11))
			for step := range 600 {
				w := workers[rng.IntN(len(workers))]
				p := rng.IntN(len(prefixes))
				medium := media[rng.IntN(len(media))]
				var ev kvevents.Event
				if rng.IntN(3) > 0 {
					from := rng.IntN(8)
					to := from + 1 + rng.IntN(8-from)
					ev = stored(prefixes[p], from, to, eng(p), bs)
				} else {
					ev = removed(eng(p)(rng.IntN(8)))
				}
				ev.Medium = medium
				for _, ix := range ixs {
					if _, err := ix.Apply(w, []kvevents.Event{ev}); err != nil {
						t.Fatal(err)
					}
				}
				for q := range prefixes {
					got := map[int32]TierOverlap{}
					for _, o := range full.LookupTiers(hashes[q], nil) {
						got[o.Tag] = o
					}
					want := map[int32]TierOverlap{}
					for k, mask := range []uint8{7, 1, 3} {
						for tag, n := range leading(full, hashes[q], mask) {
							w := want[tag]
							w.Tag = tag
							switch k {
							case 0:
								w.Blocks = n
							case 1:
								w.Pool = n
							case 2:
								w.Host = n
							}
							want[tag] = w
						}
					}
					for tag, w := range want {
						if w.Blocks == 0 {
							delete(want, tag)
						}
					}
					if fmt.Sprint(got) != fmt.Sprint(want) {
						t.Fatalf("step %d, prefix %d: LookupTiers %v, a walk of every chain %v", step, q, got, want)
					}
				}
			}
			if err := full.check(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// leading is Lookup the slow way: each worker's run of leading blocks with
// a residence in one of the tiers of mask on every chain, by tag.
func leading(ix *Index, hashes []uint64, mask uint8) map[int32]int32 {
	out := map[int32]int32{}
	alive := map[uint32]bool{}
	for d, h := range hashes {
		e, ok := ix.heads.get(h)
		on := map[uint32]bool{}
		for i := e.head; ok && i != nilNode; i = ix.nodes.at(i).sibling {
			if mask&(1<<*ix.nodes.tierAt(i)) != 0 {
				on[ix.nodes.at(i).worker] = true
			}
		}
		if d == 0 {
			alive = on
		}
		for w := range alive {
			if !on[w] {
				delete(alive, w)
				continue
			}
			out[ix.tags[w]] = int32(d + 1)
		}
	}
	return out
}
