package sim

import (
	"github.com/tandemllm/tandem/control/planner"
	"github.com/tandemllm/tandem/engine/mocker"
)

// WorkerSpec is one simulated worker's shape.
type WorkerSpec struct {
	Timing              mocker.TimingModel
	KVCapacityTokens    int
	MaxNumSeqs          int
	MaxNumBatchedTokens int
}

func (w WorkerSpec) withDefaults() WorkerSpec {
	if w.Timing == (mocker.TimingModel{}) {
		w.Timing = mocker.Qwen3_0_6BTiming()
	}
	if w.KVCapacityTokens <= 0 {
		w.KVCapacityTokens = mocker.DefaultKVCapacityTokens
	}
	if w.MaxNumSeqs <= 0 {
		w.MaxNumSeqs = mocker.DefaultMaxNumSeqs
	}
	if w.MaxNumBatchedTokens <= 0 {
		w.MaxNumBatchedTokens = mocker.DefaultMaxNumBatchedTokens
	}
	return w
}

// Profile derives the planner profile a `tandem bench profile` sweep of
// this worker would measure: a lone prompt's TTFT is its chunked prefill
// (chunks of MaxNumBatchedTokens, one step each), and ITL at concurrency c
// and context x is the decode step at KV usage c·x/capacity.
func (w WorkerSpec) Profile() *planner.Profile {
	w = w.withDefaults()
	p := &planner.Profile{
		Version:             planner.ProfileVersion,
		Worker:              "mocker (simulated)",
		KVCapacityTokens:    w.KVCapacityTokens,
		MaxNumSeqs:          w.MaxNumSeqs,
		MaxNumBatchedTokens: w.MaxNumBatchedTokens,
	}
	p.Prefill.ISL = []float64{128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072}
	p.Prefill.CachedFraction = []float64{0, 0.25, 0.5, 0.75, 0.9, 0.99}
	for _, isl := range p.Prefill.ISL {
		row := make([]float64, len(p.Prefill.CachedFraction))
		for j, cf := range p.Prefill.CachedFraction {
			row[j] = w.prefillMs(int(isl) - min(int(isl*cf), int(isl)-1))
		}
		p.Prefill.TTFTMs = append(p.Prefill.TTFTMs, row)
	}
	p.Decode.Concurrency = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256}
	p.Decode.Context = []float64{256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072}
	for _, c := range p.Decode.Concurrency {
		row := make([]float64, len(p.Decode.Context))
		for j, x := range p.Decode.Context {
			if c*x <= float64(w.KVCapacityTokens) && int(c) <= w.MaxNumSeqs {
				row[j] = w.Timing.DecodeMs(c * x / float64(w.KVCapacityTokens))
			}
		}
		p.Decode.ITLMs = append(p.Decode.ITLMs, row)
	}
	return p
}

// prefillMs is a lone prompt's prefill of n new tokens in budget-sized
// chunks, one step each.
func (w WorkerSpec) prefillMs(n int) float64 {
	ms := 0.0
	for n > 0 {
		c := min(n, w.MaxNumBatchedTokens)
		ms += w.Timing.PrefillMs(c)
		n -= c
	}
	return ms
}
