package sim

import (
	"os"
	"testing"
	"time"

	"github.com/tandemllm/tandem/internal/sharedfiles"
	"github.com/tandemllm/tandem/planner"
)

func experimentConfig(disagg bool) Config {
	return Config{
		Worker:    WorkerSpec{},
		HashBlock: MooncakeBlock,
		Disagg:    disagg,
		Startup:   10 * time.Second,
		Interval:  10 * time.Second,
		Targets:   planner.Targets{TTFTMs: 500, ITLMs: 25, Quantile: 0.9},
	}
}

func plans() (map[string]Scaling, []string) {
	base := Scaling{Min: 1, Max: 128, DownCooldown: 10 * time.Second, Alpha: 0.5, Beta: 0.3, Window: 3}
	t := base
	t.Policy, t.Predictor = "tandem", "holt"
	d := base
	d.Policy, d.Predictor = "dynamo", "constant"
	dh := base
	dh.Policy, dh.Predictor = "dynamo", "holt"
	return map[string]Scaling{"tandem": t, "dynamo": d, "dynamo+holt": dh}, []string{"tandem", "dynamo", "dynamo+holt"}
}

func TestExperimentDay(t *testing.T) {
	if os.Getenv("TANDEM_PLANNER_EXPERIMENTS") == "" {
		t.Skip("set TANDEM_PLANNER_EXPERIMENTS=1")
	}
	tr, err := Synthetic{Phases: DayPhases(10, 10*time.Minute), ISLMin: 1000, ISLMax: 3000, OSLMin: 100, OSLMax: 300,
		SharedPrefixes: 4, SharedBlocks: 2, HashBlock: MooncakeBlock, Seed: 1}.Generate()
	if err != nil {
		t.Fatal(err)
	}
	for _, dis := range []bool{false, true} {
		cfg := experimentConfig(dis)
		pl, order := plans()
		c, err := Compare("day", tr, cfg, cfg.Worker.Profile(), pl, order)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("disagg=%v %d requests\n%s", dis, len(tr), c.Table())
	}
}

func TestExperimentMooncake(t *testing.T) {
	if os.Getenv("TANDEM_PLANNER_EXPERIMENTS") == "" {
		t.Skip("set TANDEM_PLANNER_EXPERIMENTS=1")
	}
	path, err := sharedfiles.Path("traces", "mooncake", "conversation_trace.jsonl")
	if err != nil {
		t.Skip(err)
	}
	tr, err := LoadMooncakeFile(path, 6, 131072)
	if err != nil {
		t.Fatal(err)
	}
	cfg := experimentConfig(true)
	cfg.Targets.TTFTMs = 3000
	pl, order := plans()
	c, err := Compare("mooncake", tr, cfg, cfg.Worker.Profile(), pl, order)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d requests\n%s", len(tr), c.Table())
}
