package model

import (
	"bytes"
	"context"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tandemllm/tandem/engine/native/kernels"
)

// testModels returns small models covering every architectural switch.
func testModels(t *testing.T) map[string]*Model {
	t.Helper()
	out := map[string]*Model{}
	base, err := Shape("tiny")
	if err != nil {
		t.Fatal(err)
	}
	variants := map[string]func(c *Config){
		"llama":        func(c *Config) {},
		"llama-untied": func(c *Config) { c.Tied = false },
		"llama3-rope": func(c *Config) {
			c.RopeTheta = 500000
			c.RopeFreqFactors = Llama3FreqFactors(c.HeadDim, c.RopeTheta, 8, 1, 4, 64)
		},
		"qwen2": func(c *Config) { c.Arch, c.Rope, c.QKVBias = "qwen2", RopeHalf, true },
		"qwen3": func(c *Config) { c.Arch, c.Rope, c.QKNorm, c.HeadDim = "qwen3", RopeHalf, true, 32 },
	}
	for name, f := range variants {
		c := base
		f(&c)
		m, err := Generate(c, 7)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out[name] = m
		q, err := Generate(c, 7)
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Quantize(); err != nil {
			t.Fatal(err)
		}
		out[name+"-q8"] = q
	}
	return out
}

// TestBatchedEqualsSingle is the contract prefix caching and KV transfer
// rest on: one prefill of a prompt, the same prompt token by token, and the
// prompt split into chunks next to another sequence all give bitwise-equal
// logits and K/V, with either KV cache type.
func TestBatchedEqualsSingle(t *testing.T) {
	pool := kernels.NewPool(2)
	defer pool.Close()
	ctx := context.Background()
	for _, kvt := range []KVType{KVF32, KVF16} {
		for name, m := range testModels(t) {
			t.Run(kvt.String()+"/"+name, func(t *testing.T) { testBatchedEqualsSingle(t, ctx, pool, m, kvt) })
		}
	}
}

func testBatchedEqualsSingle(t *testing.T, ctx context.Context, pool *kernels.Pool, m *Model, kvt KVType) {
	c := &m.Config
	r := NewRand(3)
	prompt := make([]int32, 37)
	for i := range prompt {
		prompt[i] = int32(r.Uint64() % uint64(c.Vocab))
	}
	other := slices.Clone(prompt[:20])
	slices.Reverse(other)
	run := func(chunks []int, withOther bool) ([]float32, *KVStore) {
		kv, err := NewKVStoreOf(c, 8, 16, kvt)
		if err != nil {
			t.Fatal(err)
		}
		blocks := []int32{9, 3, 4, 12, 0}
		oblocks := []int32{1, 2, 5}
		st := &State{}
		logits := make([]float32, c.Vocab)
		ologits := make([]float32, c.Vocab)
		pos := 0
		for i, n := range chunks {
			seqs := []Seq{{Tokens: prompt[pos : pos+n], Pos: pos, Blocks: blocks}}
			if i == len(chunks)-1 {
				seqs[0].Logits = logits
			}
			if withOther && i < len(other) {
				seqs = append([]Seq{{Tokens: other[:i+1][i:], Pos: i, Blocks: oblocks, Logits: ologits}}, seqs...)
			}
			if err := m.Forward(ctx, pool, st, kv, seqs); err != nil {
				t.Fatal(err)
			}
			pos += n
		}
		return logits, kv
	}
	ones := make([]int, len(prompt))
	for i := range ones {
		ones[i] = 1
	}
	refLogits, refKV := run(ones, false)
	for _, tc := range []struct {
		name   string
		chunks []int
		other  bool
	}{
		{"prefill", []int{len(prompt)}, false},
		{"chunks", []int{5, 11, 1, 20}, false},
		{"chunks-with-other", []int{3, 3, 3, 3, 25}, true},
	} {
		logits, kv := run(tc.chunks, tc.other)
		if !slices.Equal(logits, refLogits) {
			t.Errorf("%s: logits differ by %g", tc.name, maxAbsDiff(logits, refLogits))
		}
		got, want := make([]float32, kv.BlockFloats()), make([]float32, kv.BlockFloats())
		for l := range c.Layers {
			for _, b := range []int{9, 3, 4, 12, 0} {
				for _, v := range []bool{false, true} {
					kv.ReadBlock(got, l, b, v)
					refKV.ReadBlock(want, l, b, v)
					if !slices.Equal(got, want) {
						t.Fatalf("%s: layer %d block %d K/V differ", tc.name, l, b)
					}
				}
			}
		}
	}
}

// TestKVF16Tolerance bounds what an fp16 KV cache changes: the last
// logits of a 37-token prompt, token by token, against the fp32 cache,
// max |Δ| ≤ 0.01 × max |logit| with fp32 weights (keys and values rounded
// to 11 bits), 0.05 with Q8_0 weights, whose int8 activations turn those
// small changes into whole rounding steps (within TestQ8Tolerance's bound;
// the observed figures are in docs/benchmarks.md).
func TestKVF16Tolerance(t *testing.T) {
	pool := kernels.NewPool(2)
	defer pool.Close()
	for name, m := range testModels(t) {
		t.Run(name, func(t *testing.T) {
			c := &m.Config
			r := NewRand(5)
			var logits [2][]float32
			for i, kvt := range []KVType{KVF32, KVF16} {
				kv, err := NewKVStoreOf(c, 8, 8, kvt)
				if err != nil {
					t.Fatal(err)
				}
				st, blocks := &State{}, []int32{0, 1, 2, 3, 4}
				logits[i] = make([]float32, c.Vocab)
				r := *r
				for p := range 37 {
					tok := int32(r.Uint64() % uint64(c.Vocab))
					if err := m.Forward(context.Background(), pool, st, kv, []Seq{{Tokens: []int32{tok}, Pos: p, Blocks: blocks, Logits: logits[i]}}); err != nil {
						t.Fatal(err)
					}
				}
			}
			var top float64
			for _, v := range logits[0] {
				top = max(top, math.Abs(float64(v)))
			}
			tol := 0.01
			if strings.HasSuffix(name, "-q8") {
				tol = 0.05
			}
			if d := maxAbsDiff(logits[0], logits[1]); d > tol*top || d == 0 {
				t.Fatalf("f16 cache moved the logits by %g (max |logit| %g)", d, top)
			}
		})
	}
}

// TestQ8Tolerance bounds the logit error of Q8_0 weights and activations
// against fp32 on the same random model: max |Δ| ≤ 0.05 × max |logit|
// (the observed figure is logged, and kept in docs/benchmarks.md).
func TestQ8Tolerance(t *testing.T) {
	pool := kernels.NewPool(2)
	defer pool.Close()
	ms := testModels(t)
	for _, name := range []string{"llama", "qwen3"} {
		f, q := ms[name], ms[name+"-q8"]
		logits := func(m *Model) []float32 {
			kv, _ := NewKVStore(&m.Config, 16, 4)
			out := make([]float32, m.Config.Vocab)
			toks := []int32{1, 5, 9, 77, 100, 3, 2, 250}
			if err := m.Forward(context.Background(), pool, &State{}, kv, []Seq{{Tokens: toks, Blocks: []int32{0}, Logits: out}}); err != nil {
				t.Fatal(err)
			}
			return out
		}
		a, b := logits(f), logits(q)
		var scale float64
		for _, v := range a {
			scale = max(scale, float64(abs(v)))
		}
		d := maxAbsDiff(a, b)
		t.Logf("%s: max|Δlogit| = %.4g, max|logit| = %.4g", name, d, scale)
		if d > 0.05*scale {
			t.Errorf("%s: Q8_0 logits off by %g (max logit %g)", name, d, scale)
		}
	}
}

func abs(v float32) float32 {
	if v < 0 {
		return -v
	}
	return v
}

func TestLlama2CRoundTrip(t *testing.T) {
	ms := testModels(t)
	for _, name := range []string{"llama", "llama-untied"} {
		m := ms[name]
		var buf bytes.Buffer
		if err := WriteLlama2C(&buf, m); err != nil {
			t.Fatal(err)
		}
		got, err := ParseLlama2C(buf.Bytes())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !slices.Equal(got.Layers[1].W2.F, m.Layers[1].W2.F) || !slices.Equal(got.Output.F, m.Output.F) || got.Config.Tied != m.Config.Tied {
			t.Fatalf("%s: round trip changed the weights", name)
		}
	}
	if err := WriteLlama2C(&bytes.Buffer{}, ms["qwen3"]); err == nil {
		t.Fatal("qwen3 written as llama2.c")
	}
}

func TestLlama2CErrors(t *testing.T) {
	var good bytes.Buffer
	if err := WriteLlama2C(&good, testModels(t)["llama"]); err != nil {
		t.Fatal(err)
	}
	hdr := func(vals ...int32) []byte {
		b := slices.Clone(good.Bytes())
		for i, v := range vals {
			b[4*i], b[4*i+1], b[4*i+2], b[4*i+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
		}
		return b
	}
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "shorter than the 28-byte header"},
		{"truncated", good.Bytes()[:good.Len()-10], "implies"},
		{"trailing", append(slices.Clone(good.Bytes()), 0, 0, 0, 0), "implies"},
		{"zero-dim", hdr(0), "dim = 0"},
		{"heads", hdr(64, 128, 2, 3), "not a multiple of n_heads"},
		{"kvheads", hdr(64, 128, 2, 4, 3), "not a multiple of n_kv_heads"},
		{"huge", hdr(1 << 30), "out of range"},
		{"magic", hdr(0x616b3432), "ak42"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseLlama2C(tc.data)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	path := filepath.Join(t.TempDir(), "bad.bin")
	if _, err := LoadLlama2C(path); err == nil || !strings.Contains(err.Error(), "bad.bin") {
		t.Fatalf("missing file error %v does not name the file", err)
	}
}

// TestDecodeDoesNotAllocate: a steady-state decode step (after the first,
// which sizes the buffers) allocates nothing, whatever the thread count.
func TestDecodeDoesNotAllocate(t *testing.T) {
	ms := testModels(t)
	for _, name := range []string{"llama", "llama-q8"} {
		m := ms[name]
		for _, threads := range []int{1, 2} {
			pool := kernels.NewPool(threads)
			kv, err := NewKVStore(&m.Config, 16, 4)
			if err != nil {
				t.Fatal(err)
			}
			st := &State{}
			seqs := []Seq{{Tokens: []int32{3}, Blocks: []int32{0, 1, 2, 3}, Logits: make([]float32, m.Config.Vocab)}}
			ctx := context.Background()
			step := func() {
				if err := m.Forward(ctx, pool, st, kv, seqs); err != nil {
					t.Fatal(err)
				}
				seqs[0].Pos++
			}
			step()
			if n := testing.AllocsPerRun(20, step); n != 0 {
				t.Errorf("%s, %d threads: %v allocations per decode step", name, threads, n)
			}
			pool.Close()
		}
	}
}
