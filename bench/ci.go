package bench

import (
	"fmt"
	"math"
)

// CI is a mean over trials with its 95% confidence interval from
// Student's t distribution: mean ± t(0.975, n-1) × sd / √n. With fewer than
// two trials there is no interval (Half is NaN in memory, null in JSON).
type CI struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean"`
	SD   float64 `json:"sd"`
	Half float64 `json:"half"`
	// Values are the trials' own figures, for the per-trial spread.
	Values []float64 `json:"values"`
}

// Lo and Hi are the interval's ends.
func (c CI) Lo() float64 { return c.Mean - c.Half }
func (c CI) Hi() float64 { return c.Mean + c.Half }

// Defined reports whether there is an interval (two trials or more).
func (c CI) Defined() bool { return c.N >= 2 && !math.IsNaN(c.Half) }

// String is "12.30 ± 0.45" (or "12.30" for one trial).
func (c CI) String() string {
	if c.N == 0 {
		return "-"
	}
	if !c.Defined() {
		return fmt.Sprintf("%.2f (1 trial)", c.Mean)
	}
	return fmt.Sprintf("%.2f ± %.2f", c.Mean, c.Half)
}

// MarshalJSON writes an undefined Half as null.
func (c CI) MarshalJSON() ([]byte, error) {
	half := "null"
	if c.Defined() {
		half = fmt.Sprintf("%g", c.Half)
	}
	vals := "["
	for i, v := range c.Values {
		if i > 0 {
			vals += ","
		}
		vals += fmt.Sprintf("%g", v)
	}
	return fmt.Appendf(nil, `{"n":%d,"mean":%g,"sd":%g,"half":%s,"values":%s]}`, c.N, c.Mean, c.SD, half, vals), nil
}

// MeanCI is the 95% t interval of the mean of xs.
func MeanCI(xs []float64) CI {
	c := CI{N: len(xs), Values: xs, Half: math.NaN()}
	if c.N == 0 {
		return c
	}
	sum := 0.0
	for _, x := range xs {
		sum += x
	}
	c.Mean = sum / float64(c.N)
	if c.N < 2 {
		return c
	}
	ss := 0.0
	for _, x := range xs {
		ss += (x - c.Mean) * (x - c.Mean)
	}
	c.SD = math.Sqrt(ss / float64(c.N-1))
	c.Half = TQuantile(0.975, float64(c.N-1)) * c.SD / math.Sqrt(float64(c.N))
	return c
}

// TQuantile returns the p quantile of Student's t distribution with df
// degrees of freedom (df > 0, 0 < p < 1), by bisection on the CDF. The CDF
// is the regularized incomplete beta function I_x(df/2, 1/2) with
// x = df/(df+t²) (Abramowitz & Stegun 26.7.1), evaluated by Lentz's
// continued fraction (Numerical Recipes §6.4).
func TQuantile(p, df float64) float64 {
	if !(p > 0 && p < 1) || !(df > 0) {
		return math.NaN()
	}
	if p == 0.5 {
		return 0
	}
	if p < 0.5 {
		return -TQuantile(1-p, df)
	}
	lo, hi := 0.0, 1.0
	for tCDF(hi, df) < p {
		hi *= 2
		if hi > 1e12 {
			return math.Inf(1)
		}
	}
	for range 200 {
		mid := (lo + hi) / 2
		if tCDF(mid, df) < p {
			lo = mid
		} else {
			hi = mid
		}
		if hi-lo < 1e-12*hi {
			break
		}
	}
	return (lo + hi) / 2
}

// tCDF is P(T ≤ t) for t ≥ 0.
func tCDF(t, df float64) float64 {
	x := df / (df + t*t)
	return 1 - 0.5*regIncBeta(df/2, 0.5, x)
}

// regIncBeta is I_x(a, b).
func regIncBeta(a, b, x float64) float64 {
	if x <= 0 {
		return 0
	}
	if x >= 1 {
		return 1
	}
	la, _ := math.Lgamma(a)
	lb, _ := math.Lgamma(b)
	lab, _ := math.Lgamma(a + b)
	front := math.Exp(lab - la - lb + a*math.Log(x) + b*math.Log(1-x))
	// The continued fraction converges fast for x < (a+1)/(a+b+2); use
	// the symmetry I_x(a,b) = 1 - I_{1-x}(b,a) on the other side.
	if x < (a+1)/(a+b+2) {
		return front * betaCF(a, b, x) / a
	}
	return 1 - front*betaCF(b, a, 1-x)/b
}

func betaCF(a, b, x float64) float64 {
	const tiny, eps = 1e-300, 1e-15
	c, d := 1.0, 1-(a+b)*x/(a+1)
	if math.Abs(d) < tiny {
		d = tiny
	}
	d = 1 / d
	h := d
	for m := 1; m <= 300; m++ {
		fm := float64(m)
		num := fm * (b - fm) * x / ((a + 2*fm - 1) * (a + 2*fm))
		d = 1 + num*d
		if math.Abs(d) < tiny {
			d = tiny
		}
		c = 1 + num/c
		if math.Abs(c) < tiny {
			c = tiny
		}
		d = 1 / d
		h *= d * c
		num = -(a + fm) * (a + b + fm) * x / ((a + 2*fm) * (a + 2*fm + 1))
		d = 1 + num*d
		if math.Abs(d) < tiny {
			d = tiny
		}
		c = 1 + num/c
		if math.Abs(c) < tiny {
			c = tiny
		}
		d = 1 / d
		del := d * c
		h *= del
		if math.Abs(del-1) < eps {
			break
		}
	}
	return h
}
