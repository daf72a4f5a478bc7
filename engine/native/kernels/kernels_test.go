package kernels

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
)

func randVec(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = r.Float32()*2 - 1
	}
	return v
}

// Tolerances between the compiled kernels and the portable reference
// loops: they differ only in summation order (and FMA rounding), so the
// error is bounded relative to the sum of |products|.
const (
	relTolF32 = 1e-5 // of sum |w*x|
	relTolQ8  = 1e-5 // of sum |w*x| over dequantized values (int sums are exact)
)

func TestMatMulMatchesPortable(t *testing.T) {
	pool := NewPool(2)
	defer pool.Close()
	r := rand.New(rand.NewPCG(1, 2))
	for _, sh := range []struct{ rows, cols, T int }{
		{1, 8, 1}, {5, 3, 2}, {17, 64, 1}, {33, 172, 3}, {64, 96, 7}, {130, 288, 9}, {40, 64, 70},
	} {
		w := &Mat{Type: F32, Rows: sh.rows, Cols: sh.cols, F: randVec(r, sh.rows*sh.cols)}
		x := randVec(r, sh.T*sh.cols)
		got := make([]float32, sh.T*sh.rows)
		pool.MatMul(got, w, x, sh.T, &Scratch{})
		want := make([]float32, len(got))
		matF32Portable(want, w.F, x, 0, sh.rows, sh.rows, sh.cols, sh.T)
		for tk := range sh.T {
			for j := range sh.rows {
				var mag float64
				for i := range sh.cols {
					mag += math.Abs(float64(w.F[j*sh.cols+i] * x[tk*sh.cols+i]))
				}
				if d := math.Abs(float64(got[tk*sh.rows+j] - want[tk*sh.rows+j])); d > relTolF32*mag+1e-7 {
					t.Fatalf("%v: out[%d][%d] = %g, portable %g", sh, tk, j, got[tk*sh.rows+j], want[tk*sh.rows+j])
				}
			}
		}
		// Per-output order must not depend on T: each token alone.
		for tt := range sh.T {
			one := make([]float32, sh.rows)
			pool.MatMul(one, w, x[tt*sh.cols:(tt+1)*sh.cols], 1, &Scratch{})
			if !slices.Equal(one, got[tt*sh.rows:(tt+1)*sh.rows]) {
				t.Fatalf("%v: token %d alone differs from the batch", sh, tt)
			}
		}
		if sh.cols%QK != 0 {
			continue
		}
		q, err := QuantizeMat(w)
		if err != nil {
			t.Fatal(err)
		}
		sc := &Scratch{}
		pool.MatMul(got, q, x, sh.T, sc)
		xq, xs := make([]int8, len(x)), make([]float32, len(x)/QK)
		QuantizeRows(x, xq, xs)
		matQ8Portable(want, q.Q, q.S, xq, xs, 0, sh.rows, sh.rows, sh.cols, sh.T)
		for i := range got {
			if d := math.Abs(float64(got[i] - want[i])); d > relTolQ8*float64(sh.cols)+1e-6 {
				t.Fatalf("%v Q8: out %d = %g, portable %g", sh, i, got[i], want[i])
			}
		}
		for tt := range sh.T {
			one := make([]float32, sh.rows)
			pool.MatMul(one, q, x[tt*sh.cols:(tt+1)*sh.cols], 1, &Scratch{})
			if !slices.Equal(one, got[tt*sh.rows:(tt+1)*sh.rows]) {
				t.Fatalf("%v Q8: token %d alone differs from the batch", sh, tt)
			}
		}
	}
}

func TestF16(t *testing.T) {
	for _, tc := range []struct {
		f float32
		h uint16
	}{{0, 0}, {1, 0x3c00}, {-2, 0xc000}, {65504, 0x7bff}, {1e9, 0x7c00}, {5.960464477539063e-08, 1}, {0.1, 0x2e66}} {
		if got := F32ToF16(tc.f); got != tc.h {
			t.Errorf("F32ToF16(%g) = %#x, want %#x", tc.f, got, tc.h)
		}
	}
	for h := range 0x7c00 {
		f := F16ToF32(uint16(h))
		if F32ToF16(f) != uint16(h) {
			t.Fatalf("half %#x -> %g does not round-trip", h, f)
		}
	}
}

func TestPool(t *testing.T) {
	for _, n := range []int{1, 2, 3} {
		p := NewPool(n)
		for _, total := range []int{0, 1, 5, 16, 17, 100} {
			var sum atomic.Int64
			covered := make([]int32, total)
			p.Run(total, 4, func(lo, hi int) {
				for i := lo; i < hi; i++ {
					covered[i]++
					sum.Add(1)
				}
			})
			for i, c := range covered {
				if c != 1 {
					t.Fatalf("threads %d total %d: index %d covered %d times", n, total, i, c)
				}
			}
		}
		p.Close()
		p.Close()
		ran := false
		p.Run(3, 1, func(lo, hi int) { ran = true })
		if !ran {
			t.Fatal("Run after Close did nothing")
		}
	}
}

func BenchmarkMatVec(b *testing.B) {
	for _, sh := range []struct {
		name       string
		rows, cols int
	}{{"768x768", 768, 768}, {"2048x768", 2048, 768}, {"32000x288", 32000, 288}} {
		r := rand.New(rand.NewPCG(1, 2))
		w := &Mat{Type: F32, Rows: sh.rows, Cols: sh.cols, F: randVec(r, sh.rows*sh.cols)}
		q, _ := QuantizeMat(w)
		x := randVec(r, sh.cols)
		out := make([]float32, sh.rows)
		for _, threads := range []int{1, 2} {
			p := NewPool(threads)
			for _, m := range []*Mat{w, q} {
				b.Run(sh.name+"/"+m.Type.String()+"/"+string(rune('0'+threads))+"T", func(b *testing.B) {
					sc := &Scratch{}
					b.SetBytes(m.Bytes())
					for b.Loop() {
						p.MatMul(out, m, x, 1, sc)
					}
				})
			}
			p.Close()
		}
	}
}
