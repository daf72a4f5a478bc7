package native

import (
	"math"
	mbits "math/bits"
	"math/rand/v2"
	"slices"

	"github.com/tandemllm/tandem/engine"
)

// sampler draws the next token of one sequence. Its random stream is
// seeded per request, so a seeded request is reproducible whatever else the
// engine runs next to it.
type sampler struct {
	p    engine.Sampling
	rng  *rand.Rand
	idx  []int32   // scratch: candidate ids
	prob []float32 // scratch: candidate probabilities
}

func newSampler(p engine.Sampling, fallbackSeed uint64) *sampler {
	seed := p.Seed
	if !p.HasSeed {
		seed = fallbackSeed
	}
	return &sampler{p: p, rng: rand.New(rand.NewPCG(seed, 0x7a6e646d))}
}

// sample picks a token from logits, which it only reads.
func (s *sampler) sample(logits []float32) int32 {
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
	// Sorting the candidates once serves top-k, top-p and a stable
	// (seed-reproducible) draw order; ties keep id order.
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

// cuts reports whether a top-k or top-p cut applies to a temperature draw
// over n logits.
func (s *sampler) cuts(n int) bool {
	return s.p.Temperature > 0 && s.p.TopK != 1 && (s.p.TopK > 0 && s.p.TopK < n || s.p.TopP > 0 && s.p.TopP < 1)
}

// sampleMasked is sample over the tokens mask allows (bit id%64 of word
// id/64; a constraint's mask) for a sampler without a top-k/top-p cut
// (see cuts): it visits the allowed ids alone instead of writing -Inf over
// every other logit first, so a constrained step costs no more than an
// unconstrained one. It reads logits only; ok is false when no allowed
// token has a logit above -Inf.
func (s *sampler) sampleMasked(logits []float32, mask []uint64) (tok int32, ok bool) {
	ninf := float32(math.Inf(-1))
	words := min(len(mask), (len(logits)+63)/64)
	// The largest allowed logit (the first of equals), word by word:
	// whole words of allowed ids are scanned, others bit by bit.
	best, bestV := -1, ninf
	for w := range words {
		bits := mask[w]
		base := w * 64
		if bits == ^uint64(0) && base+64 <= len(logits) {
			for i, v := range logits[base : base+64] {
				if v > bestV {
					best, bestV = base+i, v
				}
			}
			continue
		}
		for bits != 0 {
			i := base + mbits.TrailingZeros64(bits)
			if i >= len(logits) {
				break
			}
			if v := logits[i]; v > bestV {
				best, bestV = i, v
			}
			bits &= bits - 1
		}
	}
	if best < 0 {
		return 0, false
	}
	if s.p.Temperature <= 0 || s.p.TopK == 1 {
		return int32(best), true
	}
	inv := 1 / s.p.Temperature
	s.idx, s.prob = s.idx[:0], s.prob[:0]
	var sum float64
	for w := range words {
		bits := mask[w]
		base := w * 64
		for bits != 0 {
			i := base + mbits.TrailingZeros64(bits)
			if i >= len(logits) {
				break
			}
			bits &= bits - 1
			if v := logits[i]; v > ninf {
				if e := float32(math.Exp(float64((v - bestV) * inv))); e > 0 {
					s.idx = append(s.idx, int32(i))
					s.prob = append(s.prob, e)
					sum += float64(e)
				}
			}
		}
	}
	r := s.rng.Float64() * sum
	var cum float64
	for k, q := range s.prob {
		cum += float64(q)
		if r < cum {
			return s.idx[k], true
		}
	}
	return s.idx[len(s.idx)-1], true
}

// sampleAll draws from the softmax of logits/temperature over every
// token not masked to -Inf, in id order: with no top-k or top-p cut there
// is no need to sort the candidates (a full vocabulary's sort costs far
// more than the forward pass of a small model), and the draw stays
// reproducible per seed.
func (s *sampler) sampleAll(logits []float32, inv float32) int32 {
	m := float32(math.Inf(-1))
	for _, v := range logits {
		if v > m {
			m = v
		}
	}
	if math.IsInf(float64(m), -1) {
		return argmax(logits)
	}
	if cap(s.prob) < len(logits) {
		s.prob = make([]float32, len(logits))
	}
	s.prob = s.prob[:len(logits)]
	var sum float64
	for i, v := range logits {
		var e float32
		if v > float32(math.Inf(-1)) {
			e = float32(math.Exp(float64((v - m) * inv)))
		}
		s.prob[i] = e
		sum += float64(e)
	}
	r := s.rng.Float64() * sum
	var cum float64
	last := int32(-1)
	for i, q := range s.prob {
		if q == 0 {
			continue
		}
		cum += float64(q)
		last = int32(i)
		if r < cum {
			return last
		}
	}
	if last < 0 {
		return argmax(logits)
	}
	return last
}

func argmax(x []float32) int32 {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return int32(best)
}

// logprobsOf returns the log-probability of tok under logits, and the top
// most likely tokens (most likely first, ties in id order) when top > 0:
// a log-softmax over the whole vocabulary in float64. The engine calls it on
// the model's raw logits, before temperature, top-k/top-p and the
// min_tokens mask, which is what vLLM returns by default
// (logprobs_mode "raw_logprobs", vllm/config/model.py).
func logprobsOf(logits []float32, tok int32, top int, buf []engine.TopLogprob) (float32, []engine.TopLogprob) {
	m := float32(math.Inf(-1))
	for _, v := range logits {
		if v > m {
			m = v
		}
	}
	lse := float64(m) + math.Log(expSum(logits, m))
	lp := func(v float32) float32 { return float32(float64(v) - lse) }
	if top <= 0 {
		return lp(logits[tok]), nil
	}
	// Keep the top ids in a small sorted list: most candidates fail the
	// comparison with its last entry.
	ids := buf[:0]
	for i, v := range logits {
		if len(ids) == top && v <= logits[ids[len(ids)-1].Token] {
			continue
		}
		at := len(ids)
		for at > 0 && v > logits[ids[at-1].Token] {
			at--
		}
		if len(ids) < top {
			ids = append(ids, engine.TopLogprob{})
		}
		copy(ids[at+1:], ids[at:len(ids)-1])
		ids[at] = engine.TopLogprob{Token: engine.Token(i)}
	}
	for i := range ids {
		ids[i].Logprob = lp(logits[ids[i].Token])
	}
	return lp(logits[tok]), ids
}

// expSum returns the sum of exp(x - m) over x, m being x's maximum. Each
// exponential is 2^t = 2^n * 2^f (t = (x-m)*log2(e), n = floor(t)) with
// 2^f from its degree-6 Taylor polynomial on [0, 1) (relative error below
// 2e-5, so below 2e-5 in the log-sum): float32 arithmetic, several times
// cheaper than math.Exp over a whole vocabulary, summed in float64.
// Terms below 2^-126 (about e^-87) are dropped: beside the maximum's 1
// they are nothing.
func expSum(xs []float32, m float32) float64 {
	const (
		log2e = 1.4426950408889634
		c1    = 0.6931471805599453 // ln 2
		c2    = c1 * c1 / 2
		c3    = c2 * c1 / 3
		c4    = c3 * c1 / 4
		c5    = c4 * c1 / 5
		c6    = c5 * c1 / 6
	)
	var sum float64
	for _, x := range xs {
		t := (x - m) * log2e
		if t < -126 {
			continue
		}
		n := int32(t) // t <= 0: truncation rounds up
		if float32(n) > t {
			n--
		}
		f := t - float32(n)
		p := 1 + f*(c1+f*(c2+f*(c3+f*(c4+f*(c5+f*c6)))))
		sum += float64(p * math.Float32frombits(uint32(n+127)<<23))
	}
	return sum
}
