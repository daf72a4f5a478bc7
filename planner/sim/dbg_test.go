package sim

import (
	"testing"
	"time"

	"github.com/tandemllm/tandem/planner"
)

func TestDbg(t *testing.T) {
	tr := []Request{{At: 0, ISL: 2000, OSL: 100}, {At: 0.05, ISL: 2000, OSL: 100}}
	cfg := Config{Interval: time.Second, Targets: planner.Targets{TTFTMs: 500, ITLMs: 25, Quantile: 0.9}, Static: map[string]int{"agg": 1}}
	r, err := Run(tr, cfg)
	t.Logf("%+v %v", r, err)
	tr2, _ := Synthetic{Phases: DayPhases(4, 10*time.Minute), ISLMin: 1000, ISLMax: 3000, OSLMin: 100, OSLMax: 300}.Generate()
	for _, n := range []int{5, 10, 20, 40} {
		cfg.Static["agg"] = n
		r, _ = Run(tr2, cfg)
		t.Logf("n=%d att %.3f ttft %.1f itl %.1f", n, r.Attainment, r.TTFTp, r.ITLp)
	}
}
