package model

import (
	"fmt"
	"sort"
	"strings"

	"github.com/tandemllm/tandem/engine/native/gguf"
)

// Quant is a llama.cpp file type ("model ftype"): a base tensor type and
// the rules llama-quantize applies on top of it, so that `tandem model
// quantize --type q4_k_m` writes the same mix of types as
// `llama-quantize model.gguf out.gguf Q4_K_M`.
type Quant struct {
	Name string
	Base gguf.Type
	// FileType is general.file_type (enum llama_ftype, include/llama.h).
	FileType uint32
	// More selects llama.cpp's _M mixes: attn_v and ffn_down of the layers
	// use_more_bits picks get Q6_K.
	More   bool
	keepQ8 bool
	// Progress, when set, is called by WriteGGUFQuant after each layer's
	// tensors are encoded (done of total layers), for a progress line.
	Progress func(done, total int)
}

// quants are the file types Tandem writes, with their llama_ftype numbers.
var quants = map[string]Quant{
	"f32":    {Base: gguf.F32, FileType: 0},
	"f16":    {Base: gguf.F16, FileType: 1},
	"bf16":   {Base: gguf.BF16, FileType: 32},
	"q4_0":   {Base: gguf.Q4_0, FileType: 2},
	"q8_0":   {Base: gguf.Q8_0, FileType: 7},
	"q4_k_s": {Base: gguf.Q4_K, FileType: 14},
	"q4_k_m": {Base: gguf.Q4_K, FileType: 15, More: true},
	"q5_k_s": {Base: gguf.Q5_K, FileType: 16},
	"q5_k_m": {Base: gguf.Q5_K, FileType: 17, More: true},
	"q6_k":   {Base: gguf.Q6_K, FileType: 18},
}

// QuantNames lists the file types ParseQuant accepts.
func QuantNames() []string {
	var n []string
	for k := range quants {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// ParseQuant names a file type, case-insensitively ("Q4_K_M", "q8_0").
func ParseQuant(s string) (Quant, error) {
	q, ok := quants[strings.ToLower(s)]
	if !ok {
		return Quant{}, fmt.Errorf("unknown quantization type %q (known: %s)", s, strings.Join(QuantNames(), ", "))
	}
	q.Name = strings.ToLower(s)
	return q, nil
}

// useMoreBits is use_more_bits of llama.cpp's src/llama-quant.cpp: the
// first and last eighth of the layers, and every third one between.
func useMoreBits(i, n int) bool { return i < n/8 || i >= 7*n/8 || (i-n/8)%3 == 2 }

// TypeFor is the tensor type q gives the named matrix (cols values per
// row) of a model of nLayers layers, following llama_tensor_get_type in
// llama.cpp's src/llama-quant.cpp for the tensors Tandem's architectures
// have:
//   - output.weight, or token_embd.weight when the output is tied to it,
//     is Q6_K for every quantized type but Q8_0 (which keeps Q8_0);
//   - for the _M mixes, attn_v and ffn_down are Q6_K in the layers
//     useMoreBits picks;
//   - a k-quant whose rows are not whole 256-value super-blocks falls
//     back to a 32-value type. llama.cpp falls back to Q5_0/Q5_1 for
//     Q4_K/Q5_K, which Tandem does not implement; it writes Q8_0 (what
//     llama.cpp uses for Q6_K's fallback), larger but never less exact.
func (q Quant) TypeFor(name string, nLayers int, hasOutput bool, cols int) gguf.Type {
	t := q.Base
	if t.BlockSize() <= 1 {
		return t
	}
	layer := -1
	if strings.HasPrefix(name, "blk.") {
		fmt.Sscanf(name, "blk.%d.", &layer)
	}
	switch {
	case name == "output.weight" || (!hasOutput && name == "token_embd.weight"):
		if t != gguf.Q8_0 {
			t = gguf.Q6_K
		}
	case q.More && layer >= 0 && (strings.HasSuffix(name, ".attn_v.weight") || strings.HasSuffix(name, ".ffn_down.weight")):
		if useMoreBits(layer, nLayers) {
			t = gguf.Q6_K
		}
	}
	if bs := t.BlockSize(); cols%bs != 0 {
		t = gguf.Q8_0
		if cols%32 != 0 {
			t = gguf.F16
		}
	}
	return t
}
