package bench

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// DistKind names a length distribution.
type DistKind string

// The distributions a synthetic workload draws lengths from.
const (
	Fixed     DistKind = "fixed"
	Uniform   DistKind = "uniform"
	Normal    DistKind = "normal"
	LogNormal DistKind = "lognormal"
	Zipf      DistKind = "zipf"
)

// Dist is a distribution of positive integer lengths (tokens, words,
// turns). Fixed uses A; Uniform draws from [A, B]; Normal has mean A and
// standard deviation B; LogNormal has mean A and log-space sigma B, the
// shape of real prompt lengths (a long right tail); Zipf has exponent A and
// draws from [B, C] with P(B+k) ∝ (k+1)^-A: the shortest length most
// often, a power-law tail up to C. Samples are rounded and clamped to at
// least 1.
type Dist struct {
	Kind    DistKind
	A, B, C float64
}

// FixedDist returns the distribution that is always n.
func FixedDist(n int) Dist { return Dist{Kind: Fixed, A: float64(n)} }

// ParseDist parses "N", "fixed:N", "uniform:LO,HI", "normal:MEAN,SD",
// "lognormal:MEAN,SIGMA" or "zipf:S,LO,HI".
func ParseDist(s string) (Dist, error) {
	kind, args, found := strings.Cut(strings.TrimSpace(s), ":")
	if !found {
		kind, args = string(Fixed), kind
	}
	var nums []float64
	for _, f := range strings.Split(args, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return Dist{}, fmt.Errorf("length distribution %q: %q is not a number", s, f)
		}
		nums = append(nums, v)
	}
	d := Dist{Kind: DistKind(strings.ToLower(kind))}
	want := 2
	switch d.Kind {
	case Fixed:
		want = 1
	case Zipf:
		want = 3
	}
	if len(nums) != want {
		return Dist{}, fmt.Errorf("length distribution %q: %s takes %d number(s), got %d", s, d.Kind, want, len(nums))
	}
	d.A = nums[0]
	if want >= 2 {
		d.B = nums[1]
	}
	if want == 3 {
		d.C = nums[2]
	}
	return d, d.validate()
}

func (d Dist) validate() error {
	switch d.Kind {
	case Fixed:
		if d.A < 1 {
			return fmt.Errorf("fixed length %v must be at least 1", d.A)
		}
	case Uniform:
		if d.A < 1 || d.B < d.A {
			return fmt.Errorf("uniform:%v,%v needs 1 ≤ LO ≤ HI", d.A, d.B)
		}
	case Normal, LogNormal:
		if d.A < 1 || d.B < 0 {
			return fmt.Errorf("%s:%v,%v needs a mean ≥ 1 and a spread ≥ 0", d.Kind, d.A, d.B)
		}
	case Zipf:
		if d.A <= 0 || d.A > 10 || d.B < 1 || d.C < d.B || d.C > 1e7 {
			return fmt.Errorf("zipf:%v,%v,%v needs 0 < S ≤ 10 and 1 ≤ LO ≤ HI ≤ 10,000,000", d.A, d.B, d.C)
		}
	default:
		return fmt.Errorf("unknown length distribution %q (want fixed, uniform, normal, lognormal or zipf)", d.Kind)
	}
	return nil
}

// String is the form ParseDist reads.
func (d Dist) String() string {
	if d.Kind == Fixed || d.Kind == "" {
		return strconv.FormatFloat(d.A, 'g', -1, 64)
	}
	if d.Kind == Zipf {
		return fmt.Sprintf("%s:%g,%g,%g", d.Kind, d.A, d.B, d.C)
	}
	return fmt.Sprintf("%s:%g,%g", d.Kind, d.A, d.B)
}

// Mean is the distribution's mean before rounding and clamping.
func (d Dist) Mean() float64 {
	switch d.Kind {
	case Uniform:
		return (d.A + d.B) / 2
	case Zipf:
		// The exact mean of the discrete law: at most 10^7 terms, and
		// only reports call it.
		n := int(d.C - d.B + 1)
		num, den := 0.0, 0.0
		for k := 1; k <= n; k++ {
			w := math.Pow(float64(k), -d.A)
			num += w * (d.B + float64(k-1))
			den += w
		}
		return num / den
	}
	return d.A
}

func (d Dist) sample(r *rng) int {
	var v float64
	switch d.Kind {
	case Uniform:
		v = d.A + math.Floor(r.float()*(d.B-d.A+1))
	case Normal:
		v = d.A + d.B*r.norm()
	case LogNormal:
		// mu is chosen so that the mean, not the median, is A.
		mu := math.Log(d.A) - d.B*d.B/2
		v = math.Exp(mu + d.B*r.norm())
	case Zipf:
		v = d.B - 1 + float64(zipfRank(r, d.A, int(d.C-d.B+1)))
		return max(1, int(v))
	default:
		v = d.A
	}
	return max(1, int(math.Round(v)))
}

// zipfRank draws k in [1, n] with P(k) ∝ k^-s by rejection-inversion
// (Hörmann and Derflinger, "Rejection-inversion to generate variates from
// monotone discrete distributions", ACM TOMACS 6(3), 1996), the method of
// Go's math/rand Zipf, extended to every s > 0: O(1) per draw for any n.
func zipfRank(r *rng, s float64, n int) int {
	if n <= 1 {
		return 1
	}
	// H is an antiderivative of h(x) = x^-s; Hinv its inverse.
	H := func(x float64) float64 {
		if math.Abs(s-1) < 1e-9 {
			return math.Log(x)
		}
		return (math.Pow(x, 1-s) - 1) / (1 - s)
	}
	Hinv := func(y float64) float64 {
		if math.Abs(s-1) < 1e-9 {
			return math.Exp(y)
		}
		return math.Pow(1+y*(1-s), 1/(1-s))
	}
	hx0 := H(1.5) - 1 // the area left of 1.5, minus h(1) = 1: k = 1's exact share
	hn := H(float64(n) + 0.5)
	for {
		u := hn + r.float()*(hx0-hn)
		x := Hinv(u)
		k := math.Floor(x + 0.5)
		if k < 1 {
			k = 1
		} else if k > float64(n) {
			k = float64(n)
		}
		if u >= H(k+0.5)-math.Pow(k, -s) {
			return int(k)
		}
	}
}
