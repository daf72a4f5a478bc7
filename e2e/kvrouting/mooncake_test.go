package kvrouting

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/tandemllm/tandem/bench"
	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/internal/sharedfiles"
	"github.com/tandemllm/tandem/router"
)

// mooncakeRequests turns the first n entries of a Mooncake trace into
// token-id requests: each 512-token hash id maps to a fixed run of token
// ids, so equal hash ids at equal positions share exactly those blocks (the
// trace's own definition); arrivals are divided by timeScale.
func mooncakeRequests(es []bench.TraceEntry, n int, timeScale float64) []FleetRequest {
	const traceBlock = 512
	es = es[:min(n, len(es))]
	out := make([]FleetRequest, 0, len(es))
	for _, e := range es {
		toks := make([]engine.Token, 0, e.InputLength)
		for _, h := range e.HashIDs {
			toks = append(toks, randomTokens(uint64(h)<<16|0x77, traceBlock)...)
		}
		if len(toks) > e.InputLength {
			toks = toks[:e.InputLength]
		}
		out = append(out, FleetRequest{Tokens: toks, Output: e.OutputLength,
			Arrival: time.Duration(e.Timestamp / timeScale * float64(time.Millisecond))})
	}
	return out
}

// BenchmarkMooncake replays the start of the Mooncake conversation trace
// (FAST'25, Apache-2.0) on 8 mocker workers with the seeds' Qwen3-0.6B
// timing, open loop, once per kv cost in the same run, and reports mean
// and p99 TTFT (simulated time). MOONCAKE_REQUESTS (default 1,000) and
// MOONCAKE_TIMESCALE (default 1: arrivals as recorded) size it. At
// time-scale 2 the fleet is past its KV memory: every cost preempts 300+
// times in 1,000 requests and queues for seconds (docs/benchmarks/router.md),
// which measures admission, not routing. MOONCAKE_SPEEDUP (default 10)
// divides simulated time; the simulation keeps up at 10 only on a machine
// with a core per worker to spare (run it alone, or on a larger machine).
//
//	go test -run XXX -bench Mooncake -benchtime 1x ./e2e/kvrouting
func BenchmarkMooncake(b *testing.B) {
	dir, err := sharedfiles.Dir()
	if err != nil {
		b.Skip(err)
	}
	es, err := bench.LoadMooncakeFile(filepath.Join(dir, "traces", "mooncake", "conversation_trace.jsonl"))
	if err != nil {
		b.Skip(err)
	}
	n := envInt("MOONCAKE_REQUESTS", 1000)
	scale := float64(envInt("MOONCAKE_TIMESCALE", 1))
	reqs := mooncakeRequests(es, n, scale)
	means := map[router.CostModel]time.Duration{}
	for _, cost := range []router.CostModel{router.CostDynamo, router.CostTandem, router.CostTTFT} {
		b.Run(string(cost), func(b *testing.B) {
			for range b.N {
				res, err := RunFleet(b.Context(), FleetScenario{Workers: 8, Mode: "kv", Cost: cost, Seed: 1,
					Requests: reqs, ContextLength: 131072, Speedup: float64(envInt("MOONCAKE_SPEEDUP", 10))})
				if err != nil {
					b.Fatal(err)
				}
				hi, lo := res.Share()
				means[cost] = res.Mean
				b.ReportMetric(ms(res.Mean), "ttft-mean-ms")
				b.ReportMetric(ms(res.P50), "ttft-p50-ms")
				b.ReportMetric(ms(res.P99), "ttft-p99-ms")
				b.ReportMetric(100*float64(res.CachedTokens)/float64(res.Prompts), "cached-%")
				b.ReportMetric(100*hi, "max-share-%")
				b.ReportMetric(100*lo, "min-share-%")
				b.ReportMetric(float64(res.Preemptions), "preemptions")
				b.Logf("%s: %d requests in %v; per worker %v; preemptions %v; diagnostics %d", cost, len(res.TTFTs), res.Elapsed.Round(time.Millisecond), res.PerWorker, res.PreemptionsBy, len(res.Diagnostics))
				for _, r := range res.Slowest {
					b.Logf("  slow: req %d at %v on %s: prompt %d cached %d ttft %v", r.N, r.Arrival.Round(time.Millisecond), r.Worker, r.Prompt, r.Cached, r.TTFT.Round(time.Millisecond))
				}
			}
		})
	}
	if d := means[router.CostDynamo]; d > 0 {
		fmt.Fprintf(os.Stderr, "mean TTFT ratio vs dynamo: ttft %.3f, tandem %.3f\n",
			float64(means[router.CostTTFT])/float64(d), float64(means[router.CostTandem])/float64(d))
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
