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
	keys []uint64  // scratch: candidates' rank keys (see rankKey)
	tmp  []uint64  // scratch: sortKeys' second buffer
	slow int       // top-p draws whose nucleus took a sort of every candidate
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
	return s.sampleCut(logits, inv)
}

// sampleCut is sample with a top-k or top-p cut. The draw is defined over
// the candidates (logits above -Inf) in descending logit order, ties in id
// order ("rank order"): the top k kept, their softmax summed in rank
// order, the nucleus the shortest rank prefix whose cumulative share
// reaches top_p. Sorting the whole vocabulary for that costs far more
// than a forward pass of a small model, so only the candidates that can
// matter are sorted: the top k by a bounded heap, or for top-p alone the
// tokens of the few highest probability buckets (see nucleus). Each path
// does the same float arithmetic in the same order as a full sort would,
// so a seed draws the same token whichever path runs.
func (s *sampler) sampleCut(logits []float32, inv float32) int32 {
	ninf := float32(math.Inf(-1))
	m, n, odd := ninf, 0, false
	for _, v := range logits {
		switch {
		case v != v:
			odd = true
		case v > ninf:
			n++
			if v > m {
				m = v
			}
		}
	}
	if odd || math.IsInf(float64(m), 1) {
		// NaN or +Inf logits (a broken model): the comparison sort's
		// order, whatever it makes of them.
		s.sortStable(logits)
		if k := s.p.TopK; k > 0 && k < len(s.idx) {
			s.idx = s.idx[:k]
		}
		return s.drawRanked(logits, inv)
	}
	if n == 0 {
		return argmax(logits)
	}
	k := s.p.TopK
	if k <= 0 || k > n {
		k = n
	}
	topP := s.p.TopP > 0 && s.p.TopP < 1
	switch {
	case k < n && k <= maxHeapK:
		s.selectTop(logits, k)
	case k == n && topP && n > smallCut:
		if tok, ok := s.nucleus(logits, m, inv); ok {
			return tok
		}
		s.slow++
		s.sortAll(logits, n)
	default:
		s.sortAll(logits, k)
	}
	return s.drawRanked(logits, inv)
}

const (
	// maxHeapK bounds the top-k that a bounded heap selects; a larger k
	// sorts every candidate.
	maxHeapK = 4096
	// smallCut: with this many candidates or fewer a top-p draw sorts
	// them all.
	smallCut = 512
	// negligibleX: exp(x) below it is under 2^-53, which added to a sum
	// of at least 1 (the largest candidate's term) changes nothing.
	negligibleX = -37
	// bucketsPerUnit: the nucleus' probability buckets per unit of
	// (logit - max) / temperature.
	bucketsPerUnit = 8
	nBuckets       = -negligibleX*bucketsPerUnit + 1
)

// rankKey orders candidates by rank: descending logit (-0 equal to 0),
// then ascending id; smaller keys rank first.
func rankKey(v float32, id int) uint64 {
	b := math.Float32bits(v)
	if v == 0 {
		b = 0
	}
	if b>>31 != 0 {
		b = ^b
	} else {
		b |= 1 << 31
	}
	return uint64(^b)<<32 | uint64(uint32(id))
}

// sortKeys sorts s.keys, appended in ascending id order: a stable radix
// sort on their logit halves (three passes of 11 bits), so equal logits
// keep id order; a comparison sort for a few keys.
func (s *sampler) sortKeys() {
	if len(s.keys) <= 256 {
		slices.Sort(s.keys)
		return
	}
	if cap(s.tmp) < len(s.keys) {
		s.tmp = make([]uint64, len(s.keys))
	}
	src, dst := s.keys, s.tmp[:len(s.keys)]
	for shift := uint(32); shift < 64; shift += 11 {
		var count [1 << 11]int
		for _, k := range src {
			count[(k>>shift)&(1<<11-1)]++
		}
		at := 0
		for d, c := range count {
			count[d] = at
			at += c
		}
		for _, k := range src {
			d := (k >> shift) & (1<<11 - 1)
			dst[count[d]] = k
			count[d]++
		}
		src, dst = dst, src
	}
	s.keys, s.tmp = src, dst
}

// idsFromKeys sets s.idx to the ids of keys, in order.
func (s *sampler) idsFromKeys() {
	s.idx = s.idx[:0]
	for _, k := range s.keys {
		s.idx = append(s.idx, int32(uint32(k)))
	}
}

// sortStable sets s.idx to every candidate in rank order by a comparison
// sort (the order NaN logits get is that sort's).
func (s *sampler) sortStable(logits []float32) {
	s.idx = s.idx[:0]
	for i, v := range logits {
		if !math.IsInf(float64(v), -1) {
			s.idx = append(s.idx, int32(i))
		}
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
}

// sortAll sets s.idx to the first k candidates in rank order, sorting
// them all.
func (s *sampler) sortAll(logits []float32, k int) {
	ninf := float32(math.Inf(-1))
	s.keys = s.keys[:0]
	for i, v := range logits {
		if v > ninf {
			s.keys = append(s.keys, rankKey(v, i))
		}
	}
	s.sortKeys()
	s.keys = s.keys[:k]
	s.idsFromKeys()
}

// selectTop sets s.idx to the first k candidates in rank order (0 < k <
// the number of candidates) through a max-heap of rank keys holding the k
// best seen so far: most logits lose the single comparison with the
// heap's worst.
func (s *sampler) selectTop(logits []float32, k int) {
	ninf := float32(math.Inf(-1))
	h := s.keys[:0]
	worst := ninf
	for i, v := range logits {
		if !(v > ninf) {
			continue
		}
		if len(h) < k {
			h = append(h, rankKey(v, i))
			for c := len(h) - 1; c > 0; {
				p := (c - 1) / 2
				if h[p] >= h[c] {
					break
				}
				h[p], h[c] = h[c], h[p]
				c = p
			}
			if len(h) == k {
				worst = logits[uint32(h[0])]
			}
			continue
		}
		// A later id loses a tie: only a larger logit enters.
		if !(v > worst) {
			continue
		}
		h[0] = rankKey(v, i)
		for p := 0; ; {
			c := 2*p + 1
			if c >= k {
				break
			}
			if c+1 < k && h[c+1] > h[c] {
				c++
			}
			if h[p] >= h[c] {
				break
			}
			h[p], h[c] = h[c], h[p]
			p = c
		}
		worst = logits[uint32(h[0])]
	}
	slices.Sort(h)
	s.keys = h
	s.idsFromKeys()
}

// drawRanked draws from s.idx, candidates in rank order already cut to the
// top k: the softmax of logits/temperature, then the top-p nucleus.
func (s *sampler) drawRanked(logits []float32, inv float32) int32 {
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
		n = nucleusLen(s.prob, sum, p)
		sum = 0
		for _, q := range s.prob[:n] {
			sum += float64(q)
		}
	}
	return s.drawPrefix(n, sum)
}

// nucleusLen is the length of the shortest prefix of prob whose shares of
// sum add up to p or more; all of prob when none does.
func nucleusLen(prob []float32, sum float64, p float32) int {
	if n, ok := crossing(prob, sum, p); ok {
		return n
	}
	return len(prob)
}

// crossing is nucleusLen, ok false when no prefix reaches p.
func crossing(prob []float32, sum float64, p float32) (int, bool) {
	var cum float64
	for i, q := range prob {
		cum += float64(q) / sum
		if cum >= float64(p) {
			return i + 1, true
		}
	}
	return 0, false
}

// drawPrefix draws one of s.idx[:n] with weights s.prob[:n] summing to
// about sum.
func (s *sampler) drawPrefix(n int, sum float64) int32 {
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

// nucleus is the top-p draw without a top-k cut (m the largest logit, no
// NaN or +Inf among them) that sorts only the candidates that can be in
// the nucleus. ok is false when it cannot tell the nucleus for sure; the
// caller then sorts every candidate.
//
// The rank-order sum S of the candidates' exponentials fixes the nucleus.
// Terms below 2^-53 come last in rank order and leave a sum of at least 1
// unchanged, so S is the rank-order sum of the others. Their sum in id
// order differs from S by rounding alone: S lies within
// [lo, hi] = sum ± N·2^-50·sum (twice the bound of a sum of N
// non-negative terms, with room). A prefix's cumulative share only falls
// as the divisor grows (rounded division and addition are monotone), so
// the nucleus length with S lies between those with lo and hi: when they
// agree it is that. The candidates sorted are the highest buckets of
// (logit-max)/temperature holding a little more than p of the mass: a
// prefix in rank order, since the bucket falls as the logit does.
func (s *sampler) nucleus(logits []float32, m, inv float32) (int32, bool) {
	ninf := float32(math.Inf(-1))
	var mass [nBuckets]float64
	var sum float64
	terms := 0
	for _, v := range logits {
		if !(v > ninf) {
			continue
		}
		x := (v - m) * inv
		if !(x >= negligibleX) { // NaN too: no candidates, the full sort
			continue
		}
		e := math.Exp(float64(x))
		sum += e
		terms++
		mass[int(-x*bucketsPerUnit)] += e
	}
	delta := sum * float64(terms+2) * 0x1p-50
	lo, hi := sum-delta, sum+delta
	p := s.p.TopP
	want := float64(p) * hi * (1 + 1e-6)
	last, acc := nBuckets-1, 0.0
	for b, w := range mass {
		if acc += w; acc >= want {
			last = b
			break
		}
	}
	s.keys = s.keys[:0]
	for i, v := range logits {
		if !(v > ninf) {
			continue
		}
		if x := (v - m) * inv; x >= negligibleX && int(-x*bucketsPerUnit) <= last {
			s.keys = append(s.keys, rankKey(v, i))
		}
	}
	s.sortKeys()
	s.idsFromKeys()
	s.prob = s.prob[:0]
	for _, id := range s.idx {
		s.prob = append(s.prob, float32(math.Exp(float64((logits[id]-m)*inv))))
	}
	n, ok := crossing(s.prob, hi, p)
	if !ok || nucleusLen(s.prob[:n], lo, p) != n {
		return 0, false
	}
	var ns float64
	for _, q := range s.prob[:n] {
		ns += float64(q)
	}
	return s.drawPrefix(n, ns), true
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
