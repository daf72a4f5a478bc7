package native

import (
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"

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

// sortedSample is sample as it was before the top-k/top-p cuts stopped
// sorting the vocabulary (a stable sort of every candidate): the
// reference that sample must match draw for draw, seed for seed.
func sortedSample(s *sampler, logits []float32) int32 {
	if s.p.Temperature <= 0 || s.p.TopK == 1 {
		return argmax(logits)
	}
	inv := 1 / s.p.Temperature
	if !s.cuts(len(logits)) {
		return s.sampleAll(logits, inv)
	}
	s.idx = s.idx[:0]
	for i, v := range logits {
		if !math.IsInf(float64(v), -1) {
			s.idx = append(s.idx, int32(i))
		}
	}
	if len(s.idx) == 0 {
		return argmax(logits)
	}
	slices.SortStableFunc(s.idx, func(a, b int32) int {
		switch {
		case logits[a] > logits[b]:
			return -1
		case logits[a] < logits[b]:
			return 1
		}
		return 0
	})
	if k := s.p.TopK; k > 0 && k < len(s.idx) {
		s.idx = s.idx[:k]
	}
	s.prob = s.prob[:0]
	m := logits[s.idx[0]]
	var sum float64
	for _, id := range s.idx {
		e := math.Exp(float64((logits[id] - m) * inv))
		s.prob = append(s.prob, float32(e))
		sum += e
	}
	n := len(s.idx)
	if p := s.p.TopP; p > 0 && p < 1 {
		var cum float64
		for i, q := range s.prob {
			cum += float64(q) / sum
			if cum >= float64(p) {
				n = i + 1
				break
			}
		}
		sum = 0
		for _, q := range s.prob[:n] {
			sum += float64(q)
		}
	}
	r := s.rng.Float64() * sum
	var cum float64
	for i, q := range s.prob[:n] {
		cum += float64(q)
		if r < cum {
			return s.idx[i]
		}
	}
	return s.idx[n-1]
}

// TestSampleCutMatchesSort: with top-k and top-p cuts, sample (a bounded
// heap for top-k, the nucleus' buckets for top-p) draws the very token
// the full stable sort draws, seed for seed, over vocabularies with ties,
// -0, masked ids, NaN and +Inf, flat and peaked logits; and the nucleus
// falls back to the full sort when rounding leaves the cut in doubt.
func TestSampleCutMatchesSort(t *testing.T) {
	ninf, pinf := float32(math.Inf(-1)), float32(math.Inf(1))
	nan := float32(math.NaN())
	rng := rand.New(rand.NewPCG(5, 6))
	gen := map[string]func(n int) []float32{
		"normal": func(n int) []float32 {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(rng.NormFloat64() * 3)
			}
			return x
		},
		"peaked": func(n int) []float32 {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(rng.NormFloat64() * 2)
			}
			for range 5 {
				x[rng.IntN(n)] = 20 + float32(rng.IntN(4))
			}
			return x
		},
		"ties": func(n int) []float32 {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(rng.IntN(12)) / 2
				if x[i] == 0 && rng.IntN(2) == 0 {
					x[i] = float32(math.Copysign(0, -1))
				}
			}
			return x
		},
		"masked": func(n int) []float32 {
			x := make([]float32, n)
			for i := range x {
				x[i] = ninf
				if rng.IntN(3) == 0 {
					x[i] = float32(rng.NormFloat64() * 4)
				}
			}
			return x
		},
		"nan": func(n int) []float32 {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(rng.IntN(5))
			}
			x[rng.IntN(n)], x[rng.IntN(n)] = nan, pinf
			return x
		},
		"nan only": func(n int) []float32 {
			x := make([]float32, n)
			for i := range x {
				x[i] = ninf
			}
			x[rng.IntN(n)] = nan
			return x
		},
	}
	nucleusDraws, slow := 0, 0
	for _, name := range []string{"normal", "peaked", "ties", "masked", "nan", "nan only"} {
		for _, n := range []int{7, 300, 3000} {
			logits := gen[name](n)
			for _, temp := range []float32{0.6, 1, pinf} {
				for _, topK := range []int{0, 2, 20, 50, n / 2, n - 1, n, n + 5} {
					for _, topP := range []float32{0, 0.5, 0.9, 0.95, 0.999, 0.99999, 1} {
						p := engine.Sampling{Temperature: temp, TopK: topK, TopP: topP, Seed: uint64(n + topK), HasSeed: true}
						a, b := newSampler(p, 0), newSampler(p, 0)
						for d := range 3 {
							if x, y := a.sample(logits), sortedSample(b, logits); x != y {
								t.Fatalf("%s n=%d %+v draw %d: %d, sorted %d", name, n, p, d, x, y)
							}
						}
						if n > smallCut && topK >= n && topP > 0 && topP < 1 && name != "nan" {
							nucleusDraws += 3
							slow += a.slow
						}
					}
				}
			}
		}
	}
	// The top-p draws over more than smallCut candidates mostly sort the
	// nucleus alone (the 0.99999 nucleus of a flat vocabulary is all of it).
	t.Logf("nucleus draws %d, full sorts %d", nucleusDraws, slow)
	if slow*3 > nucleusDraws {
		t.Fatalf("nucleus draws %d, full sorts %d", nucleusDraws, slow)
	}
	// Two equal leaders share all the mass: with top_p 0.5 the first one's
	// share is 0.5 exactly, a rounding of the sum away from falling short.
	logits := make([]float32, 2000)
	for i := range logits {
		logits[i] = -100
	}
	logits[10], logits[1500] = 0, 0
	p := engine.Sampling{Temperature: 1, TopP: 0.5, Seed: 9, HasSeed: true}
	a, b := newSampler(p, 0), newSampler(p, 0)
	for range 20 {
		if x, y := a.sample(logits), sortedSample(b, logits); x != y || x != 10 {
			t.Fatalf("equal leaders: %d, sorted %d, want 10", x, y)
		}
	}
	if a.slow != 20 {
		t.Fatalf("full sorts %d, want 20", a.slow)
	}
}

// BenchmarkSample: one temperature draw over a Qwen3-sized vocabulary,
// with no cut, top_k 20, top_p 0.95 and 0.999, and top_k 20 with top_p
// 0.95 (Qwen3's recommendation, temperature 0.6); each iteration draws
// once by sample and once by the full sort it replaced (sortedSample),
// alternating which goes first, each timed in thread CPU: ns per draw of
// each and their ratio.
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
		{"none", engine.Sampling{Temperature: 1}},
		{"top_k=20", engine.Sampling{Temperature: 1, TopK: 20}},
		{"top_p=0.95", engine.Sampling{Temperature: 1, TopP: 0.95}},
		{"top_p=0.999", engine.Sampling{Temperature: 1, TopP: 0.999}},
		{"top_k=20,top_p=0.95,t=0.6", engine.Sampling{Temperature: 0.6, TopK: 20, TopP: 0.95}},
	} {
		b.Run(c.name, func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			fast, sorted := newSampler(c.p, 1), newSampler(c.p, 1)
			var tf, ts time.Duration
			i := 0
			for b.Loop() {
				for j := range 2 {
					t0 := threadCPU()
					if (i+j)%2 == 0 {
						fast.sample(logits)
						tf += threadCPU() - t0
					} else {
						sortedSample(sorted, logits)
						ts += threadCPU() - t0
					}
				}
				i++
			}
			b.ReportMetric(float64(tf.Nanoseconds())/float64(i), "ns/draw")
			b.ReportMetric(float64(ts.Nanoseconds())/float64(i), "sorted-ns/draw")
			b.ReportMetric(float64(ts)/float64(tf), "ratio")
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
