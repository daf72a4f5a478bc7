package mocker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/zeebo/xxh3"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/kvcache"
)

// The mocker has no tensors, yet disaggregation must move and check real
// bytes: a block's payload is a deterministic function of its chained
// content, so the importer can verify every byte it receives (order,
// truncation, corruption) without having computed anything.

// ErrKVCorrupt is returned by ImportBlocks for a block whose bytes are not
// the ones the exporter generates for its tokens.
var ErrKVCorrupt = errors.New("mocker: imported KV block does not match its tokens")

// errPrefixMissing: the importer no longer caches the prefix the blocks
// extend (evicted since the sender looked).
var errPrefixMissing = errors.New("mocker: import needs a prefix the cache does not hold")

const kvGolden = 0x9e3779b97f4a7c15

// KVLayout implements engine.KVPort.
func (e *Engine) KVLayout() string {
	return fmt.Sprintf("mocker/v1/block=%d/bytes_per_token=%d", e.cfg.BlockSize, e.cfg.KVBytesPerToken)
}

// KVBlockBytes implements engine.KVPort.
func (e *Engine) KVBlockBytes() int { return e.cfg.BlockSize * e.cfg.KVBytesPerToken }

// EstimatePrefill implements engine.PrefillEstimator from the timing model,
// as the scheduler runs it: with chunked prefill a prompt longer than the
// step budget is computed in budget-sized chunks, one step each, and every
// step pays the model's fixed cost and its quadratic term on its own chunk
// only. Pricing a long prompt as one step overstated it badly
// (docs/benchmarks/router.md).
func (e *Engine) EstimatePrefill(n int) float64 {
	if n <= 0 {
		return 0
	}
	chunk := e.cfg.MaxNumBatchedTokens
	if e.cfg.DisableChunkedPrefill || chunk <= 0 || n <= chunk {
		return e.cfg.stepDuration(e.cfg.Timing.PrefillMs(n)).Seconds()
	}
	full, rest := n/chunk, n%chunk
	ms := float64(full) * e.cfg.Timing.PrefillMs(chunk)
	ms += e.cfg.Timing.PrefillMs(rest)
	return e.cfg.stepDuration(ms).Seconds()
}

// EstimateDecodeStep is the timing model's decode step, in seconds, with
// activeTokens tokens of KV in use (the router's ttft cost adds it to a
// prefill admitted while others decode, as the scheduler's step does; the
// router passes what its in-flight requests will hold, which the engine's
// own counters only show after the step that allocates it).
func (e *Engine) EstimateDecodeStep(activeTokens int) float64 {
	if activeTokens < 0 {
		activeTokens = 0
	}
	u := float64(activeTokens) / float64(e.cfg.NumBlocks*e.cfg.BlockSize)
	return e.cfg.stepDuration(e.cfg.Timing.DecodeMs(min(u, 1))).Seconds()
}

// RunningDecodes implements engine.LoadReporter.
func (e *Engine) RunningDecodes() int { return int(e.loadRunning.Load()) }

// KVCommitted implements engine.KVStreamer: the scheduler commits a
// chunked prefill's full blocks after every step (complete), and the
// cache's notifier is the one piece of it other goroutines may touch.
func (e *Engine) KVCommitted() <-chan struct{} { return e.cache.Changed() }

// PrefillChunkTokens implements engine.KVStreamer: one step prefills at
// most the batched-token budget (without chunked prefill the context
// length is clamped to it, so it is still the bound).
func (e *Engine) PrefillChunkTokens() int { return e.cfg.MaxNumBatchedTokens }

// CachedPrefix implements engine.KVPort.
func (e *Engine) CachedPrefix(ctx context.Context, tokens []engine.Token) (int, error) {
	var n int
	err := e.do(ctx, func() { n = e.cache.Match(tokens) })
	return n, err
}

// blockSeeds returns the chained content hash of every full block of
// tokens up to block end (exclusive).
func blockSeeds(tokens []engine.Token, bs, end int) []uint64 {
	out := make([]uint64, end)
	var h uint64 = kvGolden
	raw := make([]byte, 4*bs)
	for i := range end {
		for j, t := range tokens[i*bs : (i+1)*bs] {
			binary.LittleEndian.PutUint32(raw[4*j:], uint32(t))
		}
		h = xxh3.HashSeed(raw, h)
		out[i] = h
	}
	return out
}

func fillBlock(buf []byte, seed uint64) {
	n := len(buf) &^ 7
	for j := 0; j < n; j += 8 {
		binary.LittleEndian.PutUint64(buf[j:], seed^uint64(j)*kvGolden)
	}
	for j := n; j < len(buf); j++ {
		buf[j] = byte(seed >> (8 * (j & 7)))
	}
}

func checkBlock(buf []byte, seed uint64) bool {
	n := len(buf) &^ 7
	for j := 0; j < n; j += 8 {
		if binary.LittleEndian.Uint64(buf[j:]) != seed^uint64(j)*kvGolden {
			return false
		}
	}
	for j := n; j < len(buf); j++ {
		if buf[j] != byte(seed>>(8*(j&7))) {
			return false
		}
	}
	return true
}

// ExportBlocks implements engine.KVPort. The blocks stay referenced while
// they are exported, so they cannot be evicted half-way.
func (e *Engine) ExportBlocks(ctx context.Context, tokens []engine.Token, from int, buf []byte, emit func(i int) error) (int, error) {
	bs := e.cfg.BlockSize
	if len(buf) != e.KVBlockBytes() {
		return 0, fmt.Errorf("mocker: export buffer of %d bytes, blocks have %d", len(buf), e.KVBlockBytes())
	}
	var s kvcache.Seq
	var n int
	if err := e.do(ctx, func() { n = e.cache.Acquire(&s, tokens) / bs }); err != nil {
		return 0, err
	}
	defer func() { _ = e.do(context.WithoutCancel(ctx), func() { e.cache.Free(&s) }) }()
	seeds := blockSeeds(tokens, bs, n)
	for i := from; i < n; i++ {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		fillBlock(buf, seeds[i])
		if err := emit(i); err != nil {
			return n, err
		}
	}
	return n, nil
}

// ImportBlocks implements engine.KVPort: every byte is verified, then the
// blocks join the prefix cache (and are published as BlockStored, so a KV
// router sees them).
func (e *Engine) ImportBlocks(ctx context.Context, tokens []engine.Token, from int, blocks [][]byte) error {
	bs, bb := e.cfg.BlockSize, e.KVBlockBytes()
	end := from + len(blocks)
	if from < 0 || end*bs > len(tokens) {
		return fmt.Errorf("mocker: import of blocks [%d,%d) beyond %d tokens", from, end, len(tokens))
	}
	seeds := blockSeeds(tokens, bs, end)
	for k, b := range blocks {
		if len(b) != bb || !checkBlock(b, seeds[from+k]) {
			return fmt.Errorf("%w: block %d", ErrKVCorrupt, from+k)
		}
	}
	var err error
	if derr := e.do(ctx, func() { err = e.importLocked(tokens[:end*bs], from) }); derr != nil {
		return derr
	}
	return err
}

// importLocked runs on the scheduler goroutine.
func (e *Engine) importLocked(tokens []engine.Token, from int) error {
	bs := e.cfg.BlockSize
	if e.cache.Match(tokens[:from*bs]) < from*bs {
		return errPrefixMissing
	}
	var s kvcache.Seq
	_, err := e.cache.Import(&s, tokens)
	e.cache.Free(&s)
	e.flushEvents()
	e.publishLoad()
	if err != nil {
		return fmt.Errorf("mocker: import: %w", err)
	}
	return nil
}

// KVShape implements engine.KVDescriber: a simulated cache has no layers,
// so only the model, block size and tokenizer (in the record) count.
func (e *Engine) KVShape() engine.KVShape { return engine.KVShape{DType: "simulated"} }

// EstimateOnboard is the simulated time, in seconds, to bring tokens'
// worth of blocks back into the pool from host memory (the router's ttft
// cost adds it for the part of a hit the worker holds only in a lower
// tier); 0 without tiers.
func (e *Engine) EstimateOnboard(tokens int) float64 {
	if !e.cfg.Tiers.Enabled() || tokens <= 0 {
		return 0
	}
	blocks := (tokens + e.cfg.BlockSize - 1) / e.cfg.BlockSize
	n2, n3 := blocks, 0
	if e.cfg.Tiers.HostBytes == 0 {
		n2, n3 = 0, blocks
	}
	wall := e.cfg.Tiers.onboardWall(n2, n3, int64(e.cfg.BlockSize)*int64(e.cfg.KVBytesPerToken))
	return e.cfg.stepDuration(wall * 1000).Seconds()
}

// EstimateOnboardTiers is EstimateOnboard for a hit whose lower part is
// split by tier: host tokens' worth of blocks in host memory and disk
// tokens' on disk (its own, or the shared disk of KVSharedTier), each
// over its link at the configured bandwidth on idle links.
func (e *Engine) EstimateOnboardTiers(host, disk int) float64 {
	if !e.cfg.Tiers.Enabled() || host+disk <= 0 || host < 0 || disk < 0 {
		return 0
	}
	bs := e.cfg.BlockSize
	wall := e.cfg.Tiers.onboardWall((host+bs-1)/bs, (disk+bs-1)/bs, int64(bs)*int64(e.cfg.KVBytesPerToken))
	return e.cfg.stepDuration(wall * 1000).Seconds()
}

// KVSharedTier names the disk tier this worker shares with others of its
// host ("" when none, or an unnamed one): its KV events' G3 blocks are
// the shared disk's, so a router applies them to every worker of the
// same name (kvindex.Index.SetShareGroup).
func (e *Engine) KVSharedTier() string {
	if d := e.cfg.Tiers.Shared; d != nil {
		return d.name
	}
	return ""
}

// KVSharedHost names the host-memory tier this worker shares with others
// of its host ("" when none): its KV events' G2 blocks are the shared
// pool's, so a router applies them to every worker of the same name
// (kvindex.Index.SetShareGroupTier).
func (e *Engine) KVSharedHost() string {
	if p := e.cfg.Tiers.SharedHost; p != nil {
		return p.name
	}
	return ""
}
