package native

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/kvcache"
)

// errPrefixMissing: the importer no longer caches the prefix the blocks
// extend, and blocks whose predecessors are absent would be unreachable.
var errPrefixMissing = errors.New("native: import needs a prefix the cache does not hold")

// KVLayout implements engine.KVPort: the model fingerprint plus the
// geometry, the same identity ImportKV checks.
func (e *Engine) KVLayout() string {
	c := &e.m.Config
	return fmt.Sprintf("native/v1/%s/f32/l%d/kvh%d/hd%d/block=%d", hex.EncodeToString(e.fp[:8]), c.Layers, c.KVHeads, c.HeadDim, e.kv.BlockSize)
}

// KVBlockBytes implements engine.KVPort. A block's payload is ordered as in
// docs/kv-layout.md: per layer, K then V, float32 little-endian.
func (e *Engine) KVBlockBytes() int { return e.m.Config.Layers * 2 * e.kv.BlockFloats() * 4 }

// KVCommitted implements engine.KVStreamer: the scheduler commits every
// forward step's full blocks (chunked prefill), and the cache's notifier is
// the one piece of it other goroutines may touch.
func (e *Engine) KVCommitted() <-chan struct{} { return e.cache.Changed() }

// PrefillChunkTokens implements engine.KVStreamer. A step takes at most
// MaxBatchTokens tokens; the scheduler may take fewer to hold StepTarget,
// which only makes blocks exportable sooner.
func (e *Engine) PrefillChunkTokens() int { return e.opts.MaxBatchTokens }

// EstimatePrefill implements engine.PrefillEstimator from the measured
// speed of recent steps; negative until a step of minRateTokens has run.
func (e *Engine) EstimatePrefill(n int) float64 {
	r := math.Float64frombits(e.prefillRate.Load())
	if r <= 0 {
		return -1
	}
	return float64(n) / r
}

// RunningDecodes implements engine.LoadReporter.
func (e *Engine) RunningDecodes() int { return int(e.running.Load()) }

// CachedPrefix implements engine.KVPort.
func (e *Engine) CachedPrefix(ctx context.Context, tokens []engine.Token) (int, error) {
	var n int
	err := e.do(ctx, func() { n = e.cache.Match(tokens) })
	return n, err
}

// ExportBlocks implements engine.KVPort. The blocks are referenced for the
// duration, so the scheduler neither evicts nor rewrites them while they
// are copied out block by block.
func (e *Engine) ExportBlocks(ctx context.Context, tokens []engine.Token, from int, buf []byte, emit func(i int) error) (int, error) {
	if len(buf) != e.KVBlockBytes() {
		return 0, fmt.Errorf("native: export buffer of %d bytes, blocks have %d", len(buf), e.KVBlockBytes())
	}
	var s kvcache.Seq
	var n int
	if err := e.do(ctx, func() { n = e.cache.Acquire(&s, tokens) / e.kv.BlockSize }); err != nil {
		return 0, err
	}
	defer func() { _ = e.do(context.Background(), func() { e.cache.Free(&s) }) }()
	blocks := s.Blocks()
	bf := e.kv.BlockFloats()
	tmp := make([]float32, bf)
	for i := from; i < n; i++ {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		b, out := int(blocks[i]), buf
		for l := range e.m.Config.Layers {
			for _, v := range []bool{false, true} {
				e.kv.ReadBlock(tmp, l, b, v)
				for j, f := range tmp {
					binary.LittleEndian.PutUint32(out[4*j:], math.Float32bits(f))
				}
				out = out[4*bf:]
			}
		}
		if err := emit(i); err != nil {
			return n, err
		}
	}
	return n, nil
}

// ImportBlocks implements engine.KVPort.
func (e *Engine) ImportBlocks(ctx context.Context, tokens []engine.Token, from int, blocks [][]byte) error {
	bs, per := e.kv.BlockSize, e.KVBlockBytes()
	end := from + len(blocks)
	if from < 0 || end*bs > len(tokens) {
		return fmt.Errorf("native: import of blocks [%d,%d) beyond %d tokens", from, end, len(tokens))
	}
	for _, t := range tokens[:end*bs] {
		if t < 0 || int(t) >= e.m.Config.Vocab {
			return fmt.Errorf("%w: token %d outside the vocabulary", ErrKVMismatch, t)
		}
	}
	for k, b := range blocks {
		if len(b) != per {
			return fmt.Errorf("%w: block %d has %d bytes, want %d", ErrKVMismatch, from+k, len(b), per)
		}
	}
	var err error
	derr := e.do(ctx, func() {
		if e.cache.Match(tokens[:from*bs]) < from*bs {
			err = errPrefixMissing
			return
		}
		var s kvcache.Seq
		fill, ierr := e.cache.Import(&s, tokens[:end*bs])
		if ierr != nil {
			err = fmt.Errorf("native: import KV: %w", ierr)
			e.cache.Free(&s)
			return
		}
		ids := s.Blocks()
		tmp := make([]float32, e.kv.BlockFloats())
		for _, i := range fill {
			e.writeBlock(int(ids[i]), blocks[i-from], tmp)
		}
		e.cache.Free(&s)
	})
	if derr != nil {
		return derr
	}
	return err
}

// KVShape implements engine.KVDescriber: the real shape, and the first 12
// bytes of the weight fingerprint.
func (e *Engine) KVShape() engine.KVShape {
	c := &e.m.Config
	return engine.KVShape{DType: "f32", Layers: c.Layers, KVHeads: c.KVHeads, HeadSize: c.HeadDim, Weights: hex.EncodeToString(e.fp[:12])}
}
