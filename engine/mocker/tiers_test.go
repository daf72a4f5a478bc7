package mocker

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/kvcache"
)

// TestTierOnboardTTFT: a prefix the pool evicted comes back from host
// memory or disk at the simulated links' speed, so its TTFT sits between a
// pool hit and a recompute, and a disk onboard costs more than a host one.
func TestTierOnboardTTFT(t *testing.T) {
	const capacity = 4096
	doc := prompt(1000, 3000)
	ask := func(tail int) *engine.Request {
		return &engine.Request{Prompt: append(slices.Clone(doc), prompt(tail, 16)...), MaxTokens: 2}
	}
	flush := func(t *testing.T, e *Engine) {
		// Two other long prompts push the document out of the pool.
		generate(t, e, &engine.Request{Prompt: prompt(50000, 3500), MaxTokens: 1})
		generate(t, e, &engine.Request{Prompt: prompt(60000, 3500), MaxTokens: 1})
	}
	run := func(t *testing.T, tiers TierConfig) (miss, again time.Duration, hit int, e *Engine) {
		clock := NewVirtualClock(time.Unix(1_700_000_000, 0))
		e = newTest(t, Config{Clock: clock, Timing: Qwen3_0_6BTiming(), KVCapacityTokens: capacity, Tiers: tiers})
		e.validate = true
		miss, _ = ttftOf(t, e, ask(90000))
		flush(t, e)
		again, r := ttftOf(t, e, ask(91000))
		if _, err := schedState(t, e); err != nil {
			t.Fatal(err)
		}
		return miss, again, r.hit, e
	}
	const gib = 1 << 30
	missNone, againNone, hitNone, _ := run(t, TierConfig{})
	_, againHost, hitHost, eHost := run(t, TierConfig{HostBytes: 8 * gib})
	_, againDisk, hitDisk, _ := run(t, TierConfig{DiskBytes: 8 * gib})
	clock := NewVirtualClock(time.Unix(1_700_000_000, 0))
	eG1 := newTest(t, Config{Clock: clock, Timing: Qwen3_0_6BTiming(), KVCapacityTokens: capacity})
	ttftOf(t, eG1, ask(90000))
	g1, _ := ttftOf(t, eG1, ask(91000))

	t.Logf("TTFT: pool hit %v, host onboard %v, disk onboard %v, recompute %v", g1, againHost, againDisk, againNone)
	if hitNone != 0 || hitHost != 2992 || hitDisk != 2992 {
		t.Fatalf("cached tokens: none %d, host %d, disk %d; want 0, 2992, 2992", hitNone, hitHost, hitDisk)
	}
	if !(g1 < againHost && againHost < againDisk && againDisk < againNone) {
		t.Fatalf("TTFT: pool hit %v, host onboard %v, disk onboard %v, recompute %v (first miss %v): want increasing",
			g1, againHost, againDisk, againNone, missNone)
	}
	// The host copy is the link model's: 187 blocks of 16×114688 bytes at
	// 25 GB/s plus latency, on top of the 16-token tail's prefill.
	blockBytes := int64(16 * DefaultKVBytesPerToken)
	_, host := TierConfig{HostBandwidth: DefaultHostBandwidth, HostLatency: DefaultHostLatency}.onboardSeconds(187, 0, blockBytes)
	want := g1 + time.Duration(host*float64(time.Second))
	if d := againHost - want; d < -time.Millisecond || d > time.Millisecond {
		t.Fatalf("host onboard TTFT %v, want ≈ pool hit %v + copy %v", againHost, g1, time.Duration(host*float64(time.Second)))
	}
	st := eHost.stats
	if st.onboardBlocks[kvcache.TierG2].Load() != 187 || st.tierOffload[kvcache.TierG2].Load() == 0 {
		t.Fatalf("onboarded %d, offloaded %d", st.onboardBlocks[kvcache.TierG2].Load(), st.tierOffload[kvcache.TierG2].Load())
	}
	// The same through the worker's metrics (a pedantic registry checks
	// the families are consistent).
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(eHost.Collector()); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, "tandem_kv_tier_blocks", "tandem_kv_tier_bytes", "tandem_kv_tier_offload_blocks_total",
		"tandem_kv_tier_onboard_blocks_total", "tandem_kv_tier_dropped_blocks_total", "tandem_kv_tier_onboard_seconds"); err != nil || n != 3+2*4+1 {
		t.Fatalf("tier metrics: %d series, %v", n, err)
	}
	wantMetrics := strings.NewReader(`# HELP tandem_kv_tier_onboard_blocks_total KV blocks brought back into the pool from a lower tier (prefix hits per tier).
# TYPE tandem_kv_tier_onboard_blocks_total counter
tandem_kv_tier_onboard_blocks_total{engine="0",model_name="mocker",tier="g2"} 187
tandem_kv_tier_onboard_blocks_total{engine="0",model_name="mocker",tier="g3"} 0
`)
	if err := testutil.GatherAndCompare(reg, wantMetrics, "tandem_kv_tier_onboard_blocks_total"); err != nil {
		t.Fatal(err)
	}
}

// TestTierOnboardDoesNotBlock: while one sequence waits for its onboard,
// another keeps decoding; the step loop never sleeps through the copy.
func TestTierOnboardDoesNotBlock(t *testing.T) {
	clock := NewVirtualClock(time.Unix(0, 0))
	// A slow disk makes the onboard long enough to overlap many decode steps.
	e := newTest(t, Config{Clock: clock, Timing: Qwen3_0_6BTiming(), KVCapacityTokens: 4096,
		Tiers: TierConfig{DiskBytes: 8 << 30, DiskBandwidth: 1e9}})
	e.validate = true
	doc := prompt(1000, 3000)
	generate(t, e, &engine.Request{Prompt: doc, MaxTokens: 1})
	generate(t, e, &engine.Request{Prompt: prompt(50000, 3500), MaxTokens: 1})
	generate(t, e, &engine.Request{Prompt: prompt(60000, 3500), MaxTokens: 1})
	long, err := e.Generate(t.Context(), &engine.Request{Prompt: prompt(70000, 16), MaxTokens: 200, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	first, err := long.Recv() // decoding now
	if err != nil {
		t.Fatal(err)
	}
	r := generate(t, e, &engine.Request{Prompt: append(slices.Clone(doc), 7), MaxTokens: 1})
	if r.hit == 0 {
		t.Fatal("nothing onboarded")
	}
	got := collect(t, long)
	if first.Finish != engine.FinishNone {
		// The engine may run the whole sequence before the first read
		// (the pipe coalesces deltas): its first delta then ends it.
		got.finish = first.Finish
	}
	if got.err != nil || got.finish != engine.FinishLength {
		t.Fatalf("decoding stream: %+v", got)
	}
	if _, err := schedState(t, e); err != nil {
		t.Fatal(err)
	}
}

// TestTierSharedDisk: with a shared disk, a prefix worker A computed and
// pushed out to its G3 is onboarded by worker B, which never saw it (cached
// tokens > 0 on B's first request), priced by B's MatchTiers as G3.
func TestTierSharedDisk(t *testing.T) {
	const capacity = 4096
	disk := NewSharedDisk()
	clock := NewVirtualClock(time.Unix(1_700_000_000, 0)) // one host, one clock
	newWorker := func() *Engine {
		e := newTest(t, Config{Clock: clock, Timing: Qwen3_0_6BTiming(), KVCapacityTokens: capacity,
			Tiers: TierConfig{DiskBytes: 1 << 30, Shared: disk}})
		e.validate = true
		return e
	}
	a, b := newWorker(), newWorker()
	doc := prompt(1000, 3000)
	generate(t, a, &engine.Request{Prompt: doc, MaxTokens: 1})
	generate(t, a, &engine.Request{Prompt: prompt(50000, 3500), MaxTokens: 1})
	generate(t, a, &engine.Request{Prompt: prompt(60000, 3500), MaxTokens: 1})
	ask := append(slices.Clone(doc), prompt(90000, 16)...)
	var g1 int
	var lower [kvcache.NumTiers]int
	if err := b.do(t.Context(), func() { g1, lower = b.cache.MatchTiers(ask) }); err != nil {
		t.Fatal(err)
	}
	if g1 != 0 || lower[kvcache.TierG2] != 0 || lower[kvcache.TierG3] != 2992 {
		t.Fatalf("B's match: g1 %d, lower %v; want 0 and 2992 in G3", g1, lower)
	}
	r := generate(t, b, &engine.Request{Prompt: ask, MaxTokens: 1})
	if r.hit != 2992 || b.stats.onboardBlocks[kvcache.TierG3].Load() != 187 {
		t.Fatalf("B's first request: cached %d, onboarded %d blocks; want 2992 and 187", r.hit, b.stats.onboardBlocks[kvcache.TierG3].Load())
	}
	for _, e := range []*Engine{a, b} {
		if _, err := schedState(t, e); err != nil {
			t.Fatal(err)
		}
	}
	// A config without a disk cannot share one.
	if _, err := New(Config{Tiers: TierConfig{HostBytes: 1 << 30, Shared: NewSharedDisk()}}); err == nil {
		t.Fatal("shared disk without a disk size accepted")
	}
}

// TestTierSharedHost: with a shared host pool, a prefix worker A computed
// and pushed out to its G2 is onboarded by worker B, which never saw it,
// over B's host link: B's match counts it as G2, its first request hits,
// and its TTFT is a pool hit's plus the host copy, less than a read of
// the same blocks from a shared disk.
func TestTierSharedHost(t *testing.T) {
	const capacity = 4096
	const gib = 1 << 30
	doc := prompt(1000, 3000)
	ask := append(slices.Clone(doc), prompt(90000, 16)...)
	run := func(t *testing.T, tiers func() TierConfig) (ttft time.Duration, hit int, lower [kvcache.NumTiers]int, b *Engine) {
		clock := NewVirtualClock(time.Unix(1_700_000_000, 0)) // one host, one clock
		newWorker := func() *Engine {
			e := newTest(t, Config{Clock: clock, Timing: Qwen3_0_6BTiming(), KVCapacityTokens: capacity, Tiers: tiers()})
			e.validate = true
			return e
		}
		a := newWorker()
		b = newWorker()
		generate(t, a, &engine.Request{Prompt: doc, MaxTokens: 1})
		generate(t, a, &engine.Request{Prompt: prompt(50000, 3500), MaxTokens: 1})
		generate(t, a, &engine.Request{Prompt: prompt(60000, 3500), MaxTokens: 1})
		if err := b.do(t.Context(), func() { _, lower = b.cache.MatchTiers(ask) }); err != nil {
			t.Fatal(err)
		}
		ttft, r := ttftOf(t, b, &engine.Request{Prompt: ask, MaxTokens: 1})
		for _, e := range []*Engine{a, b} {
			if _, err := schedState(t, e); err != nil {
				t.Fatal(err)
			}
		}
		return ttft, r.hit, lower, b
	}
	host := NewSharedHost("h")
	viaHost, hitHost, lowerHost, b := run(t, func() TierConfig { return TierConfig{HostBytes: 8 * gib, SharedHost: host} })
	disk := NewSharedDisk()
	viaDisk, hitDisk, _, _ := run(t, func() TierConfig { return TierConfig{DiskBytes: 8 * gib, Shared: disk} })
	if lowerHost[kvcache.TierG2] != 2992 || lowerHost[kvcache.TierG3] != 0 {
		t.Fatalf("B's match %v, want 2992 in G2", lowerHost)
	}
	if hitHost != 2992 || hitDisk != 2992 || b.stats.onboardBlocks[kvcache.TierG2].Load() != 187 || b.stats.sharedOnboard.Load() != 187 {
		t.Fatalf("B's first request: cached %d (disk %d), onboarded %d blocks from G2 (%d shared); want 2992 and 187",
			hitHost, hitDisk, b.stats.onboardBlocks[kvcache.TierG2].Load(), b.stats.sharedOnboard.Load())
	}
	if !(viaHost < viaDisk) {
		t.Fatalf("TTFT onboarding from the shared host %v, from the shared disk %v: want host faster", viaHost, viaDisk)
	}
	if b.KVSharedHost() != "h" || host.Blocks() == 0 {
		t.Fatalf("shared host %q holds %d blocks", b.KVSharedHost(), host.Blocks())
	}
	if _, err := New(Config{Tiers: TierConfig{DiskBytes: gib, SharedHost: NewSharedHost("")}}); err == nil {
		t.Fatal("shared host without a host size accepted")
	}
}
