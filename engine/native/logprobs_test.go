package native

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/native/kernels"
	"github.com/tandemllm/tandem/engine/native/model"
)

// refLogSoftmax recomputes, outside the engine, the log-softmax of the
// model's logits after tokens: a fresh forward pass over the whole
// sequence, then log(exp(x_i) / sum_j exp(x_j)) in float64.
func refLogSoftmax(t *testing.T, m *model.Model, tokens []engine.Token) []float64 {
	t.Helper()
	c := &m.Config
	const bs = 16
	nb := (len(tokens) + bs - 1) / bs
	kv, err := model.NewKVStore(c, bs, nb)
	if err != nil {
		t.Fatal(err)
	}
	blocks := make([]int32, nb)
	for i := range blocks {
		blocks[i] = int32(i)
	}
	logits := make([]float32, c.Vocab)
	pool := kernels.NewPool(1)
	defer pool.Close()
	if err := m.Forward(context.Background(), pool, &model.State{}, kv, []model.Seq{{Tokens: tokens, Blocks: blocks, Logits: logits}}); err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v))
	}
	out := make([]float64, len(logits))
	for i, v := range logits {
		out[i] = math.Log(math.Exp(float64(v)) / sum)
	}
	return out
}

// TestLogprobsAreLogSoftmax: every generated token's logprob, and each of
// its top alternatives, equals the log-softmax of the model's raw logits
// computed independently; the top list is the most likely tokens in
// order; the engine's log-softmax over the full vocabulary sums to 1.
func TestLogprobsAreLogSoftmax(t *testing.T) {
	m := tinyModel(t, nil)
	e := newEngine(t, m, Options{})
	prompt := randPrompt(7, 3, m.Config.Vocab)
	for _, tc := range []struct {
		name string
		req  engine.Request
	}{
		{"greedy", engine.Request{Prompt: prompt, MaxTokens: 6, IgnoreEOS: true, Logprobs: true, TopLogprobs: 5}},
		{"sampled, min tokens masking EOS", engine.Request{Prompt: prompt, MaxTokens: 6, MinTokens: 6, Logprobs: true, TopLogprobs: 20,
			Sampling: engine.Sampling{Temperature: 1.3, TopK: 7, Seed: 5, HasSeed: true}}},
		{"no top", engine.Request{Prompt: prompt, MaxTokens: 3, IgnoreEOS: true, Logprobs: true}},
	} {
		st, err := e.Generate(context.Background(), &tc.req)
		if err != nil {
			t.Fatal(err)
		}
		var toks []engine.Token
		var lps []engine.TokenLogprob
		for {
			d, err := st.Recv()
			if err != nil {
				break
			}
			if len(d.Logprobs) != len(d.Tokens) {
				t.Fatalf("%s: %d logprobs for %d tokens", tc.name, len(d.Logprobs), len(d.Tokens))
			}
			toks, lps = append(toks, d.Tokens...), append(lps, d.Logprobs...)
		}
		if len(toks) != tc.req.MaxTokens {
			t.Fatalf("%s: %d tokens", tc.name, len(toks))
		}
		seq := append([]engine.Token{}, prompt...)
		for i, tok := range toks {
			ref := refLogSoftmax(t, m, seq)
			lp := lps[i]
			if lp.Token != tok || math.Abs(float64(lp.Logprob)-ref[tok]) > 1e-3 {
				t.Fatalf("%s: token %d: logprob %v of %d, want %v", tc.name, i, lp.Logprob, lp.Token, ref[tok])
			}
			if len(lp.Top) != tc.req.TopLogprobs {
				t.Fatalf("%s: %d alternatives, want %d", tc.name, len(lp.Top), tc.req.TopLogprobs)
			}
			for k, alt := range lp.Top {
				if math.Abs(float64(alt.Logprob)-ref[alt.Token]) > 1e-3 {
					t.Fatalf("%s: alternative %d: %v, want %v", tc.name, k, alt.Logprob, ref[alt.Token])
				}
				if k > 0 && alt.Logprob > lp.Top[k-1].Logprob {
					t.Fatalf("%s: alternatives out of order: %v", tc.name, lp.Top)
				}
				better := 0
				for _, v := range ref {
					if v > ref[alt.Token]+1e-6 {
						better++
					}
				}
				if better > k {
					t.Fatalf("%s: alternative %d (%d) has %d better tokens", tc.name, k, alt.Token, better)
				}
			}
			seq = append(seq, tok)
		}
	}
	// The engine's own log-softmax over the full vocabulary sums to 1.
	logits := make([]float32, m.Config.Vocab)
	for i := range logits {
		logits[i] = float32(math.Sin(float64(i))) * 9
	}
	var sum float64
	for i := range logits {
		v, _ := logprobsOf(logits, int32(i), 0, nil)
		sum += math.Exp(float64(v))
	}
	if math.Abs(sum-1) > 1e-4 {
		t.Fatalf("sum of exp(logprob) over the vocabulary = %v", sum)
	}
}

// TestExpSum: the polynomial exponentials' sum stays within 2e-5 of
// math.Exp's, from logits all alike to logits spread past float32's
// exponent range.
func TestExpSum(t *testing.T) {
	for _, spread := range []float64{0, 0.01, 1, 12, 60, 200} {
		xs := make([]float32, 5000)
		m := float32(math.Inf(-1))
		for i := range xs {
			xs[i] = float32(math.Sin(float64(i)*1.7) * spread)
			m = max(m, xs[i])
		}
		var want float64
		for _, x := range xs {
			want += math.Exp(float64(x - m))
		}
		if got := expSum(xs, m); math.Abs(got-want)/want > 2e-5 {
			t.Errorf("spread %v: %v, want %v", spread, got, want)
		}
	}
}

// BenchmarkLogprobsOf: the cost per generated token of logprobs over a
// Qwen3-sized vocabulary (151936), without and with 20 alternatives.
func BenchmarkLogprobsOf(b *testing.B) {
	logits := make([]float32, 151936)
	for i := range logits {
		logits[i] = float32(math.Sin(float64(i)*0.37)) * 12
	}
	b.Run("math.Exp sum", func(b *testing.B) {
		for b.Loop() {
			var sum float64
			for _, v := range logits {
				sum += math.Exp(float64(v - 12))
			}
			_ = sum
		}
	})
	for _, top := range []int{0, 20} {
		b.Run(fmt.Sprintf("top=%d", top), func(b *testing.B) {
			buf := make([]engine.TopLogprob, 0, top)
			for b.Loop() {
				_, buf = logprobsOf(logits, 7, top, buf)
			}
		})
	}
}
