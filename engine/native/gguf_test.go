package native

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/native/gguf"
	"github.com/tandemllm/tandem/engine/native/model"
)

// TestGGUFReferenceGolden converts stories260K to GGUF (weights and
// tokenizer in one file) and reproduces the golden text from it.
func TestGGUFReferenceGolden(t *testing.T) {
	dir := refDir(t)
	m, err := model.LoadLlama2C(filepath.Join(dir, "stories260K.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if m.Vocab, err = VocabFromFile(filepath.Join(dir, "tok512.bin")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "stories260K.gguf")
	var buf bytes.Buffer
	if err := model.WriteGGUF(&buf, m, gguf.F32); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	e, l, err := Load(path, Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ids := append([]engine.Token{1}, l.Tokenizer.Encode("Once upon a time")...)
	if !slices.Equal(ids, []engine.Token{1, 403, 407, 261, 378}) {
		t.Fatalf("GGUF tokenizer encodes %v", ids)
	}
	s, err := e.Generate(context.Background(), &engine.Request{Prompt: ids, MaxTokens: 60})
	if err != nil {
		t.Fatal(err)
	}
	r := collect(t, s)
	want, _ := os.ReadFile(filepath.Join(dir, "golden-once-upon-a-time.txt"))
	if got := strings.TrimPrefix(l.Tokenizer.Decode(append(ids[1:], r.tokens...)), " ") + "\n"; got != string(want) {
		t.Fatalf("got %q\nwant %q", got, want)
	}
}

// TestGGUFRoundTrip writes every architecture variant as F32, F16 and
// Q8_0 and checks the loaded model's logits: F32 and Q8_0 bitwise equal to
// the in-memory model (Q8_0: after the same quantization), F16 within
// 1e-2 relative.
func TestGGUFRoundTrip(t *testing.T) {
	variants := map[string]func(c *model.Config){
		"llama":  func(c *model.Config) {},
		"untied": func(c *model.Config) { c.Tied = false },
		"llama3": func(c *model.Config) {
			c.RopeFreqFactors = model.Llama3FreqFactors(c.HeadDim, 500000, 8, 1, 4, 64)
			c.RopeTheta = 500000
		},
		"qwen2": func(c *model.Config) { c.Arch, c.Rope, c.QKVBias = "qwen2", model.RopeHalf, true },
		"qwen3": func(c *model.Config) { c.Arch, c.Rope, c.QKNorm, c.HeadDim = "qwen3", model.RopeHalf, true, 32 },
	}
	toks := []engine.Token{1, 7, 99, 4, 250, 31}
	logits := func(m *model.Model) []float32 {
		e := newEngine(t, m, Options{})
		kv, _ := model.NewKVStore(&m.Config, 16, 2)
		out := make([]float32, m.Config.Vocab)
		if err := m.Forward(context.Background(), e.pool, &model.State{}, kv, []model.Seq{{Tokens: toks, Blocks: []int32{0}, Logits: out}}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	for name, mut := range variants {
		for _, typ := range []gguf.Type{gguf.F32, gguf.F16, gguf.Q8_0} {
			t.Run(name+"/"+typ.String(), func(t *testing.T) {
				ref := tinyModel(t, mut)
				var buf bytes.Buffer
				if err := model.WriteGGUF(&buf, ref, typ); err != nil {
					t.Fatal(err)
				}
				got, err := model.ParseGGUF(buf.Bytes())
				if err != nil {
					t.Fatal(err)
				}
				if got.Config.Tied != ref.Config.Tied || got.Config.Arch != ref.Config.Arch {
					t.Fatalf("config %+v", got.Config)
				}
				if typ == gguf.Q8_0 {
					if err := ref.Quantize(); err != nil {
						t.Fatal(err)
					}
				}
				a, b := logits(ref), logits(got)
				switch typ {
				case gguf.F16:
					var scale float64
					for _, v := range a {
						scale = max(scale, float64(abs32(v)))
					}
					for i := range a {
						if d := float64(abs32(a[i] - b[i])); d > 1e-2*scale {
							t.Fatalf("F16 logit %d: %g vs %g", i, b[i], a[i])
						}
					}
				default:
					if !slices.Equal(a, b) {
						t.Fatal("logits differ after the round trip")
					}
				}
			})
		}
	}
}

func TestGGUFErrors(t *testing.T) {
	ref := tinyModel(t, nil)
	var buf bytes.Buffer
	if err := model.WriteGGUF(&buf, ref, gguf.F32); err != nil {
		t.Fatal(err)
	}
	good := buf.Bytes()
	patch := func(old, new string) []byte {
		return bytes.Replace(slices.Clone(good), []byte(old), []byte(new), 1)
	}
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "end of file"},
		{"magic", []byte("GGML1234"), "not a GGUF"},
		{"truncated-header", good[:40], "more than the file can hold"},
		{"truncated-data", good[:len(good)-100], "runs past the end"},
		{"arch", patch("\x05\x00\x00\x00\x00\x00\x00\x00llama", "\x05\x00\x00\x00\x00\x00\x00\x00gpt-j"), "unsupported architecture"},
		{"missing-tensor", patch("blk.1.ffn_up.weight", "blk.1.ffn_xx.weight"), "blk.1.ffn_up.weight is missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := model.ParseGGUF(tc.data)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	path := filepath.Join(t.TempDir(), "cut.gguf")
	os.WriteFile(path, good[:len(good)/2], 0o644)
	if _, err := LoadModel(path); err == nil || !strings.Contains(err.Error(), "cut.gguf") {
		t.Fatalf("error %v does not name the file", err)
	}
}

func TestGenerateModelFile(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, dtype string }{{"a.bin", ""}, {"b.gguf", "q8_0"}, {"c.gguf", "f16"}} {
		p := filepath.Join(dir, tc.name)
		if err := GenerateModelFile(p, "tiny", 3, tc.dtype); err != nil {
			t.Fatal(err)
		}
		again := p + ".again"
		if err := GenerateModelFile(again+filepath.Ext(p), "tiny", 3, tc.dtype); err != nil {
			t.Fatal(err)
		}
		a, _ := os.ReadFile(p)
		b, _ := os.ReadFile(again + filepath.Ext(p))
		if !bytes.Equal(a, b) {
			t.Fatalf("%s: not deterministic", tc.name)
		}
		var err error
		if filepath.Ext(p) == ".bin" {
			_, err = model.LoadLlama2C(p)
		} else {
			_, err = model.LoadGGUF(p)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := GenerateModelFile(filepath.Join(dir, "x.bin"), "0.6b", 1, ""); err == nil {
		t.Fatal("qwen3 shape written as llama2.c")
	}
}
