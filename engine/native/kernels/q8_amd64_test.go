//go:build goexperiment.simd && amd64

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"simd/archsimd"
	"slices"
	"testing"
	"time"
)

// q8SignLanes runs q8SignGroup on one group and returns its eight lanes.
func q8SignLanes(w, x *[32]int8) [8]int32 {
	var out [8]int32
	q8SignGroup(archsimd.LoadInt8x32(w), archsimd.LoadInt8x32(x), archsimd.BroadcastInt16x16(1)).Store(&out)
	archsimd.ClearAVXUpperBits()
	return out
}

// checkQ8SignGroup: every lane equals the scalar integer sum of its four
// products, exactly.
func checkQ8SignGroup(t *testing.T, w, x *[32]int8) {
	t.Helper()
	got := q8SignLanes(w, x)
	for k := range 8 {
		var want int32
		for i := 4 * k; i < 4*k+4; i++ {
			want += int32(w[i]) * int32(x[i])
		}
		if got[k] != want {
			t.Fatalf("lane %d = %d, scalar %d (w %v, x %v)", k, got[k], want, w[4*k:4*k+4], x[4*k:4*k+4])
		}
	}
}

func TestQ8SignGroupExact(t *testing.T) {
	if level < levelAVX2 {
		t.Skip("no AVX2")
	}
	fill := func(v int8) (a [32]int8) {
		for i := range a {
			a[i] = v
		}
		return
	}
	alt := func(a, b int8) (r [32]int8) {
		for i := range r {
			r[i] = a
			if i%2 == 1 {
				r[i] = b
			}
		}
		return
	}
	for _, c := range []struct {
		name string
		w, x [32]int8
	}{
		{"zeros", fill(0), fill(0)},
		{"max", fill(127), fill(127)},
		{"min-weight", fill(-128), fill(-127)}, // |w| = 128 and x·sgn(w) = 127
		{"min-weight-pos-x", fill(-128), fill(127)},
		{"mixed-signs", alt(-128, 127), alt(-127, 127)},
		{"zero-weight", fill(0), fill(-127)},
		{"zero-act", fill(-128), fill(0)},
	} {
		t.Run(c.name, func(t *testing.T) { checkQ8SignGroup(t, &c.w, &c.x) })
	}
	r := rand.New(rand.NewPCG(7, 8))
	for range 2000 {
		var w, x [32]int8
		for i := range w {
			w[i], x[i] = int8(r.IntN(256)-128), int8(r.IntN(255)-127)
		}
		checkQ8SignGroup(t, &w, &x)
	}
}

// FuzzQ8SignGroup: any weight bytes, any activation bytes QuantizeRows can
// produce ([−127, 127]; −128 is mapped to −127).
func FuzzQ8SignGroup(f *testing.F) {
	if level < levelAVX2 {
		f.Skip("no AVX2")
	}
	f.Add(make([]byte, 64))
	seed := make([]byte, 64)
	for i := range seed {
		seed[i] = 0x80
	}
	f.Add(seed)
	f.Add([]byte("\x7f\x81\x80\x01\xff\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var w, x [32]int8
		for i := range 32 {
			if i < len(b) {
				w[i] = int8(b[i])
			}
			if 32+i < len(b) {
				x[i] = max(-127, int8(b[32+i]))
			}
		}
		checkQ8SignGroup(t, &w, &x)
	})
}

// TestQ8SignMatchesPortable: odd shapes (rows not a multiple of four,
// group counts not a multiple of eight), weights including −128, against
// the portable loops, and every token alone bitwise equal to the batch.
func TestQ8SignMatchesPortable(t *testing.T) {
	if level < levelAVX2 {
		t.Skip("no AVX2")
	}
	r := rand.New(rand.NewPCG(3, 4))
	for _, sh := range []struct{ rows, cols, T int }{
		{1, 32, 1}, {3, 32, 2}, {5, 96, 3}, {7, 288, 1}, {13, 800, 5}, {4, 256, 4}, {17, 2080, 2}, {6, 64, 67},
	} {
		t.Run(fmt.Sprintf("%dx%dxT%d", sh.rows, sh.cols, sh.T), func(t *testing.T) {
			G := sh.cols / QK
			wq := make([]int8, sh.rows*sh.cols)
			for i := range wq {
				wq[i] = int8(r.IntN(256) - 128)
			}
			ws := randVec(r, sh.rows*G) // no padding: the scale copy path too
			x := randVec(r, sh.T*sh.cols)
			xq, xs := make([]int8, len(x)), NewScales(len(x)/QK)
			QuantizeRows(x, xq, xs)
			got := make([]float32, sh.T*sh.rows)
			matQ8SignAVX2(got, wq, ws, xq, xs, 0, sh.rows, sh.rows, sh.cols, sh.T)
			want := make([]float32, len(got))
			matQ8Portable(want, wq, ws, xq, xs, 0, sh.rows, sh.rows, sh.cols, sh.T)
			for tk := range sh.T {
				for j := range sh.rows {
					var mag float64
					for i := range sh.cols {
						mag += math.Abs(float64(wq[j*sh.cols+i]) * float64(ws[j*G+i/QK]) * float64(xq[tk*sh.cols+i]) * float64(xs[tk*G+i/QK]))
					}
					o := tk*sh.rows + j
					if d := math.Abs(float64(got[o] - want[o])); d > 1e-6*mag+1e-7 {
						t.Fatalf("out[%d][%d] = %g, portable %g (|Σ| %g)", tk, j, got[o], want[o], mag)
					}
				}
			}
			for tk := range sh.T {
				one := make([]float32, sh.rows)
				matQ8SignAVX2(one, wq, ws, xq[tk*sh.cols:(tk+1)*sh.cols], xs[tk*G:(tk+1)*G], 0, sh.rows, sh.rows, sh.cols, 1)
				if !slices.Equal(one, got[tk*sh.rows:(tk+1)*sh.rows]) {
					t.Fatalf("token %d alone differs from the batch", tk)
				}
			}
			// A row range that starts inside a tile gives the same rows.
			if sh.rows > 2 {
				part := make([]float32, len(got))
				matQ8SignAVX2(part, wq, ws, xq, xs, 1, sh.rows, sh.rows, sh.cols, sh.T)
				for tk := range sh.T {
					if !slices.Equal(part[tk*sh.rows+1:(tk+1)*sh.rows], got[tk*sh.rows+1:(tk+1)*sh.rows]) {
						t.Fatalf("rows [1,%d) differ from the full product", sh.rows)
					}
				}
			}
		})
	}
}

// BenchmarkQ8Kernels times the sign-trick Q8_0 kernel against the
// sign-extending one it replaced, alternating in the same run, one
// thread, on a 110M Llama's up projection (2048×768): ratio is old/new
// time (above 1: the new kernel is faster). On an AVX-512 CPU the
// AVX-512 level's kernels are timed too: asm-ratio is the archsimd
// kernel's time over the assembly's (above 1: the assembly is faster).
func BenchmarkQ8Kernels(b *testing.B) {
	if level < levelAVX2 {
		b.Skip("no AVX2")
	}
	r := rand.New(rand.NewPCG(1, 1))
	rows, cols := 2048, 768
	w, _ := QuantizeMat(&Mat{Type: F32, Rows: rows, Cols: cols, F: randVec(r, rows*cols)})
	for _, T := range []int{1, 2, 64} {
		x := randVec(r, T*cols)
		xq, xs := make([]int8, len(x)), NewScales(len(x)/QK)
		QuantizeRows(x, xq, xs)
		out := make([]float32, T*rows)
		b.Run(fmt.Sprintf("T%d", T), func(b *testing.B) {
			var told, tnew, t512, tasm, c512, casm time.Duration
			has512 := supported() == levelAVX512
			for b.Loop() {
				if has512 {
					// The archsimd AVX-512 kernel and the assembly
					// tiles that replace it (q8asm_amd64.go), back to
					// back; wall and CPU time.
					c0, s := cpuTime(), time.Now()
					matQ8AVX512(out, w.Q, w.S, xq, xs, 0, rows, rows, cols, T)
					c1, m := cpuTime(), time.Now()
					matQ8AVX512Asm(out, w.Q, w.S, xq, xs, 0, rows, rows, cols, T)
					c2, e := cpuTime(), time.Now()
					t512 += m.Sub(s)
					tasm += e.Sub(m)
					c512 += c1 - c0
					casm += c2 - c1
				}
				s := time.Now()
				matQ8ExtendAVX2(out, w.Q, w.S, xq, xs, 0, rows, rows, cols, T)
				m := time.Now()
				matQ8SignAVX2(out, w.Q, w.S, xq, xs, 0, rows, rows, cols, T)
				told += m.Sub(s)
				tnew += time.Since(m)
			}
			n := float64(b.N)
			if has512 {
				// The AVX-512 level's own Q8_0 kernel (sign-extending,
				// 16 lanes), for choosing which one that level runs.
				b.ReportMetric(float64(t512.Nanoseconds())/n, "avx512-ns/op")
				b.ReportMetric(float64(tasm.Nanoseconds())/n, "asm-ns/op")
				b.ReportMetric(float64(t512)/float64(tasm), "asm-ratio")
				if casm > 0 {
					b.ReportMetric(float64(c512)/float64(casm), "asm-cpu-ratio")
				}
			}
			b.ReportMetric(float64(told.Nanoseconds())/n, "old-ns/op")
			b.ReportMetric(float64(tnew.Nanoseconds())/n, "new-ns/op")
			b.ReportMetric(float64(told)/float64(tnew), "ratio")
		})
	}
}
