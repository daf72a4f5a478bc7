package kvrouting

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tandemllm/tandem/router"
)

// TestSeedExperiment reproduces the report's KV-routing table. Every kv and
// kv-approx run must score at least 59/60, the first run included;
// round-robin must land well below; with one worker's events off, the
// diagnostic must appear within the 5 s timeout and routing must keep
// 57/60 or more.
func TestSeedExperiment(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: about 30 s")
	}
	seeds := []uint64{1, 2, 3}
	type row struct {
		name string
		sc   Scenario
		min  int // minimum hits per run; -1: report only
		max  int // maximum hits per run (baselines); 0: none
	}
	rows := []row{
		{"kv (ttft cost)", Scenario{Mode: "kv", Cost: router.CostTTFT}, 59, 0},
		{"kv (tandem cost)", Scenario{Mode: "kv", Cost: router.CostTandem}, 59, 0},
		{"kv (dynamo cost)", Scenario{Mode: "kv", Cost: router.CostDynamo}, -1, 0},
		{"kv-approx", Scenario{Mode: "kv-approx"}, 59, 0},
		{"round-robin", Scenario{Mode: "round-robin"}, -1, 50},
		{"random", Scenario{Mode: "random"}, -1, 0},
	}
	var table strings.Builder
	fmt.Fprintf(&table, "%-28s %-14s %s\n", "policy", "hits/60", "detail")
	for _, rw := range rows {
		var hits []string
		var detail string
		// One client per run: no queue for a late timer to misprice (the
		// concurrent runs below are timed alone), so a row's seeds run at
		// once. A run mostly waits on the mocker's step timers.
		results := runSeeds(t, seeds, func(seed uint64) Scenario { sc := rw.sc; sc.Seed = seed; return sc })
		for i, seed := range seeds {
			res := results[i]
			hits = append(hits, fmt.Sprint(res.Hits))
			if rw.min >= 0 && res.Hits < rw.min {
				t.Errorf("%s seed %d: %v, want ≥ %d", rw.name, seed, res, rw.min)
			}
			if rw.max > 0 && res.Hits > rw.max {
				t.Errorf("%s seed %d: %v, want ≤ %d", rw.name, seed, res, rw.max)
			}
			if res.Rerequests != 60 {
				t.Errorf("%s: %d re-requests", rw.name, res.Rerequests)
			}
			detail = fmt.Sprintf("predictions within 1 block: %d/72", res.Predictions)
			if res.StartHealth != nil {
				detail += fmt.Sprintf("; at the first request: %v", res.StartHealth)
			}
		}
		fmt.Fprintf(&table, "%-28s %-14s %s\n", rw.name, strings.Join(hits, ", "), detail)
	}

	// The three kv costs in one run, with 4 and 8 concurrent clients. The
	// ttft cost must route at least 59 of every 60 re-requests to their
	// prefix in every run. With 8 clients some re-requests arrive while
	// their prefix's first request is still being computed; an engine
	// computes a prefix once only if the second request is admitted after
	// the first's prefill, so those are counted apart and the bound holds
	// for the others.
	//
	// These runs use speedup 4, not the default 20: the harness measures
	// wall time × speedup, so a scheduling delay of 1 ms on a loaded
	// machine (CI runs every package's tests at once on two cores) reads
	// as 20 ms of model time at 20, enough to misprice a queue and route a
	// re-request away (docs/benchmarks.md). A run here is ~3 s of model
	// time, so the lower speedup costs well under a second each.
	const concSpeedup = 4
	for _, conc := range []int{4, 8} {
		var sums [3]int
		for ci, cost := range []router.CostModel{router.CostTTFT, router.CostTandem, router.CostDynamo} {
			var runs []string
			for _, seed := range seeds {
				res, err := Run(t.Context(), Scenario{Mode: "kv", Cost: cost, Seed: seed, Concurrency: conc, Speedup: concSpeedup})
				if err != nil {
					t.Fatal(err)
				}
				sums[ci] += res.Hits
				others, otherHits := res.Rerequests-res.Computing, res.Hits-res.ComputingHits
				runs = append(runs, fmt.Sprintf("%d/%d (computing %d/%d) %.0fms", otherHits, others,
					res.ComputingHits, res.Computing, float64(res.TTFTMean.Microseconds())/1e3))
				if cost == router.CostTTFT && others-otherHits > (others+59)/60 {
					t.Errorf("%d clients, ttft cost, seed %d: %v, want at most one miss in every 60 re-requests not routed while their prefix was computed", conc, seed, res)
				}
			}
			fmt.Fprintf(&table, "%-28s %s\n", fmt.Sprintf("kv %s, %d clients", cost, conc), strings.Join(runs, "; "))
		}
		if sums[0] < sums[1] || sums[0] <= sums[2] {
			t.Errorf("%d clients: hits ttft %d, tandem %d, dynamo %d: the ttft cost must do best", conc, sums[0], sums[1], sums[2])
		}
	}

	// Events off on one worker, in kv mode.
	var offHits, offLat []string
	// Both seeds at once: each waits out the detector's 5 s timeout.
	offRes := runSeeds(t, seeds[:2], func(seed uint64) Scenario {
		return Scenario{Mode: "kv", EventsOff: []int{1}, Seed: seed, WaitForDiagnostic: true}
	})
	for i, seed := range seeds[:2] {
		res := offRes[i]
		offHits = append(offHits, fmt.Sprint(res.Hits))
		if res.Hits < 57 {
			t.Errorf("events off, seed %d: %v, want ≥ 57", seed, res)
		}
		// The detector's timeout is 5 s; the slack is generous because on
		// a loaded 2-core machine the detector's tick and this test's
		// poll can each be late by seconds. Never raising it still fails.
		if res.DiagLatency <= 0 || res.DiagLatency > 10*time.Second {
			t.Errorf("events off, seed %d: kv_events_missing after %v, want ≤ 5 s (10 s with slack)", seed, res.DiagLatency)
		}
		found := false
		for _, d := range res.Diagnostics {
			found = found || (d.Code == router.DiagKVEventsMissing && d.Subject == "worker-1")
		}
		if !found || res.Health["worker-1"] != "missing" || res.Health["worker-0"] != "healthy" {
			t.Errorf("events off: diagnostics %+v health %v", res.Diagnostics, res.Health)
		}
		offLat = append(offLat, res.DiagLatency.Round(time.Millisecond).String())
	}
	fmt.Fprintf(&table, "%-28s %-14s kv_events_missing after %s (timeout 5s)\n", "kv, worker-1 events off", strings.Join(offHits, ", "), strings.Join(offLat, ", "))
	t.Logf("seed experiment (%d prefixes × %d rounds, 2 workers × %d tokens):\n%s", Prefixes, Rounds, KVCapacity, table.String())
	if p := os.Getenv("KVROUTING_TABLE"); p != "" {
		_ = os.WriteFile(p, []byte(table.String()), 0o644)
	}
}

// runSeeds runs one scenario per seed, all at once, and returns their
// results in the seeds' order; the first error fails the test.
func runSeeds(t *testing.T, seeds []uint64, scenario func(seed uint64) Scenario) []Result {
	t.Helper()
	results := make([]Result, len(seeds))
	errs := make([]error, len(seeds))
	var wg sync.WaitGroup
	for i, seed := range seeds {
		wg.Go(func() { results[i], errs[i] = Run(t.Context(), scenario(seed)) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("seed %d: %v", seeds[i], err)
		}
	}
	return results
}
