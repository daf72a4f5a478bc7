package native

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tandemllm/tandem/engine/native/model"
)

// TestHFDirectories generates a Hugging Face directory of each
// architecture (one file and sharded, bf16/f16/f32), loads it with its
// tokenizer, converts it to GGUF the way llama.cpp's converter does (Llama
// q/k permuted to interleaved RoPE) and checks the GGUF model's logits
// equal the directory's: the permutation and the tensor mapping are right.
func TestHFDirectories(t *testing.T) {
	tok := filepath.Join(refDir(t), "tok512.bin")
	old := hfShardBytes
	defer func() { hfShardBytes = old }()
	for _, c := range []struct {
		shape, dtype string
		shard        int64
	}{{"tiny", "bf16", 0}, {"tiny", "f32", 40_000}, {"tiny-qwen3", "f16", 0}, {"tiny-qwen2", "bf16", 50_000}} {
		t.Run(c.shape+"-"+c.dtype, func(t *testing.T) {
			hfShardBytes = c.shard
			if c.shard == 0 {
				hfShardBytes = 2 << 30
			}
			dir := filepath.Join(t.TempDir(), "m")
			if err := GenerateModel(dir, GenOptions{Shape: c.shape, Seed: 2, DType: c.dtype, Tokenizer: tok, HF: true}); err != nil {
				t.Fatal(err)
			}
			_, idxErr := os.Stat(filepath.Join(dir, "model.safetensors.index.json"))
			if (c.shard > 0) != (idxErr == nil) {
				t.Fatalf("shard %d: index present = %v", c.shard, idxErr == nil)
			}
			l, err := LoadModel(dir)
			if err != nil {
				t.Fatal(err)
			}
			if ids := l.Tokenizer.Encode("Once upon a time"); len(ids) != 4 {
				t.Fatalf("tokenizer from the directory encodes %v", ids)
			}
			gg := filepath.Join(t.TempDir(), "m.gguf")
			if err := QuantizeModelFile(dir, gg, "f32"); err != nil {
				t.Fatal(err)
			}
			g, err := LoadModel(gg)
			if err != nil {
				t.Fatal(err)
			}
			toks := []int32{1, 403, 407, 261, 378, 9, 77}
			a := tandemSteps(t, l.Model, toks, []int32{5, 6})
			b := tandemSteps(t, g.Model, toks, []int32{5, 6})
			for i := range a {
				for j := range a[i] {
					if d := a[i][j] - b[i][j]; d > 1e-5 || d < -1e-5 {
						t.Fatalf("step %d token %d: directory %g, GGUF %g", i, j, a[i][j], b[i][j])
					}
				}
			}
		})
	}
}

// TestHFCorruptNamesTensor: a missing or mis-shaped tensor and a bad
// config are refused by name.
func TestHFCorruptNamesTensor(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m")
	if err := GenerateModel(dir, GenOptions{Shape: "tiny", Seed: 2, DType: "bf16", HF: true}); err != nil {
		t.Fatal(err)
	}
	st := filepath.Join(dir, "model.safetensors")
	b, _ := os.ReadFile(st)
	os.WriteFile(st, b[:len(b)-100], 0o644)
	if _, err := model.LoadHF(dir); err == nil || !strings.Contains(err.Error(), "tensor") {
		t.Fatalf("truncated shard: %v", err)
	}
	os.WriteFile(st, b, 0o644)
	cfg := filepath.Join(dir, "config.json")
	cb, _ := os.ReadFile(cfg)
	os.WriteFile(cfg, []byte(strings.Replace(string(cb), `"num_hidden_layers": 2`, `"num_hidden_layers": 3`, 1)), 0o644)
	if _, err := model.LoadHF(dir); err == nil || !strings.Contains(err.Error(), "model.layers.2.") {
		t.Fatalf("missing layer: %v", err)
	}
	os.WriteFile(cfg, []byte(strings.Replace(string(cb), "LlamaForCausalLM", "GPT2LMHeadModel", 1)), 0o644)
	if _, err := model.LoadHF(dir); err == nil || !strings.Contains(err.Error(), "architectures") {
		t.Fatalf("unsupported architecture: %v", err)
	}
}
