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

// TestMatMulMatchesPortable runs every kernel level this CPU supports.
func TestMatMulMatchesPortable(t *testing.T) {
	for _, l := range kernelLevels() {
		t.Run(l, func(t *testing.T) {
			defer setKernelLevel(l)()
			testMatMulMatchesPortable(t)
		})
	}
}

func testMatMulMatchesPortable(t *testing.T) {
	pool := NewPool(2)
	defer pool.Close()
	r := rand.New(rand.NewPCG(1, 2))
	for _, sh := range []struct{ rows, cols, T int }{
		{1, 8, 1}, {5, 3, 2}, {17, 64, 1}, {33, 172, 3}, {64, 96, 7}, {130, 288, 9}, {40, 64, 70},
		{7, 2048, 3}, {36, 1376, 5}, {23, 17, 4},
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
		matQ8BPortable(want, q, xq, xs, 0, sh.rows, sh.T)
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

// TestFusedEqualsSingle checks that the fused products (Q, K and V in one
// pass; the gate and up projections with SwiGLU) give bitwise what the
// separate products give.
func TestFusedEqualsSingle(t *testing.T) {
	for _, l := range kernelLevels() {
		t.Run(l, func(t *testing.T) {
			defer setKernelLevel(l)()
			pool := NewPool(3)
			defer pool.Close()
			r := rand.New(rand.NewPCG(5, 6))
			const cols, T = 96, 5
			x := randVec(r, T*cols)
			for _, quant := range []bool{false, true} {
				mk := func(rows int) *Mat {
					m := &Mat{Type: F32, Rows: rows, Cols: cols, F: randVec(r, rows*cols)}
					if quant {
						m, _ = QuantizeMat(m)
					}
					return m
				}
				wq, wk, wv := mk(64), mk(32), mk(48)
				outs := [3][]float32{make([]float32, T*64), make([]float32, T*32), make([]float32, T*48)}
				pool.MatMulMulti([]Prod{{outs[0], wq}, {outs[1], wk}, {outs[2], wv}}, x, T, &Scratch{})
				for i, w := range []*Mat{wq, wk, wv} {
					want := make([]float32, T*w.Rows)
					pool.MatMul(want, w, x, T, &Scratch{})
					if !slices.Equal(outs[i], want) {
						t.Fatalf("quant=%v: fused product %d differs", quant, i)
					}
				}
				w1, w3 := mk(80), mk(80)
				g, u := make([]float32, T*80), make([]float32, T*80)
				pool.MatMulSwiGLU(g, u, w1, w3, x, T, &Scratch{})
				g2, u2 := make([]float32, T*80), make([]float32, T*80)
				pool.MatMul(g2, w1, x, T, &Scratch{})
				pool.MatMul(u2, w3, x, T, &Scratch{})
				for tt := range T {
					SwiGLU(g2[tt*80:(tt+1)*80], u2[tt*80:(tt+1)*80])
				}
				if !slices.Equal(g, g2) || !slices.Equal(u, u2) {
					t.Fatalf("quant=%v: fused SwiGLU differs", quant)
				}
			}
		})
	}
}

// TestStridedEqualsSingle checks the attention helpers against Dot and
// Axpy, bit for bit, at every level and for head sizes with and without a
// scalar tail.
func TestStridedEqualsSingle(t *testing.T) {
	for _, l := range kernelLevels() {
		t.Run(l, func(t *testing.T) {
			defer setKernelLevel(l)()
			r := rand.New(rand.NewPCG(7, 8))
			for _, hd := range []int{4, 8, 16, 20, 48, 64, 72} {
				for _, n := range []int{1, 3, 4, 7, 16} {
					stride := hd*2 + 3
					m := randVec(r, (n-1)*stride+hd)
					q, a := randVec(r, hd), randVec(r, n)
					got := make([]float32, n)
					DotStrided(got, q, m, stride)
					y, want := randVec(r, hd), make([]float32, hd)
					copy(want, y)
					AxpyStrided(a, m, stride, y)
					for i := range n {
						if d := Dot(q, m[i*stride:]); d != got[i] {
							t.Fatalf("hd %d n %d: DotStrided[%d] = %g, Dot %g", hd, n, i, got[i], d)
						}
						Axpy(a[i], m[i*stride:i*stride+hd], want)
					}
					if !slices.Equal(y, want) {
						t.Fatalf("hd %d n %d: AxpyStrided differs from Axpy", hd, n)
					}
				}
			}
		})
	}
}

// TestStridedNEqualsSingle checks the several-query attention helpers
// against DotStrided and AxpyStrided per query, bit for bit, at every level.
func TestStridedNEqualsSingle(t *testing.T) {
	for _, l := range kernelLevels() {
		t.Run(l, func(t *testing.T) {
			defer setKernelLevel(l)()
			r := rand.New(rand.NewPCG(11, 12))
			for _, hd := range []int{4, 16, 20, 48, 64, 72, 128} {
				for _, n := range []int{1, 3, 4, 7, 16} {
					for _, nq := range []int{1, 2, 3, 4, 5, 8, 16} {
						stride, qstride, ostride := hd*2+3, hd+5, n+2
						m := randVec(r, (n-1)*stride+hd)
						q := randVec(r, (nq-1)*qstride+hd)
						got := make([]float32, (nq-1)*ostride+n)
						DotStridedN(got, ostride, q, qstride, hd, nq, m, stride, n)
						a := randVec(r, (nq-1)*ostride+n)
						y := randVec(r, (nq-1)*qstride+hd)
						want := slices.Clone(y)
						AxpyStridedN(a, ostride, n, m, stride, y, qstride, hd, nq)
						for j := range nq {
							one := make([]float32, n)
							DotStrided(one, q[j*qstride:j*qstride+hd], m, stride)
							if !slices.Equal(one, got[j*ostride:j*ostride+n]) {
								t.Fatalf("hd %d n %d nq %d: DotStridedN query %d differs", hd, n, nq, j)
							}
							AxpyStrided(a[j*ostride:j*ostride+n], m, stride, want[j*qstride:j*qstride+hd])
						}
						if !slices.Equal(y, want) {
							t.Fatalf("hd %d n %d nq %d: AxpyStridedN differs", hd, n, nq)
						}
					}
				}
			}
		})
	}
}

// TestQuantizeRowsMatchesPortable: the vector quantizer must give the
// portable bytes exactly, halfway cases included.
func TestQuantizeRowsMatchesPortable(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	x := randVec(r, 64*QK)
	for g := range 16 {
		// Groups whose values land on and next to .5 after scaling.
		for i := range QK {
			x[g*QK+i] = (float32(i%8) + 0.5) / 127 * float32(1+g%3)
			if i%2 == 1 {
				x[g*QK+i] = -x[g*QK+i]
			}
		}
		x[g*QK] = float32(1 + g%3)
	}
	clear(x[20*QK : 21*QK]) // an all-zero group
	x[22*QK+5] = 1e-30
	for _, l := range kernelLevels() {
		t.Run(l, func(t *testing.T) {
			defer setKernelLevel(l)()
			q, s := make([]int8, len(x)), make([]float32, len(x)/QK)
			QuantizeRows(x, q, s)
			wq, ws := make([]int8, len(x)), make([]float32, len(x)/QK)
			quantizeRowsPortable(x, wq, ws)
			if !slices.Equal(q, wq) || !slices.Equal(s, ws) {
				t.Fatal("QuantizeRows differs from the portable quantizer")
			}
		})
	}
}

// TestDivByMatchesScalar: the vector division is the scalar one, bit for
// bit.
func TestDivByMatchesScalar(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	x := randVec(r, 37)
	for _, l := range kernelLevels() {
		t.Run(l, func(t *testing.T) {
			defer setKernelLevel(l)()
			got := slices.Clone(x)
			DivBy(got, 3.7)
			for i, v := range x {
				if want := v / 3.7; got[i] != want {
					t.Fatalf("x[%d]/3.7 = %g, want %g", i, got[i], want)
				}
			}
		})
	}
}

// TestSoftmaxMatchesPortable bounds the vector softmax (its own exp)
// against the portable float64-exp one, for lengths with and without a
// scalar tail and scores spread wide enough to underflow.
func TestSoftmaxMatchesPortable(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	for _, l := range kernelLevels() {
		t.Run(l, func(t *testing.T) {
			defer setKernelLevel(l)()
			for _, n := range []int{1, 7, 16, 17, 33, 64, 100, 1000} {
				for _, spread := range []float32{1, 10, 120} {
					x := randVec(r, n)
					for i := range x {
						x[i] *= spread
					}
					got, want := slices.Clone(x), slices.Clone(x)
					Softmax(got)
					softmaxPortable(want)
					var sum float64
					for i := range got {
						sum += float64(got[i])
						if d := math.Abs(float64(got[i] - want[i])); d > 4e-6*float64(want[i])+1e-12 {
							t.Fatalf("n %d spread %g: p[%d] = %g, portable %g", n, spread, i, got[i], want[i])
						}
					}
					if math.Abs(sum-1) > 1e-5 {
						t.Fatalf("n %d spread %g: probabilities sum to %g", n, spread, sum)
					}
				}
			}
		})
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

// BenchmarkMatMulBatch is the prefill shape: 64 activation rows against a
// weight matrix that stays in cache, so it measures the arithmetic.
func BenchmarkMatMulBatch(b *testing.B) {
	const T = 64
	for _, sh := range []struct {
		name       string
		rows, cols int
	}{{"768x768", 768, 768}, {"2048x768", 2048, 768}} {
		r := rand.New(rand.NewPCG(1, 2))
		w := &Mat{Type: F32, Rows: sh.rows, Cols: sh.cols, F: randVec(r, sh.rows*sh.cols)}
		q, _ := QuantizeMat(w)
		x := randVec(r, T*sh.cols)
		out := make([]float32, T*sh.rows)
		p := NewPool(1)
		for _, m := range []*Mat{w, q} {
			b.Run(sh.name+"/"+m.Type.String(), func(b *testing.B) {
				sc := &Scratch{}
				for b.Loop() {
					p.MatMul(out, m, x, T, sc)
				}
				b.ReportMetric(float64(b.N)*2*T*float64(sh.rows*sh.cols)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
		p.Close()
	}
}
