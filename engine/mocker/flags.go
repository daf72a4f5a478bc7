package mocker

import "github.com/spf13/pflag"

// AddFlags registers the mocker's flags of serve and worker, with c's
// values as defaults (start from DefaultConfig). --block-size is the
// upstream engine's too.
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	fs.IntVar(&c.BlockSize, "block-size", c.BlockSize, "KV block size in tokens (mocker; upstream: the servers' --block-size)")
	fs.IntVar(&c.KVCapacityTokens, "kv-capacity-tokens", c.KVCapacityTokens, "mocker: KV cache capacity per worker, in tokens (the seed's GPU worker: 14816)")
	fs.IntVar(&c.MaxNumSeqs, "max-num-seqs", c.MaxNumSeqs, "mocker: sequences per scheduler step")
	fs.IntVar(&c.MaxNumBatchedTokens, "max-num-batched-tokens", c.MaxNumBatchedTokens, "mocker: tokens per scheduler step (chunked prefill)")
	fs.IntVar(&c.KVBytesPerToken, "kv-bytes-per-token", c.KVBytesPerToken, "mocker: KV bytes per token of the simulated model (Qwen3-0.6B: 114688)")
	fs.Float64Var(&c.Speedup, "speedup", c.Speedup, "mocker: divide every simulated time by this")
	fs.BoolVar(&c.Instant, "instant", false, "mocker: zero simulated time (for overhead benchmarks)")
	fs.Uint64Var(&c.Seed, "seed", 0, "mocker: seed of the generated text")
	fs.IntVar(&c.MaxNaturalTokens, "max-natural-tokens", 0, "mocker: end sequences with EOS after a seeded length up to this (0: run to max_tokens)")
}
