package model

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/tandemllm/tandem/engine/native/gguf"
	"github.com/tandemllm/tandem/engine/native/kernels"
)

// kquantModel has rows of whole 256-value super-blocks, so every k-quant
// applies without fallback.
func kquantModel(tb testing.TB, arch string, layers int) *Model {
	tb.Helper()
	c := Config{Arch: arch, Dim: 256, Hidden: 512, Layers: layers, Heads: 4, KVHeads: 2, HeadDim: 64, Vocab: 64, SeqLen: 64,
		RopeTheta: 10000, NormEps: 1e-5, Tied: true}
	switch arch {
	case "qwen3":
		c.Rope, c.QKNorm = RopeHalf, true
	case "qwen2":
		c.Rope, c.QKVBias = RopeHalf, true
	}
	m, err := Generate(c, 3)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

func logitsOf(tb testing.TB, m *Model, toks []int32) []float32 {
	tb.Helper()
	pool := kernels.NewPool(2)
	defer pool.Close()
	kv, err := NewKVStore(&m.Config, 64, 1)
	if err != nil {
		tb.Fatal(err)
	}
	out := make([]float32, m.Config.Vocab)
	if err := m.Forward(context.Background(), pool, &State{}, kv, []Seq{{Tokens: toks, Blocks: []int32{0}, Logits: out}}); err != nil {
		tb.Fatal(err)
	}
	return out
}

// TestQuantMixes writes every file type, checks each tensor's type follows
// llama-quantize's rules, loads it back and compares the logits with the
// fp32 model's: the error shrinks with the bits.
func TestQuantMixes(t *testing.T) {
	m := kquantModel(t, "llama", 8)
	toks := []int32{1, 5, 9, 13, 2, 7}
	ref := logitsOf(t, m, toks)
	var refMag float64
	for _, v := range ref {
		refMag = max(refMag, math.Abs(float64(v)))
	}
	for _, c := range []struct {
		quant  string
		tol    float64 // max |logit - fp32 logit| / max |fp32 logit|
		expect map[string]gguf.Type
	}{
		{"f32", 1e-6, map[string]gguf.Type{"blk.0.attn_q.weight": gguf.F32}},
		{"f16", 0.01, map[string]gguf.Type{"blk.0.attn_q.weight": gguf.F16}},
		{"bf16", 0.03, map[string]gguf.Type{"blk.0.attn_q.weight": gguf.BF16}},
		{"q8_0", 0.06, map[string]gguf.Type{"token_embd.weight": gguf.Q8_0, "blk.3.ffn_down.weight": gguf.Q8_0}},
		{"q6_k", 0.17, map[string]gguf.Type{"blk.0.attn_q.weight": gguf.Q6_K}},
		{"q4_0", 0.6, map[string]gguf.Type{"token_embd.weight": gguf.Q6_K, "blk.0.attn_q.weight": gguf.Q4_0}},
		// 8 layers: use_more_bits picks 0 (i < 1), 3 and 6 ((i-1)%3 == 2), 7 (i >= 7).
		{"q4_k_m", 0.5, map[string]gguf.Type{
			"token_embd.weight": gguf.Q6_K, "blk.0.attn_q.weight": gguf.Q4_K,
			"blk.0.attn_v.weight": gguf.Q6_K, "blk.1.attn_v.weight": gguf.Q4_K, "blk.3.ffn_down.weight": gguf.Q6_K,
			"blk.4.ffn_down.weight": gguf.Q4_K, "blk.6.attn_v.weight": gguf.Q6_K, "blk.7.ffn_down.weight": gguf.Q6_K,
			"blk.2.ffn_gate.weight": gguf.Q4_K}},
		{"q5_k_m", 0.3, map[string]gguf.Type{"blk.0.attn_q.weight": gguf.Q5_K, "blk.0.attn_v.weight": gguf.Q6_K}},
	} {
		t.Run(c.quant, func(t *testing.T) {
			q, err := ParseQuant(c.quant)
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if err := WriteGGUFQuant(&buf, m, q); err != nil {
				t.Fatal(err)
			}
			f, err := gguf.Parse(buf.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			if ft, _ := f.Uint("general.file_type"); ft != uint64(q.FileType) {
				t.Errorf("general.file_type = %d, want %d", ft, q.FileType)
			}
			for name, want := range c.expect {
				if tt, _, ok := f.Tensor(name); !ok || tt.Type != want {
					t.Errorf("%s is %v, want %v", name, tt.Type, want)
				}
			}
			lm, err := FromGGUF(f)
			if err != nil {
				t.Fatal(err)
			}
			got := logitsOf(t, lm, toks)
			if d := maxAbsDiff(got, ref) / refMag; d > c.tol {
				t.Errorf("logits differ by %.4g of the largest, tolerance %.4g", d, c.tol)
			}
			// Re-writing a loaded block model as its own type keeps the bytes.
			var again bytes.Buffer
			if err := WriteGGUFQuant(&again, lm, q); err != nil {
				t.Fatal(err)
			}
			f2, err := gguf.Parse(again.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			for _, tt := range f.Tensors {
				_, b1, _ := f.Tensor(tt.Name)
				t2, b2, ok := f2.Tensor(tt.Name)
				if !ok || t2.Type != tt.Type || (tt.Type != gguf.F16 && tt.Type != gguf.BF16 && !bytes.Equal(b1, b2)) {
					t.Errorf("re-quantizing a %s model changed %s", c.quant, tt.Name)
				}
			}
		})
	}
}

// TestQuantFallback: rows that are not whole super-blocks fall back to a
// 32-value type instead of failing.
func TestQuantFallback(t *testing.T) {
	q, _ := ParseQuant("q4_k_m")
	if got := q.TypeFor("blk.0.attn_q.weight", 2, true, 64); got != gguf.Q8_0 {
		t.Fatalf("64-wide Q4_K fallback = %v", got)
	}
	if got := q.TypeFor("blk.0.attn_q.weight", 2, true, 48); got != gguf.F16 {
		t.Fatalf("48-wide fallback = %v", got)
	}
	if _, err := ParseQuant("q3_k_xl"); err == nil {
		t.Fatal("unknown type accepted")
	}
}

// TestTruncatedGGUFNamesTensor cuts a Q4_K_M file inside every tensor's
// bytes in turn: the error names that tensor.
func TestTruncatedGGUFNamesTensor(t *testing.T) {
	m := kquantModel(t, "qwen3", 1)
	q, _ := ParseQuant("q4_k_m")
	var buf bytes.Buffer
	if err := WriteGGUFQuant(&buf, m, q); err != nil {
		t.Fatal(err)
	}
	full := buf.Bytes()
	f, err := gguf.Parse(full)
	if err != nil {
		t.Fatal(err)
	}
	dataStart := int(f.DataOffset)
	for _, tt := range f.Tensors {
		cut := dataStart + int(tt.Offset) + int(tt.Size)/2
		_, err := ParseGGUF(full[:cut])
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q", tt.Name)) {
			t.Errorf("cut inside %s: error %v does not name it", tt.Name, err)
		}
	}
	// A corrupt type field names the tensor too.
	bad := bytes.Clone(full)
	name := []byte("blk.0.attn_k.weight")
	i := bytes.Index(bad, name) + len(name) + 4 + 2*8 // rank u32, two dims
	bad[i] = 99
	if _, err := ParseGGUF(bad); err == nil || !strings.Contains(err.Error(), "blk.0.attn_k.weight") {
		t.Errorf("corrupt type: %v", err)
	}
}
