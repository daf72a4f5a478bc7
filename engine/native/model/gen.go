package model

import (
	"fmt"
	"math"
	"slices"

	"github.com/tandemllm/tandem/engine/native/kernels"
)

// ShapeNames lists the shapes Shape knows, smallest first.
func ShapeNames() []string {
	return []string{"tiny", "tiny-qwen3", "tiny-qwen2", "15m", "42m", "110m", "qwen2-0.5b", "0.6b", "1b"}
}

// Shape returns the configuration of a named benchmark shape. 15m, 42m and
// 110m are the TinyStories llama2.c shapes (with a 2048-token context so
// long-prefix benchmarks fit); 0.6b is Qwen3-0.6B (QK-norm, head_dim 128,
// 151,936 vocabulary, tied output, context capped at 4096). "tiny" is a
// seconds-fast shape for tests whose widths are multiples of 32 so it
// also runs as Q8_0.
func Shape(name string) (Config, error) {
	base := Config{Arch: "llama", RopeTheta: 10000, Rope: RopeInterleaved, NormEps: 1e-5, Tied: true, SeqLen: 2048}
	set := func(dim, hidden, layers, heads, kv, vocab int) Config {
		c := base
		c.Dim, c.Hidden, c.Layers, c.Heads, c.KVHeads, c.Vocab = dim, hidden, layers, heads, kv, vocab
		c.HeadDim = dim / heads
		return c
	}
	switch name {
	case "tiny":
		c := set(64, 128, 2, 4, 2, 320)
		c.SeqLen = 512
		return c, nil
	case "tiny-qwen3", "tiny-qwen2": // the tiny shape with Qwen's switches
		c := set(64, 128, 2, 4, 2, 320)
		c.SeqLen, c.Rope, c.RopeTheta = 512, RopeHalf, 1e6
		if name == "tiny-qwen3" {
			c.Arch, c.QKNorm, c.HeadDim = "qwen3", true, 32
		} else {
			c.Arch, c.QKVBias = "qwen2", true
		}
		return c, nil
	case "15m":
		return set(288, 768, 6, 6, 6, 32000), nil
	case "42m":
		return set(512, 1376, 8, 8, 8, 32000), nil
	case "110m":
		return set(768, 2048, 12, 12, 12, 32000), nil
	case "0.6b":
		c := set(1024, 3072, 28, 16, 8, 151936)
		c.Arch, c.HeadDim, c.QKNorm, c.Rope = "qwen3", 128, true, RopeHalf
		c.RopeTheta, c.NormEps, c.SeqLen = 1e6, 1e-6, 4096
		return c, nil
	case "qwen2-0.5b": // Qwen2.5-0.5B: q/k/v biases, 896 wide (k-quants fall back)
		c := set(896, 4864, 24, 14, 2, 151936)
		c.Arch, c.QKVBias, c.Rope = "qwen2", true, RopeHalf
		c.RopeTheta, c.NormEps, c.SeqLen = 1e6, 1e-6, 4096
		return c, nil
	case "1b": // Llama-3.2-1B (without its rope_freqs scaling)
		c := set(2048, 8192, 16, 32, 8, 128256)
		c.RopeTheta, c.SeqLen = 500000, 4096
		return c, nil
	}
	return Config{}, fmt.Errorf("unknown shape %q (known: %v)", name, ShapeNames())
}

// Rand is the deterministic generator behind random weights: splitmix64,
// chosen because it is fast, seedable and identical on every platform.
type Rand struct{ s uint64 }

// NewRand seeds a generator.
func NewRand(seed uint64) *Rand { return &Rand{s: seed} }

// Uint64 returns the next value.
func (r *Rand) Uint64() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Float32 returns a value uniform in [-1, 1).
func (r *Rand) Float32() float32 {
	return float32(r.Uint64()>>40)/(1<<23) - 1
}

// Fill sets v to uniform values in [-a, a).
func (r *Rand) Fill(v []float32, a float32) {
	for i := range v {
		v[i] = r.Float32() * a
	}
}

// Generate builds a model of shape c with deterministic random weights.
// Matrices are scaled by 1/sqrt(cols) so activations stay in a realistic
// range through deep stacks; norms are 1 with a little noise, so a wrong
// norm weight index would still show up in tests.
func Generate(c Config, seed uint64) (*Model, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	r := NewRand(seed)
	mat := func(rows, cols int) *kernels.Mat {
		m := &kernels.Mat{Type: kernels.F32, Rows: rows, Cols: cols, F: kernels.NewF32(rows * cols)}
		r.Fill(m.F, float32(math.Sqrt(3/float64(cols))))
		return m
	}
	norm := func(n int) []float32 {
		v := make([]float32, n)
		r.Fill(v, 0.1)
		for i := range v {
			v[i]++
		}
		return v
	}
	vec := func(n int, a float32) []float32 {
		v := make([]float32, n)
		r.Fill(v, a)
		return v
	}
	m := &Model{Config: c, Source: fmt.Sprintf("random(seed=%d)", seed), BOS: 1, EOS: []int32{2}}
	m.Config.RopeFreqFactors = slices.Clone(c.RopeFreqFactors)
	m.Embed = mat(c.Vocab, c.Dim)
	for range c.Layers {
		l := Layer{AttnNorm: norm(c.Dim)}
		l.Wq, l.Wk, l.Wv = mat(c.QDim(), c.Dim), mat(c.KVDim(), c.Dim), mat(c.KVDim(), c.Dim)
		l.Wo = mat(c.Dim, c.QDim())
		if c.QKVBias {
			l.Bq, l.Bk, l.Bv = vec(c.QDim(), 0.1), vec(c.KVDim(), 0.1), vec(c.KVDim(), 0.1)
		}
		if c.QKNorm {
			l.QNorm, l.KNorm = norm(c.HeadDim), norm(c.HeadDim)
		}
		l.FFNNorm = norm(c.Dim)
		l.W1, l.W2, l.W3 = mat(c.Hidden, c.Dim), mat(c.Dim, c.Hidden), mat(c.Hidden, c.Dim)
		m.Layers = append(m.Layers, l)
	}
	m.FinalNorm = norm(c.Dim)
	if c.Tied {
		m.Output = m.Embed
	} else {
		m.Output = mat(c.Vocab, c.Dim)
	}
	if err := m.Init(); err != nil {
		return nil, err
	}
	return m, nil
}

// Llama3FreqFactors computes Llama 3's RoPE scaling factors (what
// llama.cpp stores as rope_freqs.weight): long wavelengths are slowed by
// factor, short ones kept, and the band between interpolated.
func Llama3FreqFactors(headDim int, theta, factor, lowFreqFactor, highFreqFactor float64, origCtx int) []float32 {
	lowWavelen := float64(origCtx) / lowFreqFactor
	highWavelen := float64(origCtx) / highFreqFactor
	out := make([]float32, headDim/2)
	for j := range out {
		freq := 1 / math.Pow(theta, float64(2*j)/float64(headDim))
		wavelen := 2 * math.Pi / freq
		switch {
		case wavelen < highWavelen:
			out[j] = 1
		case wavelen > lowWavelen:
			out[j] = float32(factor)
		default:
			smooth := (float64(origCtx)/wavelen - lowFreqFactor) / (highFreqFactor - lowFreqFactor)
			out[j] = float32(1 / ((1-smooth)/factor + smooth))
		}
	}
	return out
}
