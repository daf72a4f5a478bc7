package kvrouting

import (
	"fmt"
	"testing"
	"time"

	"github.com/tandemllm/tandem/router"
)

// BenchmarkCostModels compares the kv cost functions (and two load-only
// baselines) on the seed workload with concurrent clients, where Dynamo's
// cost lets load outweigh a cached prefix. Each iteration is one run with a
// new workload seed; metrics are means over the iterations. Speedup 4 keeps
// the simulated times (TTFT) close to what a GPU worker would show.
//
//	go test -run XXX -bench CostModels -benchtime 3x ./e2e/kvrouting
func BenchmarkCostModels(b *testing.B) {
	for _, pre := range []int{12, 16} {
		for _, conc := range []int{1, 4, 8} {
			for _, v := range []struct {
				mode string
				cost router.CostModel
			}{{"kv", router.CostTTFT}, {"kv", router.CostTandem}, {"kv", router.CostDynamo}, {"kv-approx", router.CostTTFT}, {"kv-approx", router.CostTandem}, {"kv-approx", router.CostDynamo}, {"least-loaded", ""}, {"round-robin", ""}} {
				name := fmt.Sprintf("prefixes=%d/clients=%d/%s", pre, conc, v.mode)
				if v.cost != "" {
					name += "/" + string(v.cost)
				}
				b.Run(name, func(b *testing.B) {
					var hits, rereq, pred, computing, away int
					var mean, p90 time.Duration
					for i := range b.N {
						res, err := Run(b.Context(), Scenario{Mode: v.mode, Cost: v.cost, Seed: uint64(i + 1), Prefixes: pre, Concurrency: conc, Speedup: 4})
						if err != nil {
							b.Fatal(err)
						}
						hits += res.Hits
						rereq += res.Rerequests
						pred += res.Predictions
						computing += res.Computing
						away += res.RoutedAway
						mean += res.TTFTMean
						p90 += res.TTFTP90
					}
					n := float64(b.N)
					b.ReportMetric(float64(hits)/n, "hits")
					b.ReportMetric(float64(rereq)/n, "rerequests")
					b.ReportMetric(float64(mean.Milliseconds())/n, "ttft-mean-ms")
					b.ReportMetric(float64(p90.Milliseconds())/n, "ttft-p90-ms")
					b.ReportMetric(float64(pred)/n, "predictions-within-1-block")
					b.ReportMetric(float64(computing)/n, "routed-while-computing")
					b.ReportMetric(float64(away)/n, "misses-routed-away")
				})
			}
		}
	}
}
