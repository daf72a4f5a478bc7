package kvindex

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tandemllm/tandem/blockhash"
	"github.com/tandemllm/tandem/planes/kvevents"
)

const bs = 4

// seqTokens returns n blocks of distinct tokens for prefix p.
func seqTokens(p, n int) []int32 {
	t := make([]int32, n*bs)
	for i := range t {
		t[i] = int32(p*100000 + i)
	}
	return t
}

// stored builds a BlockStored for blocks [from, to) of tokens, with engine
// hashes eng(i) and the engine parent eng(from-1).
func stored(tokens []int32, from, to int, eng func(int) uint64, blockSize int) kvevents.Event {
	ev := kvevents.Event{Type: kvevents.TypeBlockStored, BlockSize: blockSize, Medium: "GPU",
		TokenIDs: tokens[from*blockSize : to*blockSize]}
	for i := from; i < to; i++ {
		ev.BlockHashes = append(ev.BlockHashes, kvevents.IntHash(eng(i)))
	}
	if from > 0 {
		ev.HasParent, ev.ParentBlockHash = true, kvevents.IntHash(eng(from-1))
	}
	return ev
}

// own gives the blocks of tokens Tandem's own hashes, as an engine
// publishing without token ids does (kvcache.XXH3Hasher, package blockhash).
func own(tokens []int32) func(int) uint64 {
	var h blockhash.Hasher
	hs := h.Append(nil, 0, false, tokens, bs)
	return func(i int) uint64 { return hs[i] }
}

func tokenless(ev kvevents.Event) kvevents.Event {
	ev.TokenIDs = nil
	return ev
}

func removed(hs ...uint64) kvevents.Event {
	ev := kvevents.Event{Type: kvevents.TypeBlockRemoved}
	for _, h := range hs {
		ev.BlockHashes = append(ev.BlockHashes, kvevents.IntHash(h))
	}
	return ev
}

// engineHash gives each (prefix, block) an arbitrary engine hash: the index
// must never care what the engine's hashes are.
func engineHash(p int) func(int) uint64 {
	return func(i int) uint64 { return uint64(p)<<32 | uint64(uint32(i)*2654435761) }
}

func mustNew(t testing.TB, cfg Config) *Index {
	t.Helper()
	if cfg.BlockSize == 0 {
		cfg.BlockSize = bs
	}
	ix, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

func lookupMap(ix *Index, hashes []uint64) map[string]int {
	m := map[string]int{}
	for _, o := range ix.Lookup(hashes, nil) {
		m[o.Worker] = o.Blocks
	}
	return m
}

func TestApplyAndLookup(t *testing.T) {
	a := seqTokens(1, 6)
	b := append(slices.Clone(a[:3*bs]), seqTokens(2, 3)...) // shares 3 blocks with a
	ea, eb := engineHash(1), engineHash(2)
	// b's engine hashes equal a's on the shared blocks, as a prefix cache's are.
	ebShared := func(i int) uint64 {
		if i < 3 {
			return ea(i)
		}
		return eb(i)
	}
	tests := []struct {
		name   string
		events map[string][]kvevents.Event
		query  []int32
		want   map[string]int
	}{
		{"empty index", nil, a, map[string]int{}},
		{"one worker, full prompt",
			map[string][]kvevents.Event{"w0": {stored(a, 0, 6, ea, bs)}}, a, map[string]int{"w0": 6}},
		{"stored in two events chained by parent",
			map[string][]kvevents.Event{"w0": {stored(a, 0, 2, ea, bs), stored(a, 2, 6, ea, bs)}}, a, map[string]int{"w0": 6}},
		{"prefix of the prompt",
			map[string][]kvevents.Event{"w0": {stored(a, 0, 4, ea, bs)}}, a, map[string]int{"w0": 4}},
		{"shared prefix, divergent tails",
			map[string][]kvevents.Event{"w0": {stored(a, 0, 6, ea, bs)}, "w1": {stored(b, 0, 6, ebShared, bs)}},
			b, map[string]int{"w0": 3, "w1": 6}},
		{"tail removed",
			map[string][]kvevents.Event{"w0": {stored(a, 0, 6, ea, bs), removed(ea(5), ea(4))}}, a, map[string]int{"w0": 4}},
		{"middle removed stops the run",
			map[string][]kvevents.Event{"w0": {stored(a, 0, 6, ea, bs), removed(ea(2))}}, a, map[string]int{"w0": 2}},
		{"cleared",
			map[string][]kvevents.Event{"w0": {stored(a, 0, 6, ea, bs), {Type: kvevents.TypeAllBlocksCleared}}}, a, map[string]int{}},
		{"unknown parent is dropped",
			map[string][]kvevents.Event{"w0": {stored(a, 2, 6, ea, bs)}}, a, map[string]int{}},
		{"other tiers ignored",
			map[string][]kvevents.Event{"w0": {func() kvevents.Event { e := stored(a, 0, 6, ea, bs); e.Medium = "CPU"; return e }()}}, a, map[string]int{}},
		{"token count mismatch rejected",
			map[string][]kvevents.Event{"w0": {func() kvevents.Event { e := stored(a, 0, 6, ea, bs); e.TokenIDs = e.TokenIDs[1:]; return e }()}}, a, map[string]int{}},
		{"engine block of 2 index blocks",
			map[string][]kvevents.Event{"w0": {stored(a, 0, 3, ea, 2*bs)}}, a, map[string]int{"w0": 6}},
		{"engine block of 2, removal drops both halves",
			map[string][]kvevents.Event{"w0": {stored(a, 0, 3, ea, 2*bs), removed(ea(2))}}, a, map[string]int{"w0": 4}},
		{"incompatible block size rejected",
			map[string][]kvevents.Event{"w0": {stored(a, 0, 4, ea, 6)}}, a, map[string]int{}},
		{"same count, different workers (w2 lost a middle block)",
			map[string][]kvevents.Event{
				"w0": {stored(a, 0, 5, ea, bs)},
				"w1": {stored(a, 0, 4, ea, bs)},
				"w2": {stored(a, 0, 5, ea, bs), removed(ea(3))},
			}, a, map[string]int{"w0": 5, "w1": 4, "w2": 3}},
		{"without token ids, under Tandem's own hashes",
			map[string][]kvevents.Event{"w0": {tokenless(stored(a, 0, 6, own(a), bs))}}, a, map[string]int{"w0": 6}},
		{"without token ids, chained by parent",
			map[string][]kvevents.Event{"w0": {tokenless(stored(a, 0, 2, own(a), bs)), tokenless(stored(a, 2, 6, own(a), bs))}}, a, map[string]int{"w0": 6}},
		{"without token ids, removal by hash",
			map[string][]kvevents.Event{"w0": {tokenless(stored(a, 0, 6, own(a), bs)), removed(own(a)(4))}}, a, map[string]int{"w0": 4}},
		{"without token ids, a larger engine block cannot be split",
			map[string][]kvevents.Event{"w0": {tokenless(stored(a, 0, 3, own(a), 2*bs))}}, a, map[string]int{}},
		{"re-announced block is idempotent",
			map[string][]kvevents.Event{"w0": {stored(a, 0, 6, ea, bs), stored(a, 0, 6, ea, bs), removed(ea(5))}}, a, map[string]int{"w0": 5}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ix := mustNew(t, Config{})
			for _, w := range []string{"w0", "w1", "w2"} {
				if err := ix.AddWorker(w, bs); err != nil {
					t.Fatal(err)
				}
			}
			for w, evs := range tc.events {
				if _, err := ix.Apply(w, evs); err != nil {
					t.Fatal(err)
				}
			}
			got := lookupMap(ix, blockhash.Blocks(tc.query, bs))
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("lookup = %v, want %v", got, tc.want)
			}
			if err := ix.check(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestApplyStatsAndErrors(t *testing.T) {
	ix := mustNew(t, Config{})
	if _, err := ix.Apply("nobody", nil); !errors.Is(err, ErrUnknownWorker) {
		t.Fatalf("unknown worker: %v", err)
	}
	if err := ix.AddWorker("w", 6); !errors.Is(err, ErrBlockSize) {
		t.Fatalf("block size 6 on index of 4: %v", err)
	}
	if err := ix.AddWorker("w", 0); err != nil {
		t.Fatal(err)
	}
	a := seqTokens(1, 4)
	e := engineHash(1)
	st, err := ix.Apply("w", []kvevents.Event{
		stored(a, 0, 4, e, bs),
		removed(e(3), 12345),
		stored(a, 2, 4, engineHash(9), bs), // parent unknown
		{Type: kvevents.TypeUnknown},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := ApplyStats{StoredEvents: 1, Stored: 4, Removed: 1, BlockMissing: 1, ParentMissing: 1, Unknown: 1}
	if st != want {
		t.Fatalf("stats = %+v, want %+v", st, want)
	}
	if got := ix.WorkerBlocks("w"); got != 3 {
		t.Fatalf("worker blocks = %d", got)
	}
}

func TestPruneKeepsRecentlyUsed(t *testing.T) {
	reg := prometheus.NewRegistry()
	now := time.Unix(1000, 0)
	ix := mustNew(t, Config{MaxBlocks: 40, PruneTarget: 0.5, Registerer: reg, Now: func() time.Time { return now }})
	if err := ix.AddWorker("w", bs); err != nil {
		t.Fatal(err)
	}
	// Ten prompts of 4 blocks fill the index exactly.
	for p := range 10 {
		now = now.Add(time.Second)
		if _, err := ix.Apply("w", []kvevents.Event{stored(seqTokens(p, 4), 0, 4, engineHash(p), bs)}); err != nil {
			t.Fatal(err)
		}
	}
	now = now.Add(time.Second)
	hot := blockhash.Blocks(seqTokens(0, 4), bs) // the oldest, but used
	if got := lookupMap(ix, hot)["w"]; got != 4 {
		t.Fatalf("before prune: %d", got)
	}
	if _, err := ix.Apply("w", []kvevents.Event{stored(seqTokens(10, 1), 0, 1, engineHash(10), bs)}); err != nil {
		t.Fatal(err)
	}
	if n := ix.Len(); n != 20 {
		t.Fatalf("after prune: %d blocks, want 20", n)
	}
	if got := lookupMap(ix, hot)["w"]; got != 4 {
		t.Fatalf("recently used prompt pruned: %d blocks left", got)
	}
	if got := lookupMap(ix, blockhash.Blocks(seqTokens(1, 4), bs))["w"]; got != 0 {
		t.Fatalf("least recently used prompt kept: %d", got)
	}
	if got := testutil.ToFloat64(ix.collectorFor(reg, "tandem_kvindex_pruned_blocks_total")); got != 21 {
		t.Fatalf("pruned metric = %v, want 21", got)
	}
	// A removal of a pruned block is harmless.
	if _, err := ix.Apply("w", []kvevents.Event{removed(engineHash(1)(0))}); err != nil {
		t.Fatal(err)
	}
	if err := ix.check(); err != nil {
		t.Fatal(err)
	}
}

// A prompt held by every worker is looked up through its chain heads only;
// pruning must still treat all its residences as recently used.
func TestPruneSparesSharedPrefix(t *testing.T) {
	now := time.Unix(1000, 0)
	const nw = 2 * bigChain
	// 64 shared residences + 9 old + 1 new = 74 > 73: prune to 65, which
	// exactly the 9 old ones (the least recently used) make up.
	ix := mustNew(t, Config{MaxBlocks: 73, PruneTarget: 0.9, Now: func() time.Time { return now }})
	shared := seqTokens(1, 4)
	for w := range nw {
		id := fmt.Sprint("w", w)
		if err := ix.AddWorker(id, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := ix.Apply(id, []kvevents.Event{stored(shared, 0, 4, engineHash(w), bs)}); err != nil {
			t.Fatal(err)
		}
	}
	now = now.Add(time.Second)
	if _, err := ix.Apply("w0", []kvevents.Event{stored(seqTokens(2, 9), 0, 9, engineHash(100), bs)}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Minute)
	if got := len(lookupMap(ix, blockhash.Blocks(shared, bs))); got != nw {
		t.Fatalf("%d holders before pruning", got)
	}
	now = now.Add(time.Second)
	// Overflow: the old unrelated prompt goes, the shared one stays whole.
	if _, err := ix.Apply("w1", []kvevents.Event{stored(seqTokens(3, 1), 0, 1, engineHash(101), bs)}); err != nil {
		t.Fatal(err)
	}
	got := lookupMap(ix, blockhash.Blocks(shared, bs))
	for w := range nw {
		if got[fmt.Sprint("w", w)] != 4 {
			t.Fatalf("shared prompt pruned: %v", got)
		}
	}
	if n := lookupMap(ix, blockhash.Blocks(seqTokens(2, 9), bs))["w0"]; n != 0 {
		t.Fatalf("old prompt kept %d blocks", n)
	}
	if err := ix.check(); err != nil {
		t.Fatal(err)
	}
}

func TestTTLExpiry(t *testing.T) {
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	ix := mustNew(t, Config{Name: "approx", TTL: 10 * time.Second, Now: clock})
	if err := ix.AddWorker("w0", 0); err != nil {
		t.Fatal(err)
	}
	if err := ix.AddWorker("w1", 0); err != nil {
		t.Fatal(err)
	}
	a := blockhash.Blocks(seqTokens(1, 5), bs)
	if err := ix.Store("w0", a); err != nil {
		t.Fatal(err)
	}
	now = now.Add(6 * time.Second)
	if err := ix.Store("w1", a[:2]); err != nil {
		t.Fatal(err)
	}
	if err := ix.Store("w0", a[:1]); err != nil { // refreshes block 0 only
		t.Fatal(err)
	}
	now = now.Add(5 * time.Second) // w0's first store is 11 s old
	if n := ix.Expire(); n != 4 {
		t.Fatalf("expired %d, want 4", n)
	}
	if got := lookupMap(ix, a); fmt.Sprint(got) != fmt.Sprint(map[string]int{"w0": 1, "w1": 2}) {
		t.Fatalf("after expiry: %v", got)
	}
	now = now.Add(10 * time.Second)
	ix.Expire()
	if ix.Len() != 0 {
		t.Fatalf("%d left", ix.Len())
	}
	if err := ix.check(); err != nil {
		t.Fatal(err)
	}
}

func TestRemoveWorkerReusesSlot(t *testing.T) {
	ix := mustNew(t, Config{})
	a := seqTokens(1, 3)
	for _, w := range []string{"a", "b"} {
		if err := ix.AddWorker(w, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := ix.Apply(w, []kvevents.Event{stored(a, 0, 3, engineHash(1), bs)}); err != nil {
			t.Fatal(err)
		}
	}
	ix.RemoveWorker("a")
	if err := ix.AddWorker("c", 0); err != nil {
		t.Fatal(err)
	}
	if got := lookupMap(ix, blockhash.Blocks(a, bs)); fmt.Sprint(got) != "map[b:3]" {
		t.Fatalf("lookup = %v", got)
	}
	if ix.HasWorker("a") || !ix.HasWorker("c") {
		t.Fatal("worker set wrong")
	}
	if err := ix.check(); err != nil {
		t.Fatal(err)
	}
}

// TestAgainstModel drives the index and a naive model (a set of hashes per
// worker) with random traffic, including pruning-free removals, clears and
// multi-block engine blocks, and compares every lookup.
func TestAgainstModel(t *testing.T) {
	for _, tc := range []struct{ engineBS, nw int }{{bs, 5}, {2 * bs, 5}, {bs, 3 * bigChain}} {
		engineBS, nw := tc.engineBS, tc.nw
		t.Run(fmt.Sprintf("engine block %d, %d workers", engineBS, nw), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(engineBS*nw)))
			ix := mustNew(t, Config{})
			const np, nb = 12, 8 // prompts, engine blocks per prompt
			k := engineBS / bs
			type held map[uint64]bool // engine hashes held
			model := make([]held, nw)
			prompts := make([][]int32, np)
			for p := range prompts {
				// Prompts share prefixes: p and p+np/2 agree on the first 3 engine blocks.
				prompts[p] = seqTokens(p%(np/2), nb*k)
				if p >= np/2 {
					copy(prompts[p][3*engineBS:], seqTokens(p, nb*k)[3*engineBS:])
				}
			}
			eng := func(p, i int) uint64 { // content-derived, like a prefix cache's
				if i < 3 {
					p %= np / 2
				}
				return uint64(p)<<16 | uint64(i)
			}
			for w := range nw {
				model[w] = held{}
				if err := ix.AddWorker(fmt.Sprint("w", w), engineBS); err != nil {
					t.Fatal(err)
				}
				if w%2 == 0 { // LookupTags leaves the untagged out
					ix.SetTag(fmt.Sprint("w", w), int32(100+w))
				}
			}
			for step := range 300 * nw {
				w := rng.IntN(nw)
				id := fmt.Sprint("w", w)
				p := rng.IntN(np)
				var ev kvevents.Event
				switch r := rng.IntN(10); {
				case r < 5: // store a run continuing from what the worker holds
					from := 0
					for from < nb && model[w][eng(p, from)] {
						from++
					}
					if from == nb {
						continue
					}
					to := from + 1 + rng.IntN(nb-from)
					ev = stored(prompts[p], from, to, func(i int) uint64 { return eng(p, i) }, engineBS)
					for i := from; i < to; i++ {
						model[w][eng(p, i)] = true
					}
				case r < 9: // evict one block
					i := rng.IntN(nb)
					ev = removed(eng(p, i))
					delete(model[w], eng(p, i))
				default:
					ev = kvevents.Event{Type: kvevents.TypeAllBlocksCleared}
					model[w] = held{}
				}
				if _, err := ix.Apply(id, []kvevents.Event{ev}); err != nil {
					t.Fatal(err)
				}
				if step%50 == 0 {
					if err := ix.check(); err != nil {
						t.Fatalf("step %d: %v", step, err)
					}
				}
				q := rng.IntN(np)
				want := map[string]int{}
				for mw := range nw {
					n := 0
					for n < nb && model[mw][eng(q, n)] {
						n++
					}
					if n > 0 {
						want[fmt.Sprint("w", mw)] = n * k
					}
				}
				got := lookupMap(ix, blockhash.Blocks(prompts[q], bs))
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("step %d: lookup = %v, want %v", step, got, want)
				}
				wantTags, gotTags := map[int32]int32{}, map[int32]int32{}
				for mw := 0; mw < nw; mw += 2 {
					if n := want[fmt.Sprint("w", mw)]; n > 0 {
						wantTags[int32(100+mw)] = int32(n)
					}
				}
				for _, o := range ix.LookupTags(blockhash.Blocks(prompts[q], bs), nil) {
					gotTags[o.Tag] = o.Blocks
				}
				if fmt.Sprint(gotTags) != fmt.Sprint(wantTags) {
					t.Fatalf("step %d: LookupTags = %v, want %v", step, gotTags, wantTags)
				}
			}
		})
	}
}

func TestConcurrentLookupsAndEvents(t *testing.T) {
	ix := mustNew(t, Config{MaxBlocks: 500})
	const nw = 4
	for w := range nw {
		if err := ix.AddWorker(fmt.Sprint("w", w), 0); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for w := range nw {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range 300 {
				toks := seqTokens(p, 8)
				evs := []kvevents.Event{stored(toks, 0, 8, engineHash(p), bs)}
				if p%3 == 0 {
					evs = append(evs, removed(engineHash(p)(7)))
				}
				if _, err := ix.Apply(fmt.Sprint("w", w), evs); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var dst []Overlap
			for p := range 2000 {
				dst = ix.Lookup(blockhash.Blocks(seqTokens(p%300, 8), bs), dst[:0])
				for _, o := range dst {
					if o.Blocks < 1 || o.Blocks > 8 {
						t.Errorf("overlap %+v", o)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if ix.Len() > 500 {
		t.Fatalf("bound exceeded: %d", ix.Len())
	}
	if err := ix.check(); err != nil {
		t.Fatal(err)
	}
}

// check verifies the index's internal invariants.
func (ix *Index) check() error {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	live := 0
	for i := range ix.nodes.used {
		n := ix.nodes.at(uint32(i))
		if n.worker == freeWorker {
			continue
		}
		live++
		if int(n.worker) >= len(ix.workers) || ix.workers[n.worker] == nil {
			return fmt.Errorf("node %d has worker %d", i, n.worker)
		}
	}
	if live != ix.nodes.live {
		return fmt.Errorf("slab has %d live nodes, count says %d", live, ix.nodes.live)
	}
	// Sibling chains partition the live nodes by hash.
	inChain := 0
	var err error
	ix.heads.each(func(h uint64, e hashEntry) {
		var n, fp uint16
		lower := false
		for i := e.head; i != nilNode; i = ix.nodes.at(i).sibling {
			nd := ix.nodes.at(i)
			if nd.hash != h && err == nil {
				err = fmt.Errorf("node %d in chain of %x has hash %x", i, h, nd.hash)
			}
			inChain++
			n++
			fp = (fp + ix.workers[nd.worker].fp) & fpMask
			if *ix.nodes.tierAt(i) != 0 {
				lower = true
			}
		}
		if lower {
			fp |= fpLower
		}
		if (n != e.n || fp != e.fp) && err == nil {
			err = fmt.Errorf("entry %x: n=%d fp=%#x, chain has n=%d fp=%#x", h, e.n, e.fp, n, fp)
		}
		g, big := ix.big.get(h)
		if big != (n >= bigChain) && err == nil {
			err = fmt.Errorf("entry %x with %d residences: worker array %v", h, n, big)
		}
		if big && err == nil {
			var chain, arr []uint32
			for i := e.head; i != nilNode; i = ix.nodes.at(i).sibling {
				chain = append(chain, ix.nodes.at(i).worker)
			}
			arr = append(arr, ix.groups[g]...)
			slices.Sort(chain)
			slices.Sort(arr)
			if !slices.Equal(chain, arr) {
				err = fmt.Errorf("entry %x: chain workers %v, array %v", h, chain, arr)
			}
		}
	})
	if err != nil {
		return err
	}
	if inChain != ix.nodes.live {
		return fmt.Errorf("chains hold %d nodes, live %d", inChain, ix.nodes.live)
	}
	total := 0
	for _, w := range ix.workers {
		if w == nil {
			continue
		}
		total += w.blocks
		w.engine.each(func(eh uint64, i uint32) {
			n := ix.nodes.at(i)
			if (n.worker != w.slot || n.engine != eh) && err == nil {
				err = fmt.Errorf("worker %s engine %x -> node %d of worker %d engine %x", w.id, eh, i, n.worker, n.engine)
			}
		})
	}
	if err != nil {
		return err
	}
	if total != ix.nodes.live {
		return fmt.Errorf("workers hold %d, live %d", total, ix.nodes.live)
	}
	return nil
}

// collectorFor finds one metric of the index's collector by name.
func (ix *Index) collectorFor(reg *prometheus.Registry, name string) prometheus.Collector {
	return metricByName{reg, name}
}

type metricByName struct {
	reg  *prometheus.Registry
	name string
}

func (m metricByName) Describe(chan<- *prometheus.Desc) {}
func (m metricByName) Collect(ch chan<- prometheus.Metric) {
	mfs, _ := m.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != m.name {
			continue
		}
		for _, x := range mf.Metric {
			v := x.GetCounter().GetValue() + x.GetGauge().GetValue()
			ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(m.name, "h", nil, nil), prometheus.UntypedValue, v)
		}
	}
}

// TestParentZeroIsNone: a publisher that writes parent_block_hash 0 for
// "no parent" (array-form vLLM look-alikes) has its chains placed at the
// root, and its BlockRemoved find what was stored; a known block whose
// engine hash is 0 stays a real parent.
func TestParentZeroIsNone(t *testing.T) {
	ix := mustNew(t, Config{})
	if err := ix.AddWorker("w", 0); err != nil {
		t.Fatal(err)
	}
	a := seqTokens(1, 2)
	ev := stored(a, 0, 2, engineHash(1), bs)
	ev.HasParent, ev.ParentBlockHash = true, kvevents.IntHash(0)
	st, err := ix.Apply("w", []kvevents.Event{ev})
	if err != nil || st.StoredEvents != 1 || st.ParentMissing != 0 {
		t.Fatalf("stats %+v err %v", st, err)
	}
	var h blockhash.Hasher
	if got := lookupMap(ix, h.Append(nil, 0, false, a, bs)); got["w"] != 2 {
		t.Fatalf("lookup %v, want 2 blocks", got)
	}
	if st, _ := ix.Apply("w", []kvevents.Event{removed(engineHash(1)(1))}); st.Removed != 1 {
		t.Fatalf("remove %+v", st)
	}
	// A real block with engine hash 0 is a parent like any other.
	b := seqTokens(2, 2)
	zero := func(i int) uint64 { return uint64(i) }
	if st, _ := ix.Apply("w", []kvevents.Event{stored(b, 0, 1, zero, bs), stored(b, 1, 2, zero, bs)}); st.StoredEvents != 2 {
		t.Fatalf("chain on hash 0: %+v", st)
	}
	if got := lookupMap(ix, h.Append(nil, 0, false, b, bs)); got["w"] != 2 {
		t.Fatalf("chain on hash 0: lookup %v", got)
	}
}

// TestLookupNoSumCollision: Lookup skips a chain whose workers' count and
// fingerprint sum are the previous chain's. Slot pairs with equal sums
// must not read as the same workers: block 1 held by slots a and b, block
// 2 by c and d (their block 1 removed since).
func TestLookupNoSumCollision(t *testing.T) {
	for _, tc := range [][4]int{{0, 3, 1, 2}, {0, 4, 1, 3}, {0, 5, 2, 3}, {1, 7, 3, 5}} {
		t.Run(fmt.Sprint(tc), func(t *testing.T) {
			ix := mustNew(t, Config{})
			a := seqTokens(1, 3)
			ea := engineHash(1)
			for w := range 8 {
				if err := ix.AddWorker(fmt.Sprint("w", w), bs); err != nil {
					t.Fatal(err)
				}
			}
			want := map[string]int{}
			for k, w := range tc {
				id := fmt.Sprint("w", w)
				evs := []kvevents.Event{stored(a, 0, 2, ea, bs)}
				want[id] = 2
				if k >= 2 {
					evs = append(evs, stored(a, 2, 3, ea, bs), removed(ea(1)))
					want[id] = 1
				}
				if _, err := ix.Apply(id, evs); err != nil {
					t.Fatal(err)
				}
			}
			got := lookupMap(ix, blockhash.Blocks(a, bs))
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("lookup = %v, want %v", got, want)
			}
			if err := ix.check(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
