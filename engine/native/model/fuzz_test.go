package model

import (
	"bytes"
	"testing"

	"github.com/tandemllm/tandem/engine/native/gguf"
)

// microModel is small enough that fuzzing mutates headers and tensor
// bytes in reasonable proportion.
func microModel(tb testing.TB, arch string) *Model {
	tb.Helper()
	c := Config{Arch: "llama", Dim: 32, Hidden: 32, Layers: 1, Heads: 2, KVHeads: 1, HeadDim: 16, Vocab: 8, SeqLen: 4,
		RopeTheta: 10000, NormEps: 1e-5, Tied: true}
	if arch == "qwen3" {
		c.Arch, c.Rope, c.QKNorm = "qwen3", RopeHalf, true
	}
	m, err := Generate(c, 1)
	if err != nil {
		tb.Fatal(err)
	}
	m.Vocab = &Vocab{Model: "llama", Tokens: []string{"<unk>", "<s>", "</s>", "a", "b", "▁a", "▁b", "ab"},
		Scores: []float32{0, 0, 0, -1, -2, -3, -4, -5}, BOS: 1, EOS: 2, AddBOS: true}
	return m
}

// FuzzLlama2C: any byte string either loads as a valid model or gives an
// error; it never panics or allocates beyond what the input implies.
func FuzzLlama2C(f *testing.F) {
	var buf bytes.Buffer
	if err := WriteLlama2C(&buf, microModel(f, "llama")); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add(buf.Bytes()[:28])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseLlama2C(b)
		if err == nil && m.Init() != nil {
			t.Fatal("loaded model fails validation")
		}
	})
}

// FuzzGGUF: the same contract for GGUF, through the model mapping (which
// reads every tensor and the tokenizer metadata).
func FuzzGGUF(f *testing.F) {
	for _, arch := range []string{"llama", "qwen3"} {
		for _, typ := range []gguf.Type{gguf.F32, gguf.F16, gguf.Q8_0} {
			var buf bytes.Buffer
			if err := WriteGGUF(&buf, microModel(f, arch), typ); err != nil {
				f.Fatal(err)
			}
			f.Add(buf.Bytes())
		}
	}
	for _, qn := range []string{"q4_0", "q4_k_m", "q5_k_m", "q6_k", "bf16"} {
		q, _ := ParseQuant(qn)
		var buf bytes.Buffer
		if err := WriteGGUFQuant(&buf, kquantModel(f, "llama", 1), q); err != nil {
			f.Fatal(err)
		}
		f.Add(buf.Bytes())
	}
	f.Add([]byte("GGUF\x03\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseGGUF(b)
		if err == nil && m.Init() != nil {
			t.Fatal("loaded model fails validation")
		}
	})
}
