package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tandemllm/tandem/bench"
	"github.com/tandemllm/tandem/engine/mocker"
)

// newBenchProfileCmd is `tandem bench profile`: sweep one worker and write
// the planner's profile JSON (`tandem planner simulate --profile`).
func newBenchProfileCmd(b *benchFlags) *cobra.Command {
	spec := bench.ProfileSpec{
		ISL:              []int{128, 512, 1024, 2048, 4096, 8192, 16384},
		CachedFraction:   []float64{0, 0.5, 0.9},
		Concurrency:      []int{1, 4, 16, 64},
		Context:          []int{512, 2048, 8192},
		KVCapacityTokens: mocker.DefaultKVCapacityTokens, MaxNumSeqs: mocker.DefaultMaxNumSeqs,
		MaxNumBatchedTokens: mocker.DefaultMaxNumBatchedTokens,
	}
	var path string
	cmd := &cobra.Command{
		Use:   "profile",
		Short: "Sweep one worker (prefill time vs input length and cached fraction, ITL vs concurrency and context) and write the planner's profile JSON",
		Long: `Measures one worker behind an OpenAI-compatible endpoint: a frontend in front of exactly one
worker (--url), or an in-process 'tandem serve --workers 1 ...' (--serve). Prefill points send
one request at a time: a fresh random token-id prompt's cached part first, then the whole prompt,
whose TTFT is the point's (median of --repeats). Decode points start --decode-concurrency
sequences of --context tokens at once and keep the mean token gap of the window where all of them
decode. Points that do not fit --kv-capacity-tokens or --max-num-seqs are written as 0 ("does not
fit"). The worker's limits are not discoverable over HTTP: give them (defaults: the mocker's).

  tandem bench profile --serve '--workers 1 --timing qwen3-0.6b' --profile qwen3.json
  tandem planner simulate --profile qwen3.json --html report.html`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if path == "" {
				return errors.New("--profile FILE is required")
			}
			var o bench.Options
			ts, err := b.targets()
			if err != nil {
				return err
			}
			o.Targets = ts
			stop, err := b.startTargets(cmd, &o)
			if err != nil {
				return err
			}
			defer stop()
			if len(o.Targets) != 1 {
				return fmt.Errorf("profile measures one worker: give one --url or one --serve, not %d", len(o.Targets))
			}
			spec.Target, spec.Seed, spec.Log = o.Targets[0], b.seed, cmd.ErrOrStderr()
			if spec.Worker == "" {
				spec.Worker = o.Targets[0].URL
				if len(b.serve) == 1 {
					spec.Worker = "tandem serve " + b.serve[0]
				}
			}
			if b.timeout > 0 {
				spec.Timeout = b.timeout
			}
			p, err := bench.Profile(cmd.Context(), spec)
			if err != nil {
				return err
			}
			if err := p.WriteFile(path); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: %d×%d prefill points, %d×%d decode points\n", path,
				len(p.Prefill.ISL), len(p.Prefill.CachedFraction), len(p.Decode.Concurrency), len(p.Decode.Context))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&path, "profile", "", "write the profile JSON here (required)")
	f.IntSliceVar(&spec.ISL, "isl", spec.ISL, "prefill grid: prompt lengths, tokens, increasing")
	f.Float64SliceVar(&spec.CachedFraction, "cached-fraction", spec.CachedFraction, "prefill grid: shares of the prompt already cached, in [0, 1), increasing")
	f.IntSliceVar(&spec.Concurrency, "decode-concurrency", spec.Concurrency, "decode grid: sequences decoding at once, increasing")
	f.IntSliceVar(&spec.Context, "context", spec.Context, "decode grid: context length of each sequence, tokens, increasing")
	f.IntVar(&spec.Repeats, "repeats", 3, "prefill: fresh prompts per point (the median is kept)")
	f.IntVar(&spec.DecodeTokens, "decode-tokens", 64, "decode: output tokens per sequence (raised to outlast the batch's prefill)")
	f.IntVar(&spec.BlockSize, "block-size", 16, "the worker's KV block size: cached prefixes are whole blocks")
	f.IntVar(&spec.KVCapacityTokens, "kv-capacity-tokens", spec.KVCapacityTokens, "the worker's KV cache size, tokens")
	f.IntVar(&spec.MaxNumSeqs, "max-num-seqs", spec.MaxNumSeqs, "the worker's concurrency cap")
	f.IntVar(&spec.MaxNumBatchedTokens, "max-num-batched-tokens", spec.MaxNumBatchedTokens, "the worker's per-step token budget")
	f.Float64Var(&spec.TimeScale, "time-scale", 1, "multiply measured times (profile a mocker run with --speedup S at --time-scale S)")
	f.StringVar(&spec.Worker, "worker", "", "what was measured, written into the profile (default: the URL or the --serve flags)")
	return cmd
}
