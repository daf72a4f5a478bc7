package native

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tandemllm/tandem/engine"
)

// TestSamplerDistribution: temperature sampling draws each token with its
// softmax probability (logits over temperature), never a masked (-Inf)
// one, with and without top-k/top-p (the cut-free path draws in id order
// without sorting); one seed gives one sequence.
func TestSamplerDistribution(t *testing.T) {
	ninf := float32(math.Inf(-1))
	logits := []float32{0, 1, 2, ninf, 0.5, -1, ninf}
	for _, c := range []struct {
		name string
		p    engine.Sampling
	}{
		{"temperature 1", engine.Sampling{Temperature: 1}},
		{"temperature 0.5", engine.Sampling{Temperature: 0.5}},
		{"top-k all", engine.Sampling{Temperature: 1, TopK: 5}},
		{"top-p 1", engine.Sampling{Temperature: 0.7, TopP: 1}},
		{"top-p almost 1", engine.Sampling{Temperature: 1, TopP: 0.99999}},
	} {
		t.Run(c.name, func(t *testing.T) {
			want := make([]float64, len(logits))
			var sum float64
			for i, v := range logits {
				if v > ninf {
					want[i] = math.Exp(float64(v) / float64(c.p.Temperature))
					sum += want[i]
				}
			}
			const draws = 100000
			got := make([]float64, len(logits))
			s := newSampler(c.p, 1)
			for range draws {
				got[s.sample(logits)]++
			}
			for i := range want {
				want[i] /= sum
				if f := got[i] / draws; math.Abs(f-want[i]) > 0.01 || logits[i] == ninf && got[i] != 0 {
					t.Fatalf("token %d: drawn %.4f, want %.4f", i, f, want[i])
				}
			}
			c.p.Seed, c.p.HasSeed = 42, true
			a, b := newSampler(c.p, 1), newSampler(c.p, 2)
			for range 100 {
				if x, y := a.sample(logits), b.sample(logits); x != y {
					t.Fatalf("seeded samplers differ: %d, %d", x, y)
				}
			}
		})
	}
	all := []float32{ninf, ninf}
	if got := newSampler(engine.Sampling{Temperature: 1}, 1).sample(all); got != 0 {
		t.Fatalf("all masked: %d", got)
	}
}

// BenchmarkSample: one temperature draw over a Qwen3-sized vocabulary
// without a top-k/top-p cut (no sort) and with top_p 0.999 (the
// candidates sorted), in one run.
func BenchmarkSample(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	logits := make([]float32, 151936)
	for i := range logits {
		logits[i] = float32(rng.NormFloat64() * 3)
	}
	for _, c := range []struct {
		name string
		p    engine.Sampling
	}{
		{"temperature", engine.Sampling{Temperature: 1}},
		{"top_p=0.999", engine.Sampling{Temperature: 1, TopP: 0.999}},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := newSampler(c.p, 1)
			for b.Loop() {
				s.sample(logits)
			}
		})
	}
}

// TestSampleMasked: sampling over a constraint's mask without writing it
// into the logits picks what masking the logits first would: the same
// token greedily, the masked softmax's distribution at a temperature;
// nothing when no allowed token has a logit.
func TestSampleMasked(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	ninf := float32(math.Inf(-1))
	const n = 200 // the last word partly past the logits
	for round := range 50 {
		logits := make([]float32, n)
		for i := range logits {
			logits[i] = float32(rng.IntN(8)) // ties: the first of equals wins
		}
		logits[rng.IntN(n)] = ninf
		mask := make([]uint64, 4)
		for w := range mask {
			switch rng.IntN(3) {
			case 0:
				mask[w] = ^uint64(0)
			case 1:
				mask[w] = rng.Uint64() & rng.Uint64()
			}
		}
		masked := append([]float32(nil), logits...)
		any := false
		for i := range masked {
			if mask[i/64]&(1<<(i%64)) == 0 {
				masked[i] = ninf
			} else if masked[i] > ninf {
				any = true
			}
		}
		s := newSampler(engine.Sampling{}, 1)
		got, ok := s.sampleMasked(logits, mask)
		if ok != any || ok && got != argmax(masked) {
			t.Fatalf("round %d: greedy %d %v, want %d %v", round, got, ok, argmax(masked), any)
		}
		if !any {
			continue
		}
		if round%10 != 0 {
			continue
		}
		// Temperature 0.5: the masked softmax's frequencies.
		want := make([]float64, n)
		var sum float64
		for i, v := range masked {
			if v > ninf {
				want[i] = math.Exp(float64(v) * 2)
				sum += want[i]
			}
		}
		s = newSampler(engine.Sampling{Temperature: 0.5}, 1)
		counts := make([]float64, n)
		const draws = 50000
		for range draws {
			tok, ok := s.sampleMasked(logits, mask)
			if !ok {
				t.Fatal("no token")
			}
			counts[tok]++
		}
		for i := range want {
			if f := counts[i] / draws; math.Abs(f-want[i]/sum) > 0.01 || masked[i] == ninf && counts[i] != 0 {
				t.Fatalf("round %d token %d: drawn %.4f, want %.4f", round, i, f, want[i]/sum)
			}
		}
	}
}
