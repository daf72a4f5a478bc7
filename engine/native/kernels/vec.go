package kernels

import "math"

// RMSNorm writes w * x / rms(x) into o (o may alias x).
func RMSNorm(o, x, w []float32, eps float32) {
	x = x[:len(w)]
	o = o[:len(w)]
	var ss float32
	for _, v := range x {
		ss += v * v
	}
	ss /= float32(len(x))
	ss += eps
	ss = 1 / float32(math.Sqrt(float64(ss)))
	for i := range o {
		o[i] = w[i] * (ss * x[i])
	}
}

// Softmax normalises x in place. The AVX-512 level computes the
// exponentials in vector code (within a couple of ulp of the portable
// float64 math.Exp); every other level uses the portable loop.
func Softmax(x []float32) { softmax(x) }

func softmaxPortable(x []float32) {
	if len(x) == 0 {
		return
	}
	m := x[0]
	for _, v := range x[1:] {
		m = max(m, v)
	}
	var sum float32
	for i, v := range x {
		e := float32(math.Exp(float64(v - m)))
		x[i] = e
		sum += e
	}
	DivBy(x, sum)
}

// DivBy sets x[i] /= d: the same correctly rounded division at every
// kernel level, vectorised where there is one.
func DivBy(x []float32, d float32) { divF32(x, d) }

func divPortable(x []float32, d float32) {
	for i := range x {
		x[i] /= d
	}
}

// SwiGLU sets g[i] = silu(g[i]) * u[i].
func SwiGLU(g, u []float32) { swiglu(g, u[:len(g)]) }

func swigluPortable(g, u []float32) {
	u = u[:len(g)]
	for i, v := range g {
		v *= 1 / (1 + float32(math.Exp(float64(-v))))
		g[i] = v * u[i]
	}
}
