package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestSwiGLULevels: every level's SwiGLU is within 1e-6 relative (a few
// ulp) of the portable loop, across the range where e^−v over- and
// underflows, for lengths with and without a scalar tail; below v = −87.3
// exp16 flushes e^v to 0, so silu(v) is 0 where the portable loop gives
// ≈ −v·e^v < 1e-36 (an absolute error of at most 1e-30 passes).
func TestSwiGLULevels(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, n := range []int{1, 15, 16, 33, 2048} {
		g := make([]float32, n)
		u := make([]float32, n)
		for i := range g {
			g[i] = float32(r.NormFloat64() * math.Pow(10, float64(r.IntN(4)-1)))
			u[i] = float32(r.NormFloat64())
		}
		specials := []float32{0, float32(math.Copysign(0, -1)), 90, -90, 200, -200, 1e-30, -1e-30}
		for i, v := range specials {
			if i < n {
				g[i] = v
			}
		}
		want := append([]float32(nil), g...)
		swigluPortable(want, u)
		for _, lv := range kernelLevels() {
			restore := setKernelLevel(lv)
			got := append([]float32(nil), g...)
			SwiGLU(got, u)
			restore()
			for i := range got {
				d := math.Abs(float64(got[i] - want[i]))
				if d > 1e-6*math.Abs(float64(want[i])) && d > 1e-30 {
					t.Fatalf("%s n=%d: silu(%g)*%g = %g, portable %g", lv, n, g[i], u[i], got[i], want[i])
				}
			}
		}
	}
}
