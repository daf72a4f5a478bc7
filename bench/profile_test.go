package bench

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tandemllm/tandem/engine/mocker"
)

// TestProfileMatchesMockerTiming profiles a real Tandem (serve.Start, one
// mocker worker with the qwen3-0.6b timing) over HTTP and checks the
// profile's interpolated numbers against the timing model. The mocker runs
// 4× slower than its model (speedup 0.25) and the profile scales times back
// (TimeScale 0.25), so HTTP and scheduling overhead on a loaded machine
// shrink 4× relative to the model; the tolerance is generous still (the
// point is the sweep's method, not the machine's speed).
func TestProfileMatchesMockerTiming(t *testing.T) {
	if testing.Short() {
		t.Skip("sweeps a live server for several seconds")
	}
	if raceEnabled {
		// The detector slows the serving stack 5-20×: the overhead would
		// swamp the model times this checks. The sweep's code still runs
		// under -race in TestProfileSweepRace.
		t.Skip("timing check: not under the race detector")
	}
	const speedup, capacity, budget = 0.25, 16384, mocker.DefaultMaxNumBatchedTokens
	tm := mocker.Qwen3_0_6BTiming()
	url := tandem(t, tandemOpts{mode: "kv", speedup: speedup, timing: tm, capacity: capacity})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var log strings.Builder
	p, err := Profile(ctx, ProfileSpec{Target: Target{URL: url}, ISL: []int{256, 2048}, CachedFraction: []float64{0, 0.5},
		Concurrency: []int{1, 8}, Context: []int{256, 1536}, Repeats: 1, DecodeTokens: 8,
		KVCapacityTokens: capacity, MaxNumSeqs: mocker.DefaultMaxNumSeqs, MaxNumBatchedTokens: budget, TimeScale: speedup, Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sweep:\n%s", log.String())
	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 0.3*want+3 {
			t.Errorf("%s: profile %.1f ms, timing model %.1f ms", what, got, want)
		}
	}
	prefill := func(n int) float64 {
		ms := 0.0
		for ; n > 0; n -= min(n, budget) {
			ms += tm.PrefillMs(min(n, budget))
		}
		return ms
	}
	for _, tc := range []struct {
		isl int
		cf  float64
	}{{256, 0}, {256, 0.5}, {2048, 0}, {2048, 0.5}, {1024, 0.25}, {1500, 0}} {
		cached := int(tc.cf*float64(tc.isl)) / 16 * 16
		near(fmt.Sprintf("prefill isl=%d cached=%.2f", tc.isl, tc.cf), p.PrefillMs(float64(tc.isl), tc.cf), prefill(tc.isl-cached))
	}
	// ITL at concurrency c and context x: one decode step at the KV
	// usage of c sequences of x tokens plus half their output.
	for _, tc := range []struct{ c, x float64 }{{1, 256}, {8, 256}, {1, 1536}, {8, 1536}, {4, 800}} {
		d := float64(max(8, 2*int(math.Ceil(tc.c*tc.x/budget))+16))
		want := tm.DecodeMs(tc.c * (tc.x + d/2) / capacity)
		near(fmt.Sprintf("itl c=%v ctx=%v", tc.c, tc.x), p.ITLMs(tc.c, tc.x), want)
	}
	if p.KVCapacityTokens != capacity || p.Model == "" {
		t.Errorf("profile limits/model: %+v", p)
	}
}

// TestProfileSweepRace runs a tiny sweep against an instant mocker (no
// timing checked): the sweep's concurrency under the race detector, and
// the shape and limits of what it writes.
func TestProfileSweepRace(t *testing.T) {
	url := tandem(t, tandemOpts{mode: "round-robin", speedup: 50, timing: mocker.Qwen3_0_6BTiming(), capacity: 4096})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := Profile(ctx, ProfileSpec{Target: Target{URL: url}, ISL: []int{64, 256}, CachedFraction: []float64{0, 0.5},
		Concurrency: []int{1, 4, 64}, Context: []int{128, 512}, Repeats: 1, DecodeTokens: 4,
		KVCapacityTokens: 4096, MaxNumSeqs: 32, MaxNumBatchedTokens: 2048, Worker: "race"})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Prefill.TTFTMs) != 2 || len(p.Decode.ITLMs) != 3 || p.Worker != "race" {
		t.Fatalf("profile shape: %+v", p)
	}
	// 64 sequences exceed max-num-seqs, and 4 × (512 + output) exceed
	// neither: the first row is measured, the last not.
	if p.Decode.ITLMs[2][0] != 0 || p.Decode.ITLMs[2][1] != 0 || p.Decode.ITLMs[0][0] <= 0 || p.Decode.ITLMs[1][1] <= 0 {
		t.Fatalf("decode grid: %v", p.Decode.ITLMs)
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
}
