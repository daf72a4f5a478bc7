package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/tandemllm/tandem/control/planner"
	"github.com/tandemllm/tandem/control/planner/sim"
	"github.com/tandemllm/tandem/disagg"
)

// newPlannerCmd is `tandem planner`: the live loop (planner_live.go) and
// `simulate`.
func newPlannerCmd() *cobra.Command {
	c := &cobra.Command{Use: "planner", Short: "Scale prefill, decode and aggregated pools to meet TTFT and ITL targets",
		Long: "Every --interval: scrape the frontend's /metrics, predict the next interval's load, size each pool for the targets, and scale it (--dry-run: print only).",
		Args: cobra.NoArgs}
	run := newPlannerRunFlags(c)
	c.RunE = func(cmd *cobra.Command, _ []string) error { return run(cmd) }
	c.AddCommand(newPlannerSimulateCmd())
	return c
}

func newPlannerSimulateCmd() *cobra.Command {
	var (
		trace, profile    string
		speedup           float64
		disaggMode        string
		ttft, itl, q      float64
		interval, startup time.Duration
		maxReplicas       int
		dayLow            float64
	)
	c := &cobra.Command{
		Use:   "simulate",
		Short: "Replay a trace (Mooncake JSONL, or the synthetic day) through the mocker's timing model: planner vs Dynamo's formulas vs static",
		RunE: func(cmd *cobra.Command, _ []string) error {
			var tr []sim.Request
			var err error
			if trace == "" {
				tr, err = sim.Synthetic{Phases: sim.DayPhases(dayLow, 10*time.Minute), ISLMin: 1000, ISLMax: 3000, OSLMin: 100, OSLMax: 300,
					SharedPrefixes: 4, SharedBlocks: 2, HashBlock: sim.MooncakeBlock, Seed: 1}.Generate()
			} else {
				tr, err = sim.LoadMooncakeFile(trace, speedup, 131072)
			}
			if err != nil {
				return err
			}
			cfg := sim.Config{HashBlock: sim.MooncakeBlock, Disagg: disaggMode == string(disagg.Always), Startup: startup, Interval: interval,
				Targets: planner.Targets{TTFTMs: ttft, ITLMs: itl, Quantile: q}}
			prof := cfg.Worker.Profile()
			if profile != "" {
				if prof, err = planner.LoadProfile(profile); err != nil {
					return err
				}
			}
			base := sim.Scaling{Min: 1, Max: maxReplicas, DownCooldown: interval, Alpha: 0.5, Beta: 0.3, Window: 3}
			t, d := base, base
			t.Policy, t.Predictor = "tandem", "holt"
			d.Policy, d.Predictor = "dynamo", "constant"
			cmp, err := sim.Compare("simulate", tr, cfg, prof, map[string]sim.Scaling{"tandem": t, "dynamo": d}, []string{"tandem", "dynamo"})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d requests\n%s", len(tr), cmp.Table())
			return writeSimulateHTML(cmd, cmp)
		},
	}
	f := c.Flags()
	f.StringVar(&trace, "trace", "", "Mooncake JSONL trace (empty: the synthetic day, low → 5× → low in 10 minutes)")
	f.StringVar(&profile, "profile", "", "planner profile JSON (empty: derived from the mocker's qwen3-0.6b timing)")
	f.Float64Var(&speedup, "speedup", 6, "divide the trace's timestamps by this")
	disagg.AddModeFlag(f, &disaggMode)
	f.Lookup("disagg").Usage = "always (or true): prefill and decode pools; auto or never (or false): one aggregated pool (a simulated pool prices no requests)"
	f.Float64Var(&ttft, "ttft-target", 500, "TTFT target, ms")
	f.Float64Var(&itl, "itl-target", 25, "ITL target (a request's mean gap), ms")
	f.Float64Var(&q, "quantile", 0.9, "the targets' quantile (0.9 = p90, 0.99 = p99)")
	f.DurationVar(&interval, "interval", 10*time.Second, "planner interval")
	f.DurationVar(&startup, "startup", 10*time.Second, "time a new worker takes to serve")
	f.IntVar(&maxReplicas, "max", 128, "max replicas per pool")
	f.Float64Var(&dayLow, "day-low", 10, "synthetic day: the low rate, requests/s (the peak is 5×)")
	addSimulateHTMLFlag(f)
	return c
}
