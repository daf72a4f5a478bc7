package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tandemllm/tandem/bench"
	"github.com/tandemllm/tandem/nodes/serve/launch"
)

// resourceFlags are the `tandem serve` flags that change what a deployment
// uses; an experiment whose variable is one of them may compare unequal
// resources, every other experiment may not.
var resourceFlags = []string{"workers", "prefill-workers", "decode-workers", "kv-capacity-tokens", "upstream", "upstream-prefill"}

// parseServe parses `tandem serve` flags into a setup without starting it.
func parseServe(args []string) (*launch.Setup, error) {
	cmd := &cobra.Command{Use: "serve"}
	setup := newServeSetup(cmd)
	f := cmd.Flags()
	if err := f.Parse(args); err != nil {
		return nil, fmt.Errorf("serve flags %q: %w", strings.Join(args, " "), err)
	}
	if len(f.Args()) > 0 {
		return nil, fmt.Errorf("serve flags %q: stray arguments %q", strings.Join(args, " "), f.Args())
	}
	if !f.Changed("http-addr") {
		setup.Config.HTTPAddr = "127.0.0.1:0" // a fresh port per started server
	}
	return setup, nil
}

// flagArgs turns an experiment's flag map into arguments, in a fixed order.
func flagArgs(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []string
	for _, k := range keys {
		out = append(out, "--"+strings.TrimLeft(k, "-")+"="+m[k])
	}
	return out
}

// startServe starts an in-process `tandem serve` with args.
func startServe(ctx context.Context, log *slog.Logger, args []string) (string, func(), error) {
	setup, err := parseServe(args)
	if err != nil {
		return "", nil, err
	}
	return launch.Serve(ctx, log, setup)
}

// startTargets starts the --serve servers and adds them to the targets.
func (b *benchFlags) startTargets(cmd *cobra.Command, o *bench.Options) (func(), error) {
	if len(b.serve) == 0 {
		return func() {}, nil
	}
	log, err := newLogger(cmd)
	if err != nil {
		return nil, err
	}
	var stops []func()
	stopAll := func() {
		for _, s := range slices.Backward(stops) {
			s()
		}
	}
	key := b.apiKey
	for i, a := range b.serve {
		url, stop, err := startServe(cmd.Context(), log, strings.Fields(a))
		if err != nil {
			stopAll()
			return nil, fmt.Errorf("--serve %q: %w", a, err)
		}
		stops = append(stops, stop)
		label := "serve"
		if len(b.serve) > 1 {
			label = fmt.Sprintf("serve%d", i+1)
		}
		if k := len(b.urls) + i; k < len(b.labels) {
			label = b.labels[k]
		}
		o.Targets = append(o.Targets, bench.Target{URL: url, Label: label, APIKey: key, Model: b.model})
	}
	return stopAll, nil
}

// costs maps each label of the report's runs to its --cost-per-hour.
func (b *benchFlags) costs(rep *bench.Report) (map[string]float64, error) {
	if len(b.costPerHour) == 0 {
		return nil, nil
	}
	if err := b.checkCosts(); err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, res := range rep.Runs {
		if len(b.costPerHour) != 1 && len(b.costPerHour) != len(res.Labels) {
			return nil, fmt.Errorf("--cost-per-hour: %d values for %d targets (give one for all, or one per target)", len(b.costPerHour), len(res.Labels))
		}
		for i, l := range res.Labels {
			c := b.costPerHour[0]
			if len(b.costPerHour) > 1 {
				c = b.costPerHour[i]
			}
			out[l] = c
		}
	}
	return out, nil
}

// checkCosts refuses a negative, NaN or infinite --cost-per-hour.
func (b *benchFlags) checkCosts() error {
	for _, c := range b.costPerHour {
		if !(c >= 0) || math.IsInf(c, 0) {
			return fmt.Errorf("--cost-per-hour %v: want a non-negative number", c)
		}
	}
	return nil
}

func (b *benchFlags) sloValue() (bench.SLO, error) { return bench.ParseSLO(b.slo) }

func newBenchSweepCmd(b *benchFlags) *cobra.Command {
	var in, out, spec string
	var ratio float64
	var tokenIDs, honorEOS bool
	cmd := &cobra.Command{
		Use:   "sweep",
		Short: "Synthetic requests at a series of loads, prefix shares or length distributions, one run per point",
		Long: `Runs the synthetic workload once per value of --sweep: concurrency (closed loop), rate (open loop,
Poisson; rate=saturate doubles the rate from 1 req/s until the server completes less than 90% of it or,
with --slo, fewer than 90% of requests meet the SLO), prefix-ratio (share of every prompt that is one
common prefix, 0 to 1) or input (prompt-length distributions, separated by semicolons). Each point
reports goodput under --slo, TTFT/ITL/E2E, errors, the generated overlap beside the cached tokens the
server reported, and what the server's /metrics counted; the HTML report draws the curves.`,
		Example: `  tandem bench sweep --url http://127.0.0.1:8000 --sweep concurrency=1,2,4,8,16 --input 1024 --output 512 --requests 64 --slo ttft=2s,itl=50ms
  tandem bench sweep --url http://127.0.0.1:8000 --sweep rate=saturate --duration 20s --slo ttft=1s
  tandem bench sweep --url http://127.0.0.1:8000 --sweep prefix-ratio=0,0.25,0.5,0.75,1 --concurrency 4 --requests 40
  tandem bench sweep --url http://127.0.0.1:8000 --sweep 'input=uniform:512,1536;zipf:1.2,256,4096;lognormal:1024,0.6' --concurrency 4`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sw, err := bench.ParseSweep(spec)
			if err != nil {
				return err
			}
			if sw.SLO, err = b.sloValue(); err != nil {
				return err
			}
			wl, err := b.synthetic(in, out, ratio, tokenIDs, honorEOS)
			if err != nil {
				return err
			}
			if err := wl.Validate(); err != nil {
				return err
			}
			o, err := b.options(cmd, 50)
			if err != nil {
				return err
			}
			stop, err := b.startTargets(cmd, &o)
			if err != nil {
				return err
			}
			defer stop()
			runs, err := bench.RunSweep(cmd.Context(), wl, o, sw)
			if err != nil {
				return err
			}
			return b.finish(cmd, bench.NewReport("sweep", runs, bench.DefaultHitCriteria()))
		},
	}
	f := cmd.Flags()
	f.StringVar(&spec, "sweep", "concurrency=1,2,4,8", "VARIABLE=VALUES: concurrency=1,2,4 | rate=1,5,10 | rate=saturate[:FROM] | prefix-ratio=0,0.5,1 | input=DIST;DIST")
	f.StringVar(&in, "input", "1024", "prompt length in words (≈ tokens), as for synthetic (the seed's sweep: 1,024)")
	f.StringVar(&out, "output", "512", "max_tokens (the seed's sweep: 512)")
	f.Float64Var(&ratio, "prefix-ratio", 0, "fraction of every prompt that is one shared prefix (when the sweep is not over it)")
	f.BoolVar(&tokenIDs, "token-ids", false, "completions endpoint: send prompts as token ids (exact lengths)")
	bench.AddHonorEOSFlag(f, &honorEOS)
	return cmd
}

func newBenchDatasetCmd(b *benchFlags) *cobra.Command {
	var file string
	var defOut int
	var honorEOS bool
	cmd := &cobra.Command{
		Use:   "dataset",
		Short: "Requests from a JSONL file of prompts or chats",
		Long: `Each line of --file is a JSON object with either "prompt" (a string, sent to /v1/completions) or
"messages" (an OpenAI chat, sent to /v1/chat/completions), and optionally "max_tokens". Lines are sent
in order and, with --requests beyond the file's length, again from the top.`,
		Example: `  tandem bench dataset --url http://127.0.0.1:8000 --file prompts.jsonl --concurrency 8 --requests 200`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return errors.New("--file is required")
			}
			fh, err := os.Open(file)
			if err != nil {
				return err
			}
			defer fh.Close()
			items, err := bench.LoadDataset(fh)
			if err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			wl := &bench.Dataset{Items: items, DefaultMaxTokens: defOut, IgnoreEOS: !honorEOS}
			return b.runSingle(cmd, wl, len(items), nil)
		},
	}
	f := cmd.Flags()
	f.StringVar(&file, "file", "", "JSONL dataset")
	f.IntVar(&defOut, "output", 128, "max_tokens for lines without their own")
	bench.AddHonorEOSFlag(f, &honorEOS)
	return cmd
}

func newBenchExperimentCmd(b *benchFlags) *cobra.Command {
	var trials int
	cmd := &cobra.Command{
		Use:   "experiment FILE",
		Short: "One-variable experiment: variants at equal resources, interleaved trials, 95% intervals, break-even verdict",
		Long: `Reads a YAML experiment: a base deployment (serve: flags of an in-process 'tandem serve' that bench
starts, or url: a running server), the one variable that changes and its values, the workload, the SLO
and the costs. Refuses a file that changes two things, and variants with unequal resources unless the
variable is a resource (workers, prefill-workers, decode-workers, kv-capacity-tokens). Runs --trials
trials (default: the file's, else 3) in interleaved order, a fresh server per started variant and
trial, and reports every figure as mean ± 95% confidence interval (Student's t over trials) and the
break-even verdict: a variant pays when its goodput ÷ the first variant's is above its cost ÷ the
first's, the whole interval above it.`,
		Example: `  tandem bench experiment docs/benchmarks/experiments/disagg-never-vs-auto.yaml --out /tmp/exp`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			fh, err := os.Open(args[0])
			if err != nil {
				return err
			}
			spec, err := bench.ParseExperiment(fh)
			fh.Close()
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			if cmd.Flags().Changed("trials") {
				spec.Trials = trials
			}
			plans, err := spec.Plan(func(m map[string]string) (map[string]float64, error) {
				s, err := parseServe(flagArgs(m))
				if err != nil {
					return nil, err
				}
				return s.Resources(), nil
			}, resourceFlags)
			if err != nil {
				return err
			}
			slo, err := bench.ParseSLO(spec.SLO)
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("slo") {
				if slo, err = b.sloValue(); err != nil {
					return err
				}
			}
			seed := spec.Seed
			if seed == 0 {
				seed = b.seed
			}
			wl, wo, err := spec.Workload.Build(seed)
			if err != nil {
				return err
			}
			o, err := b.options(cmd, 0)
			if err != nil {
				return err
			}
			o.Concurrency, o.Rate, o.Requests, o.Duration, o.Warmup = wo.Concurrency, wo.Rate, wo.Requests, wo.Duration, wo.Warmup
			if len(o.Targets) > 0 || len(b.serve) > 0 {
				return errors.New("experiment: the file names the deployments; drop --url and --serve")
			}
			key := b.apiKey
			if key == "" {
				key = os.Getenv("OPENAI_API_KEY")
			}
			o.Targets = []bench.Target{{APIKey: key, Model: b.model}}
			log, err := newLogger(cmd)
			if err != nil {
				return err
			}
			start := func(ctx context.Context, m map[string]string) (string, func(), error) {
				return startServe(ctx, log, flagArgs(m))
			}
			name, _ := spec.VariableName()
			t0 := time.Now()
			runs := bench.RunExperiment(cmd.Context(), wl, o, plans, spec.Trials, start)
			rep := bench.NewReport("experiment", runs, bench.DefaultHitCriteria())
			rep.Title = "tandem bench experiment " + spec.Name
			costs := map[string]float64{}
			for _, p := range plans {
				costs[p.Name] = p.CostPerHour
			}
			rep.ApplySLO(slo, costs)
			rep.Experiment = bench.Analyze(spec.Name, name, plans, runs, slo)
			b.slo, b.costPerHour = "", nil // finish must not apply them again
			err = b.finish(cmd, rep)
			fmt.Fprintf(cmd.ErrOrStderr(), "experiment took %s\n", time.Since(t0).Round(time.Second))
			return err
		},
	}
	cmd.Flags().IntVar(&trials, "trials", 3, "trials per variant (overrides the file's trials)")
	return cmd
}

func newBenchCompareCmd(b *benchFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "compare DIR_A DIR_B",
		Short: "Compare two saved runs (--out directories): mean ± 95% CI over their runs, ratio and break-even verdict",
		Long: `Loads two report directories and compares the first target of each, every run of a directory
counting as one trial: each figure as mean ± 95% confidence interval, and the goodput ratio B/A
against the cost ratio (--cost-per-hour A,B) for the break-even verdict. --slo re-judges both.`,
		Example: `  tandem bench compare /tmp/agg /tmp/disagg --slo ttft=500ms --cost-per-hour 2,2.5`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := bench.LoadReport(args[0])
			if err != nil {
				return err
			}
			bb, err := bench.LoadReport(args[1])
			if err != nil {
				return err
			}
			slo := a.SLO
			if cmd.Flags().Changed("slo") {
				if slo, err = b.sloValue(); err != nil {
					return err
				}
			}
			if err := b.checkCosts(); err != nil {
				return err
			}
			var ca, cb float64
			switch len(b.costPerHour) {
			case 0:
			case 1:
				ca, cb = b.costPerHour[0], b.costPerHour[0]
			case 2:
				ca, cb = b.costPerHour[0], b.costPerHour[1]
			default:
				return errors.New("--cost-per-hour: give one value, or A,B")
			}
			x, err := bench.CompareReports(a, bb, slo, ca, cb)
			if err != nil {
				return err
			}
			rep := &bench.Report{Title: "tandem bench compare " + args[0] + " " + args[1], Scenario: "compare", Created: time.Now(), Experiment: x, SLO: slo}
			rep.Command = "tandem " + strings.Join(os.Args[1:], " ")
			if err := rep.WriteText(cmd.OutOrStdout()); err != nil {
				return err
			}
			if b.out != "" {
				if err := rep.WriteDir(b.out); err != nil {
					return err
				}
			}
			return nil
		},
	}
	return cmd
}
