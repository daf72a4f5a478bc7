package bench

import "math"

// rng is a splitmix64 generator. Workloads need streams that are a pure
// function of (seed, ids) so that the same request can be rebuilt for every
// target of an A/B run and across runs; math/rand/v2's sources would do,
// but splitmix64 is tiny, allocation-free and its mixing function doubles as
// the hash that derives per-request seeds.
type rng struct{ s uint64 }

func mix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// newRNG returns a generator whose stream depends on every key, in order.
func newRNG(keys ...uint64) *rng {
	s := uint64(0x9e3779b97f4a7c15)
	for _, k := range keys {
		s = mix(s ^ mix(k+0x632be59bd9b4e019))
	}
	return &rng{s: s}
}

func (r *rng) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	return mix(r.s)
}

// intn returns a value in [0, n); n must be positive.
func (r *rng) intn(n int) int { return int(r.next() % uint64(n)) }

// float returns a value in [0, 1).
func (r *rng) float() float64 { return float64(r.next()>>11) / (1 << 53) }

// norm returns a standard normal sample (Box-Muller).
func (r *rng) norm() float64 {
	u := r.float()
	for u == 0 {
		u = r.float()
	}
	return math.Sqrt(-2*math.Log(u)) * math.Cos(2*math.Pi*r.float())
}

// exp returns an exponential sample of mean 1.
func (r *rng) exp() float64 {
	u := r.float()
	for u == 0 {
		u = r.float()
	}
	return -math.Log(u)
}

// perm returns a permutation of [0, n).
func (r *rng) perm(n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	for i := n - 1; i > 0; i-- {
		j := r.intn(i + 1)
		p[i], p[j] = p[j], p[i]
	}
	return p
}
