package kvrouting

import (
	"fmt"
	"testing"

	"github.com/tandemllm/tandem/router"
)

func TestScratchCosts(t *testing.T) {
	for _, sp := range []float64{4} {
		for _, conc := range []int{4, 8} {
			for _, cost := range []router.CostModel{router.CostTTFT} {
				line := ""
				for seed := uint64(1); seed <= 3; seed++ {
					res, err := Run(t.Context(), Scenario{Mode: "kv", Cost: cost, Seed: seed, Concurrency: conc, Speedup: sp})
					if err != nil {
						t.Fatal(err)
					}
					line += fmt.Sprintf(" %d(c%d/%d) %.0fms;", res.Hits, res.Computing, res.ComputingHits, float64(res.TTFTMean.Microseconds())/1000)
				}
				t.Logf("sp=%v c=%d %s: %s", sp, conc, cost, line)
			}
		}
	}
}
