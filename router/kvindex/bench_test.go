package kvindex

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/tandemllm/tandem/blockhash"
	"github.com/tandemllm/tandem/planes/kvevents"
)

// stream is a synthetic, cyclic event stream in vLLM's shape: each batch (one
// scheduler step of one worker) stores one prompt's blocks, half of them
// continuing the worker's previous prompt, and removes as many blocks as the
// worker's FIFO cache must evict. It ends by evicting everything, so it can
// be replayed on the same index forever.
type stream struct {
	workers []string
	batches []streamBatch
	blocks  int // block events (stored + removed) in one pass
}

type streamBatch struct {
	worker string
	events []kvevents.Event
}

func newStream(nWorkers, capacity, prompts, blocksPerPrompt, engineBS int) *stream {
	rng := rand.New(rand.NewPCG(7, 7))
	s := &stream{}
	type wstate struct {
		fifo []uint64
		last uint64
		has  bool
	}
	ws := make([]wstate, nWorkers)
	for w := range nWorkers {
		s.workers = append(s.workers, fmt.Sprint("worker-", w))
	}
	next := uint64(1)
	for range prompts {
		for w := range nWorkers {
			st := &ws[w]
			ev := kvevents.Event{Type: kvevents.TypeBlockStored, BlockSize: engineBS, Medium: "GPU",
				TokenIDs: make([]int32, blocksPerPrompt*engineBS)}
			for i := range ev.TokenIDs {
				ev.TokenIDs[i] = int32(rng.IntN(150000))
			}
			if st.has && rng.IntN(2) == 0 {
				ev.HasParent, ev.ParentBlockHash = true, kvevents.IntHash(st.last)
			}
			for range blocksPerPrompt {
				ev.BlockHashes = append(ev.BlockHashes, kvevents.IntHash(next))
				st.fifo = append(st.fifo, next)
				next++
			}
			st.last, st.has = next-1, true
			evs := []kvevents.Event{ev}
			s.blocks += blocksPerPrompt
			if over := len(st.fifo) - capacity; over > 0 {
				evs = append(evs, removed(st.fifo[:over]...))
				s.blocks += over
				st.fifo = st.fifo[over:]
				if len(st.fifo) > 0 && st.fifo[0] > st.last {
					st.has = false
				}
			}
			s.batches = append(s.batches, streamBatch{s.workers[w], evs})
		}
	}
	for w := range nWorkers {
		s.batches = append(s.batches, streamBatch{s.workers[w], []kvevents.Event{removed(ws[w].fifo...)}})
		s.blocks += len(ws[w].fifo)
	}
	return s
}

// BenchmarkApplyEvents measures block events (one block stored or removed,
// its tokens hashed) applied per second on one goroutine, at steady states
// of 64 Ki and 1 Mi residences: the first fits in cache, the second is bound
// by memory latency.
func BenchmarkApplyEvents(b *testing.B) {
	for _, steady := range []int{1 << 16, 1 << 20} {
		for _, engineBS := range []int{16, 64} {
			b.Run(fmt.Sprintf("residences=%dKi/engine_block=%d", steady>>10, engineBS), func(b *testing.B) {
				const nw = 8
				const promptTokens = 1024
				k := engineBS / 16 // index blocks per engine block
				capacity := steady / nw / k
				prompts := 2 * steady / nw / (promptTokens / 16) // fill twice over
				s := newStream(nw, capacity, prompts, promptTokens/engineBS, engineBS)
				ix, _ := New(Config{BlockSize: 16, MaxBlocks: 2 * steady})
				for _, w := range s.workers {
					_ = ix.AddWorker(w, engineBS)
				}
				b.ResetTimer()
				start := time.Now()
				events := 0
				for i := 0; i < b.N; i++ {
					for _, bt := range s.batches {
						if _, err := ix.Apply(bt.worker, bt.events); err != nil {
							b.Fatal(err)
						}
					}
					events += s.blocks * k
				}
				el := time.Since(start)
				b.ReportMetric(float64(events)/el.Seconds(), "blockevents/s")
				b.ReportMetric(float64(el.Nanoseconds())/float64(events), "ns/blockevent")
				if st := ix.Stats(); st.ApplyStats.ParentMissing > 0 || ix.Len() != 0 {
					b.Fatalf("stream not clean: %+v, %d left", st.ApplyStats, ix.Len())
				}
			})
		}
	}
}

// BenchmarkMemory reports the index's heap per million residences, with
// every block held by one worker (the worst case: no sharing) and by two.
func BenchmarkMemory(b *testing.B) {
	for _, repl := range []int{1, 2} {
		b.Run(fmt.Sprintf("replicas=%d", repl), func(b *testing.B) {
			const total = 1 << 20
			const nw = 100
			for range b.N {
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				ix, _ := New(Config{BlockSize: 16, MaxBlocks: 2 * total})
				for w := range nw {
					_ = ix.AddWorker(fmt.Sprint("worker-", w), 16)
				}
				toks := make([]int32, 16*64)
				next := uint64(0)
				for ix.Len() < total {
					for i := range toks {
						toks[i] = int32(next*1000 + uint64(i))
					}
					next++
					for r := range repl {
						w := fmt.Sprint("worker-", (int(next)+r*37)%nw)
						ev := kvevents.Event{Type: kvevents.TypeBlockStored, BlockSize: 16, TokenIDs: toks}
						for j := range 64 {
							ev.BlockHashes = append(ev.BlockHashes, kvevents.IntHash(next<<8|uint64(j)))
						}
						_, _ = ix.Apply(w, []kvevents.Event{ev})
					}
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				n := ix.Len()
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(n), "B/block")
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(n)*1e6/1e6, "MB/Mblocks")
				runtime.KeepAlive(ix)
			}
		})
	}
}

// BenchmarkLookup measures one lookup of a 4,096-token prompt (256 blocks)
// against 100 workers of 10,000 blocks, where every worker shares a
// 32-block system prompt and three hold the whole prompt.
func BenchmarkLookup(b *testing.B) {
	ix, q := lookupFixture(b, 100, 10000)
	dst := make([]Overlap, 0, 128)
	b.ResetTimer()
	for range b.N {
		dst = ix.Lookup(q, dst[:0])
	}
	if len(dst) != 100 {
		b.Fatalf("%d overlaps", len(dst))
	}
}

func lookupFixture(b *testing.B, nw, perWorker int) (*Index, []uint64) {
	ix, _ := New(Config{BlockSize: 16, MaxBlocks: nw*perWorker + 1})
	sys := seqTokens16(0, 32)
	prompt := append(append([]int32{}, sys...), seqTokens16(1, 224)...)
	for w := range nw {
		id := fmt.Sprint("worker-", w)
		_ = ix.AddWorker(id, 16)
		var evs []kvevents.Event
		evs = append(evs, stored16(prompt[:32*16], nil, uint64(w)<<40))
		held := 32
		if w%(nw/3) == 0 {
			evs = append(evs, stored16(prompt[32*16:], &evs[0], uint64(w)<<40|1<<20))
			held += 224
		}
		p := 2
		for held < perWorker {
			n := min(256, perWorker-held)
			evs = append(evs, stored16(seqTokens16(w*100000+p, n), nil, uint64(w)<<40|uint64(p)<<20))
			held += n
			p++
		}
		if _, err := ix.Apply(id, evs); err != nil {
			b.Fatal(err)
		}
	}
	return ix, blockhash.Blocks(prompt, 16)
}

func seqTokens16(p, blocks int) []int32 {
	t := make([]int32, blocks*16)
	for i := range t {
		t[i] = int32(p*7919 + i)
	}
	return t
}

// stored16 stores tokens (block size 16) with engine hashes base+i, chained
// onto parent's last block when parent is not nil.
func stored16(tokens []int32, parent *kvevents.Event, base uint64) kvevents.Event {
	ev := kvevents.Event{Type: kvevents.TypeBlockStored, BlockSize: 16, TokenIDs: tokens}
	for i := range len(tokens) / 16 {
		ev.BlockHashes = append(ev.BlockHashes, kvevents.IntHash(base+uint64(i)))
	}
	if parent != nil {
		ev.HasParent, ev.ParentBlockHash = true, parent.BlockHashes[len(parent.BlockHashes)-1]
	}
	return ev
}

// BenchmarkLookupTiers is BenchmarkLookup's lookup split by tier: one
// LookupTiers (every residence on the prompt's chains walked), against
// the three LookupTags the router made before (an index per tier set,
// each skipping chains whose workers are unchanged).
func BenchmarkLookupTiers(b *testing.B) {
	ix, q := lookupFixture(b, 100, 10000)
	for w := range 100 {
		ix.SetTag(fmt.Sprint("worker-", w), int32(w))
	}
	b.Run("LookupTiers", func(b *testing.B) {
		dst := make([]TierOverlap, 0, 128)
		for range b.N {
			dst = ix.LookupTiers(q, dst[:0])
		}
		if len(dst) != 100 {
			b.Fatalf("%d overlaps", len(dst))
		}
	})
	b.Run("3xLookupTags", func(b *testing.B) {
		dst := make([]TagOverlap, 0, 128)
		for range b.N {
			for range 3 {
				dst = ix.LookupTags(q, dst[:0])
			}
		}
		if len(dst) != 100 {
			b.Fatalf("%d overlaps", len(dst))
		}
	})
}
