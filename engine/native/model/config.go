package model

import (
	"errors"
	"fmt"
)

// RopeStyle selects which pairs of a head's dimensions RoPE rotates.
type RopeStyle uint8

const (
	// RopeInterleaved rotates (2i, 2i+1): llama2.c and GGUF "llama".
	RopeInterleaved RopeStyle = iota
	// RopeHalf rotates (i, i+d/2): GGUF "qwen2"/"qwen3" (NeoX style).
	RopeHalf
)

// Config is the shape and the architectural switches of a model.
type Config struct {
	Arch      string // "llama", "qwen2", "qwen3"
	Dim       int    // residual width
	Hidden    int    // FFN width
	Layers    int
	Heads     int
	KVHeads   int
	HeadDim   int // Heads*HeadDim may differ from Dim (Qwen3)
	Vocab     int
	SeqLen    int
	RopeTheta float64
	Rope      RopeStyle
	// RopeFreqFactors divides each rotary frequency (Llama 3 scaling, as the
	// rope_freqs tensor of llama.cpp); nil means no scaling.
	RopeFreqFactors []float32
	NormEps         float32
	Tied            bool // output projection shares the embedding
	QKNorm          bool // per-head RMSNorm of q and k (Qwen3)
	QKVBias         bool // biases on q, k, v (Qwen2)
}

// QDim is the width of the concatenated query heads.
func (c *Config) QDim() int { return c.Heads * c.HeadDim }

// KVDim is the width of one token's keys (and of its values) in one layer.
func (c *Config) KVDim() int { return c.KVHeads * c.HeadDim }

// maxDim bounds every dimension so that products of them cannot overflow
// and a corrupt header cannot ask for absurd allocations.
const maxDim = 1 << 24

// Validate checks the shape is one the forward pass can run.
func (c *Config) Validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"dim", c.Dim}, {"hidden_dim", c.Hidden}, {"n_layers", c.Layers}, {"n_heads", c.Heads},
		{"n_kv_heads", c.KVHeads}, {"head_dim", c.HeadDim}, {"vocab_size", c.Vocab}, {"seq_len", c.SeqLen}} {
		if f.v <= 0 || f.v > maxDim {
			return fmt.Errorf("%s = %d is out of range", f.name, f.v)
		}
	}
	if c.Layers > 4096 || c.Heads > 4096 {
		return fmt.Errorf("n_layers = %d / n_heads = %d is out of range", c.Layers, c.Heads)
	}
	if c.Heads%c.KVHeads != 0 {
		return fmt.Errorf("n_heads %d is not a multiple of n_kv_heads %d", c.Heads, c.KVHeads)
	}
	if c.HeadDim%2 != 0 {
		return fmt.Errorf("head_dim %d is odd: RoPE rotates pairs", c.HeadDim)
	}
	if int64(c.Heads)*int64(c.HeadDim) > maxDim {
		return errors.New("n_heads*head_dim is out of range")
	}
	if c.RopeTheta <= 0 {
		return fmt.Errorf("rope theta %v must be positive", c.RopeTheta)
	}
	if c.RopeFreqFactors != nil && len(c.RopeFreqFactors) != c.HeadDim/2 {
		return fmt.Errorf("rope_freqs has %d factors, want head_dim/2 = %d", len(c.RopeFreqFactors), c.HeadDim/2)
	}
	if c.NormEps <= 0 {
		return fmt.Errorf("norm epsilon %v must be positive", c.NormEps)
	}
	switch c.Arch {
	case "llama", "qwen2", "qwen3":
	default:
		return fmt.Errorf("unsupported architecture %q", c.Arch)
	}
	return nil
}

// Params counts the weights (the tied output is counted once).
func (c *Config) Params() int64 {
	d, h, q, kv := int64(c.Dim), int64(c.Hidden), int64(c.QDim()), int64(c.KVDim())
	per := d*q + 2*d*kv + q*d + 3*d*h + 2*d
	n := int64(c.Layers)*per + int64(c.Vocab)*d + d
	if !c.Tied {
		n += int64(c.Vocab) * d
	}
	return n
}
