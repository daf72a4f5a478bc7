//go:build goexperiment.simd && amd64

package kernels

import (
	"fmt"
	"math/rand/v2"
	"simd/archsimd"
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

// BenchmarkQ8Kernels times the Q8_0 kernels of the vector levels on a
// 110M Llama's up projection (2048×768, in cache), one thread: the AVX2
// sign-trick kernel, and on an AVX-512 CPU the AVX-512 level's archsimd
// kernel and the assembly tiles that replace it, alternating in the same
// run: asm-ratio is the archsimd kernel's time over the assembly's (above
// 1: the assembly is faster).
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
			var tavx2, t512, tasm, c512, casm time.Duration
			has512 := supported() == levelAVX512
			for b.Loop() {
				if has512 {
					c0, s := cpuTime(), time.Now()
					matQ8BAVX512(out, w, xq, xs, 0, rows, T)
					c1, m := cpuTime(), time.Now()
					matQ8BAVX512Asm(out, w, xq, xs, 0, rows, T)
					c2, e := cpuTime(), time.Now()
					t512 += m.Sub(s)
					tasm += e.Sub(m)
					c512 += c1 - c0
					casm += c2 - c1
				}
				s := time.Now()
				matQ8BSignAVX2(out, w, xq, xs, 0, rows, T)
				tavx2 += time.Since(s)
			}
			n := float64(b.N)
			if has512 {
				b.ReportMetric(float64(t512.Nanoseconds())/n, "avx512-ns/op")
				b.ReportMetric(float64(tasm.Nanoseconds())/n, "asm-ns/op")
				b.ReportMetric(float64(t512)/float64(tasm), "asm-ratio")
				if casm > 0 {
					b.ReportMetric(float64(c512)/float64(casm), "asm-cpu-ratio")
				}
			}
			b.ReportMetric(float64(tavx2.Nanoseconds())/n, "avx2-ns/op")
		})
	}
}
