package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tandemllm/tandem/bench"
	"github.com/tandemllm/tandem/engine/mocker"
	"github.com/tandemllm/tandem/nodes/serve/launch"
)

// benchFlags are the flags every bench workload shares: targets, load
// shape and output.
type benchFlags struct {
	urls, labels []string
	apiKey       string
	model        string
	endpoint     string
	noStream     bool
	concurrency  int
	rate         float64
	duration     time.Duration
	requests     int
	timeout      time.Duration
	order        string
	maxInFlight  int
	warmup       int
	seed         uint64
	workerHeader string
	out          string
	progress     string
	slo          string
	costPerHour  []float64
	scrapeEvery  time.Duration
	serve        []string
}

func (b *benchFlags) register(f *pflag.FlagSet) {
	f.StringArrayVar(&b.urls, "url", nil, "base URL of an OpenAI-compatible server (repeat for an A/B run: every request goes to each, interleaved)")
	f.StringArrayVar(&b.labels, "label", nil, "name of the --url of the same position in reports (default A, B, ...)")
	f.StringVar(&b.apiKey, "api-key", "", "API key sent as a bearer token (default $OPENAI_API_KEY)")
	f.StringVar(&b.model, "model", "", "model to request (default: the first of GET /v1/models)")
	f.StringVar(&b.endpoint, "endpoint", "chat", "API: chat (/v1/chat/completions) or completions (/v1/completions)")
	f.BoolVar(&b.noStream, "no-stream", false, "send non-streaming requests (no TTFT or ITL)")
	f.IntVar(&b.concurrency, "concurrency", 0, "closed loop: requests (sessions) in flight (default 1; a trace defaults to its timestamps)")
	f.Float64Var(&b.rate, "rate", 0, "open loop: Poisson arrivals per second per target (latency counts from the scheduled time)")
	f.DurationVar(&b.duration, "duration", 0, "stop starting requests after this long")
	f.IntVar(&b.requests, "requests", 0, "stop after this many requests per target (conversations for multi-turn)")
	f.DurationVar(&b.timeout, "timeout", 10*time.Minute, "per-request timeout (a timed-out request is an error)")
	f.StringVar(&b.order, "order", "alternate", "with several --url in a closed loop: alternate (one target after the other, order rotating) or parallel (all at once)")
	f.IntVar(&b.maxInFlight, "max-inflight", 0, "open loop: most requests in flight (0: no bound); waiting for a slot counts as latency")
	f.IntVar(&b.warmup, "warmup", 0, "unrecorded requests per target before measuring (synthetic and frontend-overhead)")
	f.Uint64Var(&b.seed, "seed", 1, "seed of prompts, lengths and arrivals (the same seed sends the same requests)")
	f.StringVar(&b.workerHeader, "worker-header", bench.DefaultWorkerHeader, "response header naming the worker that served a request")
	f.StringVar(&b.out, "out", "", "directory for records.jsonl, records.csv, summary.json and report.html")
	f.StringVar(&b.progress, "progress", "auto", "progress display on stderr: auto, bar, plain or off")
	f.StringVar(&b.slo, "slo", "", "latency SLO for goodput: ttft=500ms,itl=50ms,e2e=10s (any subset; itl bounds a request's mean gap)")
	f.Float64SliceVar(&b.costPerHour, "cost-per-hour", nil, "hourly cost of the deployment (one for all targets, or one per target): reports the cost per million output tokens delivered within the SLO")
	f.DurationVar(&b.scrapeEvery, "scrape-every", time.Second, "poll each target's /metrics this often during a run (cache hits, evictions, queues, transfers, disagg decisions; 0: off)")
	f.StringArrayVar(&b.serve, "serve", nil, "start an in-process 'tandem serve' with these flags as a target (e.g. --serve '--workers 2 --timing qwen3-0.6b'; repeat for an A/B run)")
}

func (b *benchFlags) targets() ([]bench.Target, error) {
	if len(b.labels) > len(b.urls)+len(b.serve) {
		return nil, fmt.Errorf("%d --label values for %d --url and --serve values", len(b.labels), len(b.urls)+len(b.serve))
	}
	key := b.apiKey
	if key == "" {
		key = os.Getenv("OPENAI_API_KEY")
	}
	var ts []bench.Target
	for i, u := range b.urls {
		t := bench.Target{URL: u, APIKey: key, Model: b.model}
		if i < len(b.labels) {
			t.Label = b.labels[i]
		}
		ts = append(ts, t)
	}
	return ts, nil
}

// options turns the flags into run options; defRequests bounds a run that
// gave neither --requests nor --duration.
func (b *benchFlags) options(cmd *cobra.Command, defRequests int) (bench.Options, error) {
	ts, err := b.targets()
	if err != nil {
		return bench.Options{}, err
	}
	o := bench.Options{Targets: ts, Concurrency: b.concurrency, Rate: b.rate, Duration: b.duration, Requests: b.requests,
		NoStream: b.noStream, Timeout: b.timeout, Order: bench.Order(b.order), MaxInFlight: b.maxInFlight, Warmup: b.warmup,
		Seed: b.seed, WorkerHeader: b.workerHeader, ScrapeEvery: b.scrapeEvery}
	if b.scrapeEvery < 0 {
		return o, errors.New("--scrape-every must not be negative")
	}
	if o.Requests == 0 && o.Duration == 0 {
		o.Requests = defRequests
	}
	switch b.progress {
	case "auto":
		o.Progress = &bench.Progress{W: cmd.ErrOrStderr(), Interactive: isTerminal(cmd.ErrOrStderr())}
	case "bar":
		o.Progress = &bench.Progress{W: cmd.ErrOrStderr(), Interactive: true}
	case "plain":
		o.Progress = &bench.Progress{W: cmd.ErrOrStderr()}
	case "off":
	default:
		return o, fmt.Errorf("--progress must be auto, bar, plain or off, not %q", b.progress)
	}
	return o, nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && bench.IsTerminal(f)
}

func (b *benchFlags) endpointValue() (bench.Endpoint, error) { return bench.ParseEndpoint(b.endpoint) }

// synthetic builds the synthetic workload from its flags; `bench synthetic`
// and the sweeps share it.
func (b *benchFlags) synthetic(in, out string, ratio float64, tokenIDs, honorEOS bool) (*bench.Synthetic, error) {
	ds, err := parseDists(map[string]string{"input": in, "output": out})
	if err != nil {
		return nil, err
	}
	ep, err := b.endpointValue()
	if err != nil {
		return nil, err
	}
	return &bench.Synthetic{Endpoint: ep, Input: ds["input"], Output: ds["output"], PrefixRatio: ratio, TokenIDs: tokenIDs,
		IgnoreEOS: !honorEOS, Seed: b.seed}, nil
}

// finish prints the report, writes the report directory, and fails when
// nothing succeeded (so scripts notice a dead target).
// validator is implemented by every workload: its settings are checked
// before any request is sent.
type validator interface{ Validate() error }

// runSingle runs one workload against the targets and reports it; tune, if
// not nil, adjusts the run options first.
func (b *benchFlags) runSingle(cmd *cobra.Command, wl interface {
	bench.Workload
	validator
}, defaultRequests int, tune func(*bench.Options)) error {
	if err := wl.Validate(); err != nil {
		return err
	}
	o, err := b.options(cmd, defaultRequests)
	if err != nil {
		return err
	}
	if tune != nil {
		tune(&o)
	}
	stop, err := b.startTargets(cmd, &o)
	if err != nil {
		return err
	}
	defer stop()
	res, err := bench.Run(cmd.Context(), wl, o)
	if err != nil {
		return err
	}
	return b.finish(cmd, bench.NewReport(wl.Name(), []*bench.Result{res}, bench.DefaultHitCriteria()))
}

func (b *benchFlags) finish(cmd *cobra.Command, rep *bench.Report) error {
	rep.Command = "tandem " + strings.Join(os.Args[1:], " ")
	rep.Settings = settings(cmd)
	if b.slo != "" || len(b.costPerHour) > 0 {
		slo, err := b.sloValue()
		if err != nil {
			return err
		}
		costs, err := b.costs(rep)
		if err != nil {
			return err
		}
		rep.ApplySLO(slo, costs)
	}
	if err := rep.WriteText(cmd.OutOrStdout()); err != nil {
		return err
	}
	warnScrapes(cmd.ErrOrStderr(), rep)
	if b.out != "" {
		if err := rep.WriteDir(b.out); err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "\nwrote %s\n", filepath.Join(b.out, bench.FileHTML))
	}
	ok, sent := 0, 0
	for _, s := range rep.Summaries {
		ok, sent = ok+s.OK, sent+s.Requests
	}
	if ok == 0 {
		return fmt.Errorf("no request succeeded (%d sent)", sent)
	}
	return nil
}

// settings lists every flag with its value for the report, the API key
// masked.
func settings(cmd *cobra.Command) []bench.Setting {
	var out []bench.Setting
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Name == "help" {
			return
		}
		v := f.Value.String()
		if f.Name == "api-key" && v != "" {
			v = "(set)"
		}
		out = append(out, bench.Setting{Name: "--" + f.Name, Value: v})
	})
	return out
}

func newBenchCmd() *cobra.Command {
	var b benchFlags
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Load generator and benchmark reports for any OpenAI-compatible endpoint",
		Long: `Drives load against OpenAI-compatible servers (Tandem or any other) and reports TTFT,
inter-token latency, end-to-end latency, throughput, errors, prefix-cache hits and the worker
that served each request. Several --url values make an A/B run: every request goes to each
target in one interleaved run, and the summary shows their ratios.

Closed loop with --concurrency, open loop with --rate (Poisson; latency counts from the
scheduled send time). --out DIR writes the per-request records (JSONL, CSV), a summary JSON
and a self-contained HTML report with charts.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	b.register(cmd.PersistentFlags())
	cmd.AddCommand(newBenchSyntheticCmd(&b), newBenchMultiTurnCmd(&b), newBenchPrefixReuseCmd(&b),
		newBenchOverheadCmd(&b), newBenchTraceCmd(&b), newBenchDisaggTTFTCmd(&b), newBenchSweepCmd(&b), newBenchDatasetCmd(&b),
		newBenchExperimentCmd(&b), newBenchCompareCmd(&b), newBenchProfileCmd(&b))
	return cmd
}

func parseDists(specs map[string]string) (map[string]bench.Dist, error) {
	out := map[string]bench.Dist{}
	for name, s := range specs {
		d, err := bench.ParseDist(s)
		if err != nil {
			return nil, fmt.Errorf("--%s: %w", name, err)
		}
		out[name] = d
	}
	return out, nil
}

func newBenchSyntheticCmd(b *benchFlags) *cobra.Command {
	var in, out string
	var ratio float64
	var tokenIDs, honorEOS bool
	cmd := &cobra.Command{
		Use:   "synthetic",
		Short: "Independent requests with input/output lengths from distributions and an optional shared prefix",
		Example: `  tandem bench synthetic --url http://127.0.0.1:8000 --concurrency 16 --requests 500
  tandem bench synthetic --url http://127.0.0.1:8000 --rate 50 --duration 60s --input lognormal:1000,0.6 --output uniform:64,256 --out /tmp/run
  tandem bench synthetic --url http://a:8000 --label vllm --url http://b:8000 --label tandem --concurrency 8 --requests 300 --out /tmp/ab`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			wl, err := b.synthetic(in, out, ratio, tokenIDs, honorEOS)
			if err != nil {
				return err
			}
			return b.runSingle(cmd, wl, 100, nil)
		},
	}
	f := cmd.Flags()
	f.StringVar(&in, "input", "512", "prompt length in words (≈ tokens): N, fixed:N, uniform:LO,HI, normal:MEAN,SD or lognormal:MEAN,SIGMA")
	f.StringVar(&out, "output", "128", "max_tokens, same forms as --input")
	f.Float64Var(&ratio, "prefix-ratio", 0, "fraction of every prompt that is one prefix shared by all requests")
	f.BoolVar(&tokenIDs, "token-ids", false, "completions endpoint: send prompts as token ids (exact lengths)")
	bench.AddHonorEOSFlag(f, &honorEOS)
	return cmd
}

func newBenchMultiTurnCmd(b *benchFlags) *cobra.Command {
	var turns, first, in, out string
	var system int
	var think time.Duration
	var honorEOS bool
	cmd := &cobra.Command{
		Use:     "multi-turn",
		Short:   "Chat conversations: each turn resends the history plus a new user message",
		Example: `  tandem bench multi-turn --url http://127.0.0.1:8000 --concurrency 8 --requests 40 --turns uniform:2,6 --think 1s`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ds, err := parseDists(map[string]string{"turns": turns, "first-input": first, "input": in, "output": out})
			if err != nil {
				return err
			}
			wl := &bench.MultiTurn{Turns: ds["turns"], FirstInput: ds["first-input"], Input: ds["input"], Output: ds["output"],
				SystemWords: system, Think: think, IgnoreEOS: !honorEOS, Seed: b.seed}
			return b.runSingle(cmd, wl, 20, nil)
		},
	}
	f := cmd.Flags()
	f.StringVar(&turns, "turns", "4", "turns per conversation (a length distribution)")
	f.StringVar(&first, "first-input", "256", "words in the first user message")
	f.StringVar(&in, "input", "64", "words in each later user message")
	f.StringVar(&out, "output", "128", "max_tokens per turn")
	f.IntVar(&system, "system-words", 0, "words of a system prompt shared by every conversation")
	f.DurationVar(&think, "think", 0, "pause between a reply and the next turn")
	bench.AddHonorEOSFlag(f, &honorEOS)
	return cmd
}

func newBenchPrefixReuseCmd(b *benchFlags) *cobra.Command {
	wl := bench.DefaultPrefixReuse()
	crit := bench.DefaultHitCriteria()
	var modes string
	var startServer bool
	var runs, workers, capacity int
	var speedup float64
	cmd := &cobra.Command{
		Use:   "prefix-reuse",
		Short: "The seed's router test: repeated long prefixes, hits judged by TTFT and cached_tokens",
		Long: `Sends --prefixes synthetic prefixes of --prefix-words words --rounds times, each round in a new
shuffled order, every request ending in --tail-words words of its own, one at a time. Every
request after a prefix's first is a re-request; it is a hit when its TTFT is below --ttft-frac of
the prefix's first request's, and (separately) when the server's cached_tokens covers at least
--cached-frac of the prompt.

Against a running server (--url) it reports that server's hits. With --start-server and
--modes it starts an in-process Tandem per router mode (2 mocker workers calibrated to the
seed's GPU: 14,816 tokens of KV each, ~80 ms miss, ~15 ms hit TTFT), --runs times, and prints
the per-mode table. A mode the router does not support is an error row.`,
		Example: `  tandem bench prefix-reuse --url http://127.0.0.1:8000
  tandem bench prefix-reuse --start-server --modes kv,kv-approx,round-robin,random --runs 3 --out /tmp/prefix`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ep, err := b.endpointValue()
			if err != nil {
				return err
			}
			wl.Endpoint, wl.Seed = ep, b.seed
			if err := wl.Validate(); err != nil {
				return err
			}
			o, err := b.options(cmd, 0)
			if err != nil {
				return err
			}
			o.Requests = 0
			var results []*bench.Result
			switch {
			case startServer:
				if len(b.urls) > 0 || len(b.serve) > 0 {
					return errors.New("--start-server starts its own servers: drop --url and --serve")
				}
				log, err := newLogger(cmd)
				if err != nil {
					return err
				}
				start := benchServerStarter(log, workers, capacity, speedup)
				if results, err = bench.RunModes(cmd.Context(), wl, o, splitList(modes), runs, start); err != nil {
					return err
				}
			case cmd.Flags().Changed("modes"):
				return errors.New("--modes needs --start-server (against a running server, label it with --label)")
			default:
				for run := 1; run <= max(runs, 1); run++ {
					o.Run = run
					rw := wl
					rw.Seed += uint64(run - 1) // fresh prefixes: the server's cache is warm from the last run
					res, err := bench.Run(cmd.Context(), &rw, o)
					if err != nil {
						return err
					}
					results = append(results, res)
				}
			}
			return b.finish(cmd, bench.NewReport(bench.ScenarioPrefixReuse, results, crit))
		},
	}
	f := cmd.Flags()
	f.IntVar(&wl.Prefixes, "prefixes", wl.Prefixes, "number of distinct prefixes")
	f.IntVar(&wl.PrefixWords, "prefix-words", wl.PrefixWords, "words (≈ tokens) per prefix")
	f.IntVar(&wl.Rounds, "rounds", wl.Rounds, "times each prefix is sent")
	f.IntVar(&wl.TailWords, "tail-words", wl.TailWords, "words that differ in every request, after the prefix")
	f.IntVar(&wl.Output, "output", wl.Output, "max_tokens per request")
	f.Float64Var(&crit.TTFTFrac, "ttft-frac", crit.TTFTFrac, "a hit's TTFT is below this fraction of the prefix's first request's")
	f.Float64Var(&crit.CachedFrac, "cached-frac", crit.CachedFrac, "a hit's cached_tokens is at least this fraction of its prompt")
	f.IntVar(&runs, "runs", 1, "repetitions (each with fresh prefixes; with --start-server, a fresh server)")
	f.BoolVar(&startServer, "start-server", false, "start an in-process Tandem per --modes value instead of using --url")
	f.StringVar(&modes, "modes", "kv,kv-approx,round-robin,random", "router modes to compare (with --start-server)")
	f.IntVar(&workers, "workers", 2, "workers of each started server")
	f.IntVar(&capacity, "kv-capacity-tokens", mocker.SeedKVCapacityTokens, "KV capacity per worker of started servers, in tokens")
	f.Float64Var(&speedup, "speedup", 1, "started servers: divide the mocker's simulated times by this")
	return cmd
}

// benchServerStarter starts the servers of `bench prefix-reuse
// --start-server`.
var benchServerStarter = launch.ModeStarter

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func newBenchOverheadCmd(b *benchFlags) *cobra.Command {
	var in, out, levels string
	cmd := &cobra.Command{
		Use:   "frontend-overhead",
		Short: "The seed's frontend test: the same requests straight to a worker and through the frontend, interleaved",
		Long: `Give two --url values: first the worker's own OpenAI endpoint, then the frontend in front of
it. The same-shaped requests (prompts salted per target, so neither is served from the other's
cache) alternate between them at each --levels concurrency; the report shows what the frontend
adds to TTFT and E2E, and both throughputs. --requests counts requests per target per level.`,
		Example: `  tandem worker --openai-addr 127.0.0.1:8001 &
  tandem bench frontend-overhead --url http://127.0.0.1:8001 --label direct --url http://127.0.0.1:8000 --label frontend --levels 1,8,32 --out /tmp/overhead`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ds, err := parseDists(map[string]string{"input": in, "output": out})
			if err != nil {
				return err
			}
			ep, err := b.endpointValue()
			if err != nil {
				return err
			}
			var ls []int
			for _, p := range splitList(levels) {
				n, err := strconv.Atoi(p)
				if err != nil || n < 1 {
					return fmt.Errorf("--levels: %q is not a positive integer", p)
				}
				ls = append(ls, n)
			}
			if len(b.serve) > 0 {
				return errors.New("frontend-overhead compares a worker with the frontend in front of it: give both as --url")
			}
			if len(b.urls) != 2 {
				return fmt.Errorf("frontend-overhead needs exactly two --url values (the worker's, then the frontend's), got %d", len(b.urls))
			}
			if len(b.labels) == 0 {
				b.labels = []string{"direct", "frontend"}
			}
			o, err := b.options(cmd, 100)
			if err != nil {
				return err
			}
			wl := bench.Synthetic{Endpoint: ep, Input: ds["input"], Output: ds["output"], IgnoreEOS: true, Seed: b.seed}
			if err := wl.Validate(); err != nil {
				return err
			}
			results, err := bench.RunOverhead(cmd.Context(), wl, o, ls)
			if err != nil {
				return err
			}
			return b.finish(cmd, bench.NewReport(bench.ScenarioFrontendOverhead, results, bench.DefaultHitCriteria()))
		},
	}
	f := cmd.Flags()
	f.StringVar(&in, "input", "512", "prompt length in words (the seed: 512 tokens)")
	f.StringVar(&out, "output", "128", "max_tokens (the seed: 128)")
	f.StringVar(&levels, "levels", "1", "comma-separated concurrency levels (the seed: 1,8,32)")
	return cmd
}

func newBenchTraceCmd(b *benchFlags) *cobra.Command {
	tr := bench.Trace{BlockSize: 512, Prompt: bench.TraceIDs}
	var file, prompt string
	var speedup float64
	var honorEOS bool
	cmd := &cobra.Command{
		Use:   "trace",
		Short: "Replay a Mooncake JSONL trace at its timestamps, prompts built from its hash ids",
		Long: `Replays a Mooncake (FAST'25) trace: each line's timestamp (ms), input_length, output_length and
hash_ids (one per 512-token block). Each hash id maps to a fixed run of token ids, so requests
with equal hash ids share exactly those blocks; prompts go to /v1/completions as token ids
(--prompt ids, exact) or as words (--prompt words: one word per token, exact on o200k-family
tokenizers, approximate on others). Arrivals follow the timestamps divided by --speedup, unless
--rate or --concurrency is given. --requests replays the first N lines.`,
		Example: `  tandem bench trace --file conversation_trace.jsonl --url http://127.0.0.1:8000 --speedup 10 --requests 1000 --max-input 30000 --out /tmp/trace`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return errors.New("--file is required")
			}
			es, err := bench.LoadMooncakeFile(file)
			if err != nil {
				return err
			}
			tr.Entries, tr.Prompt, tr.IgnoreEOS, tr.Seed = es, bench.TracePrompt(prompt), !honorEOS, b.seed
			return b.runSingle(cmd, &tr, 0, func(o *bench.Options) { o.Speedup = speedup })
		},
	}
	f := cmd.Flags()
	f.StringVar(&file, "file", "", "Mooncake JSONL trace")
	f.StringVar(&prompt, "prompt", string(bench.TraceIDs), "prompt content: ids (token ids, exact) or words")
	f.IntVar(&tr.BlockSize, "block-size", tr.BlockSize, "tokens per hash id (Mooncake: 512)")
	f.IntVar(&tr.MaxInput, "max-input", 0, "truncate prompts to this many tokens, keeping leading blocks (0: none)")
	f.IntVar(&tr.MaxOutput, "max-output", 0, "cap max_tokens (0: the trace's)")
	f.IntVar(&tr.Vocab.Lo, "vocab-lo", 1000, "smallest token id in token-id prompts")
	f.IntVar(&tr.Vocab.Hi, "vocab-hi", 30000, "token ids in prompts are below this")
	f.Float64Var(&speedup, "speedup", 1, "divide the trace's timestamps by this")
	bench.AddHonorEOSFlag(f, &honorEOS)
	return cmd
}

func newBenchDisaggTTFTCmd(b *benchFlags) *cobra.Command {
	wl := bench.DefaultDisaggTTFT()
	cmd := &cobra.Command{
		Use:   "disagg-ttft",
		Short: "Does disaggregated prefill pay? TTFT of shared-prefix and fresh long prompts on several servers",
		Long: `Sends, --rounds times, --prefixes prompts of --prefix-words shared words plus a --tail-words tail
that changes every round (mostly cached: shipping KV should not pay) and one fresh prompt per
--long-words value (nothing cached anywhere: link speed decides), one at a time, to every --url
interleaved: typically an aggregated server, one with --disagg auto and one with --disagg always.
Prints TTFT p50/p99 per prompt case and target with the ratio to the first --url (round 1, which
fills the caches, is left out), then the usual summary.`,
		Example: `  tandem bench disagg-ttft --url http://127.0.0.1:8000 --label aggregated \
    --url http://127.0.0.1:8001 --label auto --url http://127.0.0.1:8002 --label always`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(b.urls)+len(b.serve) == 0 {
				return errors.New("disagg-ttft needs --url or --serve (one per configuration: the first is the baseline)")
			}
			ep, err := b.endpointValue()
			if err != nil {
				return err
			}
			if !cmd.Flags().Changed("endpoint") {
				ep = bench.Completions // no chat template between words and tokens
			}
			wl.Endpoint, wl.Seed = ep, b.seed
			if err := wl.Validate(); err != nil {
				return err
			}
			o, err := b.options(cmd, 0)
			if err != nil {
				return err
			}
			o.Requests = 0
			if o.Concurrency == 0 && o.Rate == 0 {
				o.Concurrency = 1 // TTFT without queueing behind our own requests
			}
			stop, err := b.startTargets(cmd, &o)
			if err != nil {
				return err
			}
			defer stop()
			res, err := bench.Run(cmd.Context(), &wl, o)
			if err != nil {
				return err
			}
			if err := bench.WriteDisaggTable(cmd.OutOrStdout(), wl.DisaggTable(res)); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout())
			return b.finish(cmd, bench.NewReport(bench.ScenarioDisaggTTFT, []*bench.Result{res}, bench.DefaultHitCriteria()))
		},
	}
	f := cmd.Flags()
	f.IntVar(&wl.Rounds, "rounds", wl.Rounds, "times the prompt set is sent")
	f.IntVar(&wl.Prefixes, "prefixes", wl.Prefixes, "shared prefixes per round")
	f.IntVar(&wl.PrefixWords, "prefix-words", wl.PrefixWords, "words (≈ tokens) per shared prefix")
	f.IntVar(&wl.TailWords, "tail-words", wl.TailWords, "words after the prefix that change every round")
	f.IntSliceVar(&wl.LongWords, "long-words", wl.LongWords, "lengths in words of the fresh prompts of each round")
	f.IntVar(&wl.Output, "output", wl.Output, "max_tokens per request")
	return cmd
}

// warnScrapes says on stderr which targets' /metrics could not be read:
// the report then holds no server-side figures for them, and a reader of
// the summary table alone should not take "not scraped" for a typo.
func warnScrapes(w io.Writer, rep *bench.Report) {
	seen := map[string]bool{}
	for _, res := range rep.Runs {
		for _, m := range res.Server {
			if m == nil || m.Failed == 0 || seen[m.URL] {
				continue
			}
			seen[m.URL] = true
			fmt.Fprintf(w, "warning: %d of %d scrapes of %s failed (last: %s); server-side figures are missing for it (--scrape-every 0 turns scraping off)\n",
				m.Failed, m.Scrapes, m.URL, m.LastError)
		}
	}
}
