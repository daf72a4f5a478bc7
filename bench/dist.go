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
)

// Dist is a distribution of positive integer lengths (tokens, words,
// turns). Fixed uses A; Uniform draws from [A, B]; Normal has mean A and
// standard deviation B; LogNormal has mean A and log-space sigma B, the
// shape of real prompt lengths (a long right tail). Samples are rounded and
// clamped to at least 1.
type Dist struct {
	Kind DistKind
	A, B float64
}

// FixedDist returns the distribution that is always n.
func FixedDist(n int) Dist { return Dist{Kind: Fixed, A: float64(n)} }

// ParseDist parses "N", "fixed:N", "uniform:LO,HI", "normal:MEAN,SD" or
// "lognormal:MEAN,SIGMA".
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
	if d.Kind == Fixed {
		want = 1
	}
	if len(nums) != want {
		return Dist{}, fmt.Errorf("length distribution %q: %s takes %d number(s), got %d", s, d.Kind, want, len(nums))
	}
	d.A = nums[0]
	if want == 2 {
		d.B = nums[1]
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
	default:
		return fmt.Errorf("unknown length distribution %q (want fixed, uniform, normal or lognormal)", d.Kind)
	}
	return nil
}

// String is the form ParseDist reads.
func (d Dist) String() string {
	if d.Kind == Fixed || d.Kind == "" {
		return strconv.FormatFloat(d.A, 'g', -1, 64)
	}
	return fmt.Sprintf("%s:%g,%g", d.Kind, d.A, d.B)
}

// Mean is the distribution's mean before rounding and clamping.
func (d Dist) Mean() float64 {
	if d.Kind == Uniform {
		return (d.A + d.B) / 2
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
	default:
		v = d.A
	}
	return max(1, int(math.Round(v)))
}
