package router

import (
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/planes/kvevents"
)

// decisionFixture is a kv policy with 1,000 in-process workers, each holding
// 10,000 blocks (block size 16): a 32-block system prompt every worker
// holds, a 4,096-token conversation three workers hold entirely, and
// unrelated conversations for the rest. Every worker also has two requests
// in flight. Building it takes a few seconds and about 1 GB.
type decisionFixture struct {
	kv     *KV
	cands  []Candidate
	prompt []engine.Token
}

var (
	decisionOnce sync.Once
	decisionFix  *decisionFixture
)

func buildDecisionFixture(b *testing.B) *decisionFixture {
	decisionOnce.Do(func() {
		const (
			nw        = 1000
			perWorker = 10000
			bs        = 16
		)
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		kv, err := NewKV(b.Context(), KVConfig{BlockSize: bs, Seed: 1, IndexMaxBlocks: nw*perWorker + 1, Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(1, 2))
		words := func(n int) []engine.Token {
			t := make([]engine.Token, n)
			for i := range t {
				t[i] = engine.Token(rng.IntN(150000))
			}
			return t
		}
		sys := words(32 * bs)
		conv := words(224 * bs)
		prompt := append(slices.Clone(sys), conv...)
		f := &decisionFixture{kv: kv, prompt: prompt}
		ev := func(toks []engine.Token, parent *kvevents.Event, base uint64) kvevents.Event {
			e := kvevents.Event{Type: kvevents.TypeBlockStored, BlockSize: bs, TokenIDs: toks}
			for i := range len(toks) / bs {
				e.BlockHashes = append(e.BlockHashes, kvevents.IntHash(base+uint64(i)))
			}
			if parent != nil {
				e.HasParent, e.ParentBlockHash = true, parent.BlockHashes[len(parent.BlockHashes)-1]
			}
			return e
		}
		for w := range nw {
			id := fmt.Sprintf("worker-%04d", w)
			if err := kv.AddWorker(id, "", "", bs); err != nil {
				b.Fatal(err)
			}
			f.cands = append(f.cands, Candidate{ID: id})
			base := uint64(w) << 32
			evs := []kvevents.Event{ev(sys, nil, base)}
			held := 32
			if w%333 == 0 {
				evs = append(evs, ev(conv, &evs[0], base|1<<20))
				held += 224
			}
			for c := 2; held < perWorker; c++ {
				n := min(256, perWorker-held)
				evs = append(evs, ev(words(n*bs), &evs[0], base|uint64(c)<<20))
				held += n
			}
			if err := kv.Ingest(id, 0, &kvevents.Batch{Events: evs}); err != nil {
				b.Fatal(err)
			}
			for r := range 2 { // two requests in flight, one past its first token
				req := &Request{Tokens: append(slices.Clone(sys), words(512)...)}
				kv.Routed(req, Decision{WorkerID: id, PredictedCachedTokens: 32 * bs})
				if r == 0 {
					kv.FirstToken(req, id, len(req.Tokens)) // served from cache: no BlockStored due
				}
			}
		}
		decisionFix = f
	})
	if decisionFix == nil {
		b.Fatal("fixture failed")
	}
	return decisionFix
}

// BenchmarkDecision measures one routing decision: hash a 4,096-token
// prompt, look it up in both indexes, score 1,000 candidates with their
// in-flight load, choose. It reports p50 and p99 over all iterations, for
// each cost function on the same fixture.
//
//	go test -run XXX -bench Decision -benchtime 20000x ./router
func BenchmarkDecision(b *testing.B) {
	f := buildDecisionFixture(b)
	for _, m := range []CostModel{CostTTFT, CostTandem, CostDynamo} {
		b.Run("cost="+string(m), func(b *testing.B) {
			c, err := newCost(m)
			if err != nil {
				b.Fatal(err)
			}
			saved := f.kv.cost
			f.kv.cost = c
			defer func() { f.kv.cost = saved }()
			benchDecision(b, f)
		})
	}
	// Every worker with an engine queue report (upstream servers): the
	// extra cost is one report read per candidate. The reports show
	// nothing beyond the router's own load, so the choice is unchanged.
	b.Run("cost=ttft/queue-reports", func(b *testing.B) {
		q := &fakeQueue{}
		q.set(0, 0, time.Now().Add(time.Hour)) // fresh for the whole run
		f.kv.mu.RLock()
		for _, w := range f.kv.workers {
			w.setQueue(q)
		}
		f.kv.mu.RUnlock()
		defer func() {
			f.kv.mu.RLock()
			for _, w := range f.kv.workers {
				w.setQueue(nil)
			}
			f.kv.mu.RUnlock()
		}()
		benchDecision(b, f)
	})
}

func benchDecision(b *testing.B, f *decisionFixture) {
	req := &Request{Model: "m", Tokens: f.prompt}
	for range 100 { // warm the pools
		if _, err := f.kv.Pick(req, f.cands); err != nil {
			b.Fatal(err)
		}
	}
	lat := make([]time.Duration, 0, b.N)
	cpu := make([]int64, 0, b.N)
	var d Decision
	runtime.LockOSThread() // thread CPU time must be the same thread's
	defer runtime.UnlockOSThread()
	b.ResetTimer()
	for range b.N {
		c0 := threadCPU()
		t0 := time.Now()
		var err error
		d, err = f.kv.Pick(req, f.cands)
		lat = append(lat, time.Since(t0))
		cpu = append(cpu, threadCPU()-c0)
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	slices.Sort(cpu)
	b.ReportMetric(float64(cpu[len(cpu)/2])/1e3, "cpu-p50-µs")
	b.ReportMetric(float64(cpu[len(cpu)*9/10])/1e3, "cpu-p90-µs")
	b.ReportMetric(float64(cpu[len(cpu)*99/100])/1e3, "cpu-p99-µs")
	if d.PredictedCachedTokens != 255*16 {
		b.Fatalf("decision %+v: expected the full conversation on a holder", d)
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
	b.ReportMetric(float64(lat[len(lat)-1].Nanoseconds())/1e3, "max-µs")
}
