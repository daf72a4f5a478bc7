package kvcache

import (
	"fmt"
	"slices"
	"testing"

	"github.com/tandemllm/tandem/tokenid"
)

// tierSink records every event as a line "op medium hash".
type tierSink struct{ log []string }

func (r *tierSink) BlocksStored(_ BlockHash, blocks []BlockHash, _ []tokenid.ID) {
	for _, h := range blocks {
		r.log = append(r.log, fmt.Sprintf("stored GPU %x", h.Uint64()))
	}
}

func (r *tierSink) BlocksRemoved(blocks []BlockHash) {
	for _, h := range blocks {
		r.log = append(r.log, fmt.Sprintf("removed GPU %x", h.Uint64()))
	}
}

func (r *tierSink) AllBlocksCleared() {}

func (r *tierSink) TierStored(t Tier, _ BlockHash, blocks []BlockHash, tokens []tokenid.ID) {
	for _, h := range blocks {
		r.log = append(r.log, fmt.Sprintf("stored %s %x", t.Medium(), h.Uint64()))
	}
}

func (r *tierSink) TierRemoved(t Tier, blocks []BlockHash) {
	for _, h := range blocks {
		r.log = append(r.log, fmt.Sprintf("removed %s %x", t.Medium(), h.Uint64()))
	}
}

func (r *tierSink) count(prefix string) int {
	n := 0
	for _, l := range r.log {
		if len(l) >= len(prefix) && l[:len(prefix)] == prefix {
			n++
		}
	}
	return n
}

// fill admits tokens into a fresh Seq through AcquireTiers, computes the
// rest, commits and frees it; it returns the prefix hit and the onboards.
func fill(t *testing.T, c *Cache, tokens []tokenid.ID) (int, []Onboard) {
	t.Helper()
	s := &Seq{}
	hit, ob := c.AcquireTiers(s, tokens[:len(tokens)-1], nil, nil)
	ob = slices.Clone(ob)
	if err := c.Allocate(s, len(tokens)); err != nil {
		t.Fatal(err)
	}
	c.Commit(s, tokens)
	if err := c.Validate(s); err != nil {
		t.Fatal(err)
	}
	c.Free(s)
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return hit, ob
}

func TestTiersOffloadOnboard(t *testing.T) {
	const bs = 4
	tests := []struct {
		name       string
		host, disk int64 // in blocks
		wantHit    int   // tokens of prompt A found after B and C evicted it
		wantFrom   Tier
	}{
		{"no tiers", 0, 0, 0, 0},
		{"host holds it", 8, 0, 8, TierG2},
		{"host too small, disk holds it", 2, 8, 8, TierG3},
		{"disk only", 0, 8, 8, TierG3},
		{"both too small", 1, 1, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sink := &tierSink{}
			c, err := New(Config{NumBlocks: 3, BlockSize: bs, Sink: sink,
				Tiers: TierConfig{BlockBytes: 100, HostBytes: tc.host * 100, DiskBytes: tc.disk * 100}})
			if err != nil {
				t.Fatal(err)
			}
			a := seqTokens(1000, 2*bs+1)
			fill(t, c, a)
			fill(t, c, seqTokens(2000, 2*bs+1)) // evicts A's two blocks
			fill(t, c, seqTokens(3000, 2*bs+1)) // evicts B's
			hit, ob := fill(t, c, a)
			if hit != tc.wantHit {
				t.Fatalf("hit %d tokens, want %d (events %q)", hit, tc.wantHit, sink.log)
			}
			if tc.wantHit > 0 {
				if len(ob) != tc.wantHit/bs || ob[0].From != tc.wantFrom || ob[0].Index != 0 {
					t.Fatalf("onboards %+v, want %d from %v", ob, tc.wantHit/bs, tc.wantFrom)
				}
				st := c.TierStats()
				if st.Onboarded[tc.wantFrom] != uint64(len(ob)) {
					t.Fatalf("stats %+v", st)
				}
			}
			st := c.TierStats()
			for tier := TierG2; tier < NumTiers; tier++ {
				if st.Blocks[tier] > st.Capacity[tier] {
					t.Fatalf("tier %v holds %d blocks over its %d", tier, st.Blocks[tier], st.Capacity[tier])
				}
				// Every block in a tier was announced there and not since removed.
				m := tier.Medium()
				if got := sink.count("stored "+m) - sink.count("removed "+m); got != st.Blocks[tier] {
					t.Fatalf("%s: events net %d blocks, tier holds %d", m, got, st.Blocks[tier])
				}
			}
		})
	}
}

func TestTiersMatchAndMedium(t *testing.T) {
	const bs = 4
	c, err := New(Config{NumBlocks: 3, BlockSize: bs, Tiers: TierConfig{BlockBytes: 1, HostBytes: 16}})
	if err != nil {
		t.Fatal(err)
	}
	a := seqTokens(1, 2*bs+1)
	fill(t, c, a)
	if g1, lower := c.MatchTiers(a); g1 != 2*bs || lower[TierG2] != 0 {
		t.Fatalf("before eviction: g1 %d lower %v", g1, lower)
	}
	fill(t, c, seqTokens(500, 2*bs+1))
	if g1, lower := c.MatchTiers(a); g1 != 0 || lower[TierG2] != 2*bs {
		t.Fatalf("after eviction: g1 %d lower %v", g1, lower)
	}
	for _, m := range []string{"", "GPU", "CPU", "CPU_PINNED", "DISK", "STORAGE", "FS", "OBJ", "EXTERNAL"} {
		tier, ok := TierOfMedium(m)
		if !ok {
			t.Fatalf("medium %q unknown", m)
		}
		if m != "" && tier.Medium() != m && tier.SGLangMedium() != m && tier != TierG3 {
			t.Fatalf("medium %q maps to %v", m, tier)
		}
	}
	if _, ok := TierOfMedium("TAPE"); ok {
		t.Fatal("unknown medium accepted")
	}
	if _, err := New(Config{NumBlocks: 2, BlockSize: bs, Tiers: TierConfig{BlockBytes: 100, HostBytes: 50}}); err == nil {
		t.Fatal("a tier smaller than a block was accepted")
	}
}

// recorder is a SharedRecorder that counts copies per block.
type recorder struct{ refs map[BlockHash]int }

func (r *recorder) Has(h BlockHash) bool       { return r.refs[h] > 0 }
func (r *recorder) StoredG3(h BlockHash) bool  { r.refs[h]++; return r.refs[h] == 1 }
func (r *recorder) RemovedG3(h BlockHash) bool { r.refs[h]--; return r.refs[h] == 0 }

// TestTiersSharedRecorder: a recording shared tier hears of every block
// entering and leaving G3, so it holds exactly the cache's G3, and a
// second cache onboards from it what only the first computed.
func TestTiersSharedRecorder(t *testing.T) {
	const bs = 4
	tests := []struct {
		name       string
		host, disk int64 // in blocks
		wantHit    int   // tokens of prompt A the second cache onboards
	}{
		{"disk only", 0, 8, 8},
		{"host spills to disk", 1, 8, 8},
		{"disk too small", 0, 1, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{refs: map[BlockHash]int{}}
			cfg := Config{NumBlocks: 3, BlockSize: bs,
				Tiers: TierConfig{BlockBytes: 100, HostBytes: tc.host * 100, DiskBytes: tc.disk * 100, Shared: rec}}
			c, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			a := seqTokens(1000, 2*bs+1)
			fill(t, c, a)
			fill(t, c, seqTokens(2000, 2*bs+1))
			fill(t, c, seqTokens(3000, 2*bs+1))
			fill(t, c, seqTokens(4000, 2*bs+1))
			held := 0
			for _, n := range rec.refs {
				if n < 0 || n > 1 {
					t.Fatalf("recorder counts %v", rec.refs)
				}
				held += n
			}
			if st := c.TierStats(); held != st.Blocks[TierG3] {
				t.Fatalf("recorder holds %d blocks, G3 %d", held, st.Blocks[TierG3])
			}
			other, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if _, lower := other.MatchTiers(a[:len(a)-1]); lower[TierG3] != tc.wantHit {
				t.Fatalf("second cache matches %v, want %d in G3", lower, tc.wantHit)
			}
			if hit, _ := fill(t, other, a); hit != tc.wantHit {
				t.Fatalf("second cache hit %d, want %d", hit, tc.wantHit)
			}
		})
	}
}

// TestTiersSharedEvents: caches filling one recording shared tier publish
// its content, not their own shares of it: a block two caches put in G3
// is stored once and removed once, over both sinks, so a router applying
// G3 events to every sharing worker holds exactly the shared tier.
func TestTiersSharedEvents(t *testing.T) {
	const bs = 4
	rec := &recorder{refs: map[BlockHash]int{}}
	sinks := []*tierSink{{}, {}}
	var caches []*Cache
	for _, s := range sinks {
		c, err := New(Config{NumBlocks: 3, BlockSize: bs, Sink: s,
			Tiers: TierConfig{BlockBytes: 100, DiskBytes: 2 * 100, Shared: rec}})
		if err != nil {
			t.Fatal(err)
		}
		caches = append(caches, c)
	}
	a := seqTokens(1000, 2*bs+1)
	for _, c := range caches {
		fill(t, c, a) // both compute it
		for i := range 4 {
			fill(t, c, seqTokens(2000+1000*i, 2*bs+1)) // and push it through G3 and out
		}
	}
	held := 0
	for _, n := range rec.refs {
		held += min(n, 1)
	}
	stored := sinks[0].count("stored STORAGE") + sinks[1].count("stored STORAGE")
	removed := sinks[0].count("removed STORAGE") + sinks[1].count("removed STORAGE")
	if stored-removed != held {
		t.Fatalf("G3 events net to %d blocks (%d stored, %d removed), the shared tier holds %d", stored-removed, stored, removed, held)
	}
	own := caches[0].TierStats().Offloaded[TierG3] + caches[1].TierStats().Offloaded[TierG3]
	if uint64(stored) >= own {
		t.Fatalf("%d G3 stores published for %d offloads: copies of one block were published twice", stored, own)
	}
}

// hostRecorder is a SharedHostRecorder that counts copies per block.
type hostRecorder struct{ refs map[BlockHash]int }

func (r *hostRecorder) Has(h BlockHash) bool       { return r.refs[h] > 0 }
func (r *hostRecorder) StoredG2(h BlockHash) bool  { r.refs[h]++; return r.refs[h] == 1 }
func (r *hostRecorder) RemovedG2(h BlockHash) bool { r.refs[h]--; return r.refs[h] == 0 }

// TestTiersSharedHost: a shared host pool holds the union of the caches'
// G2 blocks; a second cache matches a prefix only the first computed as
// G2 (not G3) and onboards it from the pool, marked shared; G2 events over
// both sinks net to the pool's content (first copy in, last copy out);
// with a shared disk too, the host copy is preferred.
func TestTiersSharedHost(t *testing.T) {
	const bs = 4
	tests := []struct {
		name     string
		disk     bool  // a shared disk beside the host pool
		pushOut  int   // prompts pushed through cache 0 after a
		wantFrom Tier  // where the second cache finds a
		wantHit  int   // tokens of a it onboards
		host     int64 // host tier in blocks
	}{
		{"in host", false, 1, TierG2, 2 * bs, 4},
		{"in host, disk beside", true, 1, TierG2, 2 * bs, 4},
		{"spilled to the shared disk", true, 2, TierG3, 2 * bs, 2},
		{"out of both", false, 4, TierG1, 0, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			host := &hostRecorder{refs: map[BlockHash]int{}}
			tc2 := TierConfig{BlockBytes: 100, HostBytes: tc.host * 100, SharedHost: host}
			if tc.disk {
				tc2.DiskBytes, tc2.Shared = 2*100, &recorder{refs: map[BlockHash]int{}}
			}
			sinks := []*tierSink{{}, {}}
			var caches []*Cache
			for _, s := range sinks {
				c, err := New(Config{NumBlocks: 3, BlockSize: bs, Sink: s, Tiers: tc2})
				if err != nil {
					t.Fatal(err)
				}
				caches = append(caches, c)
			}
			a := seqTokens(1000, 2*bs+1)
			fill(t, caches[0], a)
			for i := range tc.pushOut {
				fill(t, caches[0], seqTokens(2000+1000*i, 2*bs+1))
			}
			_, lower := caches[1].MatchTiers(a[:len(a)-1])
			if tc.wantHit > 0 && lower[tc.wantFrom] != tc.wantHit {
				t.Fatalf("second cache matches %v, want %d in %v", lower, tc.wantHit, tc.wantFrom)
			}
			hit, ob := fill(t, caches[1], a)
			if hit != tc.wantHit {
				t.Fatalf("second cache hit %d, want %d", hit, tc.wantHit)
			}
			for _, o := range ob {
				if !o.Shared || o.From != tc.wantFrom {
					t.Fatalf("onboard %+v, want shared from %v", o, tc.wantFrom)
				}
			}
			// Both caches churn; the G2 events over both sinks net to the
			// pool's content.
			for _, c := range caches {
				for i := range 3 {
					fill(t, c, seqTokens(9000+1000*i, 2*bs+1))
				}
			}
			held := 0
			for _, n := range host.refs {
				if n < 0 {
					t.Fatalf("pool counts %v", host.refs)
				}
				held += min(n, 1)
			}
			stored := sinks[0].count("stored CPU") + sinks[1].count("stored CPU")
			removed := sinks[0].count("removed CPU") + sinks[1].count("removed CPU")
			if stored-removed != held {
				t.Fatalf("G2 events net to %d blocks (%d stored, %d removed), the pool holds %d", stored-removed, stored, removed, held)
			}
			own := caches[0].TierStats().Blocks[TierG2] + caches[1].TierStats().Blocks[TierG2]
			sum := 0
			for _, n := range host.refs {
				sum += n
			}
			if sum != own {
				t.Fatalf("pool counts %d copies, the caches' G2 hold %d", sum, own)
			}
		})
	}
	if _, err := New(Config{NumBlocks: 2, BlockSize: bs, Tiers: TierConfig{BlockBytes: 100, DiskBytes: 200, SharedHost: &hostRecorder{}}}); err == nil {
		t.Fatal("a shared host pool without a host tier was accepted")
	}
}
