package kvcache

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tandemllm/tandem/tokenid"
)

// recSink records events as compact strings-free structs for assertions.
type recSink struct {
	stored  [][]uint64 // hashes per BlocksStored call
	parents []uint64
	tokens  [][]tokenid.ID
	removed []uint64
	cleared int
}

func (r *recSink) BlocksStored(parent BlockHash, blocks []BlockHash, tokens []tokenid.ID) {
	hs := make([]uint64, len(blocks))
	for i, h := range blocks {
		hs[i] = h.Uint64()
	}
	r.stored = append(r.stored, hs)
	r.parents = append(r.parents, parent.Uint64())
	r.tokens = append(r.tokens, slices.Clone(tokens))
}

func (r *recSink) BlocksRemoved(blocks []BlockHash) {
	for _, h := range blocks {
		r.removed = append(r.removed, h.Uint64())
	}
}

func (r *recSink) AllBlocksCleared() { r.cleared++ }

func seqTokens(start, n int) []tokenid.ID {
	t := make([]tokenid.ID, n)
	for i := range t {
		t[i] = tokenid.ID(start + i)
	}
	return t
}

func mustNew(t *testing.T, blocks, bs int, sink EventSink) *Cache {
	t.Helper()
	c, err := New(Config{NumBlocks: blocks, BlockSize: bs, Sink: sink})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// run admits tokens into a fresh Seq the way a scheduler does: match, then
// allocate and commit everything.
func run(t *testing.T, c *Cache, tokens []tokenid.ID) (*Seq, int) {
	t.Helper()
	s := &Seq{}
	hit := c.Acquire(s, tokens[:len(tokens)-1])
	if err := c.Allocate(s, len(tokens)); err != nil {
		t.Fatalf("allocate: %v", err)
	}
	c.Commit(s, tokens)
	return s, hit
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"zero blocks", Config{BlockSize: 16}},
		{"zero block size", Config{NumBlocks: 4}},
		{"negative", Config{NumBlocks: -1, BlockSize: 16}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.cfg); err == nil {
				t.Fatal("want error")
			}
		})
	}
}

func TestPrefixHit(t *testing.T) {
	for _, tc := range []struct {
		name    string
		first   []tokenid.ID
		second  []tokenid.ID
		wantHit int
	}{
		{"identical prompt recomputes last token", seqTokens(0, 64), seqTokens(0, 64), 48},
		{"identical prompt with partial tail", seqTokens(0, 70), seqTokens(0, 70), 64},
		{"shared prefix", seqTokens(0, 64), append(seqTokens(0, 40), seqTokens(1000, 30)...), 32},
		{"disjoint", seqTokens(0, 64), seqTokens(1000, 64), 0},
		{"shorter than a block", seqTokens(0, 64), seqTokens(0, 10), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := mustNew(t, 32, 16, nil)
			s1, _ := run(t, c, tc.first)
			c.Free(s1)
			s2, hit := run(t, c, tc.second)
			if hit != tc.wantHit {
				t.Fatalf("hit %d, want %d", hit, tc.wantHit)
			}
			if got := c.Match(tc.second); got < tc.wantHit {
				t.Fatalf("Match %d < hit %d", got, tc.wantHit)
			}
			if err := c.Validate(s2); err != nil {
				t.Fatal(err)
			}
			c.Free(s2)
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			if st := c.Stats(); st.Used != 0 {
				t.Fatalf("used %d after free", st.Used)
			}
		})
	}
}

func TestEventsAndDedupe(t *testing.T) {
	sink := &recSink{}
	c := mustNew(t, 16, 4, sink)
	toks := seqTokens(1, 8)

	// Two sequences compute the same prefix concurrently: the second
	// commit must dedupe and not publish a second BlockStored.
	a, b := &Seq{}, &Seq{}
	for _, s := range []*Seq{a, b} {
		if err := c.Allocate(s, 8); err != nil {
			t.Fatal(err)
		}
	}
	c.Commit(a, toks)
	bBefore := slices.Clone(b.Blocks())
	c.Commit(b, toks)
	if len(sink.stored) != 1 || len(sink.stored[0]) != 2 {
		t.Fatalf("stored events %v, want one event with two blocks", sink.stored)
	}
	if sink.parents[0] != 0 || !slices.Equal(sink.tokens[0], toks) {
		t.Fatalf("stored parent %x tokens %v", sink.parents[0], sink.tokens[0])
	}
	if !slices.Equal(a.Blocks(), b.Blocks()) || slices.Equal(b.Blocks(), bBefore) {
		t.Fatalf("dedupe: a %v b %v (b was %v)", a.Blocks(), b.Blocks(), bBefore)
	}
	if err := c.Validate(a, b); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.Used != 2 || st.Free != 14 {
		t.Fatalf("stats %+v", st)
	}

	// Continuation block carries its parent.
	if err := c.Allocate(a, 12); err != nil {
		t.Fatal(err)
	}
	c.Commit(a, seqTokens(1, 12))
	if len(sink.stored) != 2 || sink.parents[1] != sink.stored[0][1] {
		t.Fatalf("continuation: %v parents %v", sink.stored, sink.parents)
	}
	c.Free(a)
	c.Free(b)
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.Cached != 3 || st.Used != 0 {
		t.Fatalf("stats after free %+v", st)
	}
	if err := c.Reset(); err != nil {
		t.Fatal(err)
	}
	if sink.cleared != 1 || c.Stats().Cached != 0 || c.Match(toks) != 0 {
		t.Fatalf("reset: cleared %d stats %+v", sink.cleared, c.Stats())
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestResetRefusedWhileInUse(t *testing.T) {
	c := mustNew(t, 4, 4, nil)
	s, _ := run(t, c, seqTokens(0, 8))
	if err := c.Reset(); !errors.Is(err, ErrInUse) {
		t.Fatalf("Reset = %v, want ErrInUse", err)
	}
	c.Free(s)
}

func TestEvictionOrder(t *testing.T) {
	sink := &recSink{}
	c := mustNew(t, 6, 4, sink)
	// Three 2-block sequences fill the pool; they finish in order a, b, c.
	var hashes [][]uint64
	var seqs []*Seq
	for i := range 3 {
		s, _ := run(t, c, seqTokens(100*i, 8))
		seqs = append(seqs, s)
		hashes = append(hashes, sink.stored[i])
	}
	for _, s := range seqs {
		c.Free(s)
	}
	// Within a sequence the tail block goes first; across sequences the
	// least recently freed goes first.
	want := []uint64{hashes[0][1], hashes[0][0], hashes[1][1], hashes[1][0], hashes[2][1], hashes[2][0]}
	var got []uint64
	for _, b := range c.EvictionOrder() {
		info, _ := c.Block(b)
		got = append(got, info.Hash.Uint64())
	}
	if !slices.Equal(got, want) {
		t.Fatalf("eviction order %v, want %v", got, want)
	}

	// Touching b's prefix moves it to the most-recently-used end.
	s, hit := run(t, c, seqTokens(100, 9))
	if hit != 8 {
		t.Fatalf("hit %d", hit)
	}
	// The new partial block needs one block: evicts a's tail first.
	if !slices.Equal(sink.removed, []uint64{hashes[0][1]}) {
		t.Fatalf("removed %v, want a's tail %x", sink.removed, hashes[0][1])
	}
	c.Free(s)

	// Allocating everything evicts the rest, never an in-use block.
	hold := &Seq{}
	if err := c.Allocate(hold, 24); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(hold); err != nil {
		t.Fatal(err)
	}
	if err := c.Allocate(&Seq{}, 1); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("over-allocation = %v, want ErrNoSpace", err)
	}
	c.Free(hold)
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestAllocateAllOrNothing(t *testing.T) {
	c := mustNew(t, 4, 4, nil)
	a := &Seq{}
	if err := c.Allocate(a, 12); err != nil {
		t.Fatal(err)
	}
	b := &Seq{}
	if err := c.Allocate(b, 8); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("want ErrNoSpace, got %v", err)
	}
	if len(b.Blocks()) != 0 || c.Stats().Used != 3 {
		t.Fatalf("failed allocation changed state: %v %+v", b.Blocks(), c.Stats())
	}
	if err := c.Validate(a, b); err != nil {
		t.Fatal(err)
	}
}

func TestImport(t *testing.T) {
	c := mustNew(t, 16, 4, nil)
	pre, _ := run(t, c, seqTokens(0, 8))
	c.Free(pre)
	s := &Seq{}
	fill, err := c.Import(s, seqTokens(0, 18))
	if err != nil {
		t.Fatal(err)
	}
	// Blocks 0-1 were cached, 2-3 are fresh, the partial tail is skipped.
	if !slices.Equal(fill, []int{2, 3}) || len(s.Blocks()) != 4 || s.NumCommitted() != 4 {
		t.Fatalf("fill %v blocks %v committed %d", fill, s.Blocks(), s.NumCommitted())
	}
	info, _ := c.Block(s.Blocks()[3])
	if !info.Hashed || !slices.Equal(info.Tokens, seqTokens(12, 4)) {
		t.Fatalf("block info %+v", info)
	}
	if got := c.Match(seqTokens(0, 18)); got != 16 {
		t.Fatalf("Match after import %d", got)
	}
	if err := c.Validate(s); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Import(&Seq{}, seqTokens(500, 100)); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("oversized import = %v", err)
	}
}

func TestDisablePrefixCaching(t *testing.T) {
	sink := &recSink{}
	c, err := New(Config{NumBlocks: 8, BlockSize: 4, Sink: sink, DisablePrefixCaching: true})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := run(t, c, seqTokens(0, 8))
	c.Free(s)
	_, hit := run(t, c, seqTokens(0, 8))
	if hit != 0 || len(sink.stored) != 0 || c.Stats().Cached != 0 {
		t.Fatalf("hit %d stored %v stats %+v", hit, sink.stored, c.Stats())
	}
}

func TestIdleCacheIsSmall(t *testing.T) {
	c := mustNew(t, 1<<20, 16, nil)
	if len(c.meta) != 0 || cap(c.tokens) != 0 || c.index != nil {
		t.Fatal("idle cache allocated per-block state")
	}
	if c.Stats().Free != 1<<20 {
		t.Fatalf("free %d", c.Stats().Free)
	}
}

// TestRandomizedInvariants drives the cache like a scheduler under memory
// pressure (random prompts over a small set of prefixes, chunked growth,
// preemption on ErrNoSpace) and checks the invariants after every step.
func TestRandomizedInvariants(t *testing.T) {
	const bs = 4
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		sink := &recSink{}
		c := mustNew(t, 24, bs, sink)
		type live struct {
			s      *Seq
			tokens []tokenid.ID
			done   int // tokens computed
		}
		var running []*live
		stored := map[uint64]int{}
		for step := range 400 {
			switch op := rng.IntN(10); {
			case op < 4 && len(running) < 6:
				prefix := rng.IntN(3)
				n := 1 + rng.IntN(30)
				toks := seqTokens(prefix*1000, n)
				toks = append(toks, seqTokens(5000+rng.IntN(50), rng.IntN(6))...)
				l := &live{s: &Seq{}, tokens: toks}
				l.done = c.Acquire(l.s, toks[:len(toks)-1])
				running = append(running, l)
			case op < 8 && len(running) > 0:
				l := running[rng.IntN(len(running))]
				chunk := 1 + rng.IntN(9)
				if l.done+chunk > len(l.tokens) {
					l.tokens = append(l.tokens, tokenid.ID(9000+step))
				}
				target := min(l.done+chunk, len(l.tokens))
				if err := c.Allocate(l.s, target); err != nil {
					if !errors.Is(err, ErrNoSpace) {
						t.Fatal(err)
					}
					// Preempt the newest other sequence (or this one).
					victim := running[len(running)-1]
					c.Free(victim.s)
					victim.done = 0
					running = running[:len(running)-1]
					continue
				}
				l.done = target
				c.Commit(l.s, l.tokens[:l.done])
			case len(running) > 0:
				i := rng.IntN(len(running))
				c.Free(running[i].s)
				running = slices.Delete(running, i, i+1)
			}
			seqs := make([]*Seq, len(running))
			for i, l := range running {
				seqs[i] = l.s
			}
			if err := c.Validate(seqs...); err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
		}
		for _, l := range running {
			c.Free(l.s)
		}
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
		st := c.Stats()
		if st.Used != 0 || st.Cached+st.Free != st.NumBlocks {
			t.Fatalf("seed %d: leaked blocks: %+v", seed, st)
		}
		// Every removed hash was stored before, and the cached set equals
		// stored minus removed.
		for _, hs := range sink.stored {
			for _, h := range hs {
				stored[h]++
			}
		}
		for _, h := range sink.removed {
			if stored[h] == 0 {
				t.Fatalf("seed %d: removed %x never stored", seed, h)
			}
			stored[h]--
		}
		nCached := 0
		for _, n := range stored {
			if n > 1 {
				t.Fatal("hash stored twice without removal")
			}
			nCached += n
		}
		if nCached != st.Cached {
			t.Fatalf("seed %d: events say %d cached, cache has %d", seed, nCached, st.Cached)
		}
	}
}

func TestXXH3HasherChains(t *testing.T) {
	h := &XXH3Hasher{}
	a := h.Hash(BlockHash{}, []tokenid.ID{1, 2, 3, 4})
	b := h.Hash(a, []tokenid.ID{5, 6, 7, 8})
	if a == b || a.IsZero() {
		t.Fatal("degenerate hashes")
	}
	if h.Hash(BlockHash{}, []tokenid.ID{1, 2, 3, 4}) != a {
		t.Fatal("not deterministic")
	}
	if h.Hash(BlockHash{}, []tokenid.ID{5, 6, 7, 8}) == b {
		t.Fatal("parent ignored")
	}
	// Dynamo's documented local hash of the one-token block [1].
	if got := h.Hash(BlockHash{}, []tokenid.ID{1}).Uint64(); got != 14426539925402682893 {
		t.Fatalf("xxh3([1]) = %d", got)
	}
}

func BenchmarkAdmitCommitFree(b *testing.B) {
	c, _ := New(Config{NumBlocks: 4096, BlockSize: 16})
	prompt := seqTokens(0, 1024)
	s := &Seq{}
	b.ReportAllocs()
	for b.Loop() {
		s.Reset()
		n := c.Acquire(s, prompt[:len(prompt)-1])
		_ = c.Allocate(s, len(prompt))
		c.Commit(s, prompt)
		c.Free(s)
		_ = n
	}
}
