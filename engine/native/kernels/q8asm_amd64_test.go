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

// q8AsmCase is one product for the bitwise comparison: weights, scales
// (ws without ScalePad capacity, as a Mat built by hand may have) and
// quantized activations.
type q8AsmCase struct {
	rows, cols, T int
	wq            []int8
	ws            []float32
	xq            []int8
	xs            []float32
}

// newQ8AsmCase fills weights over the whole int8 range (−128 included),
// activations over ±127, and scales with a mix of ordinary values, zeros
// and the largest fp16 (65504, the largest scale a GGUF can hold).
func newQ8AsmCase(r *rand.Rand, rows, cols, T int, extreme bool) q8AsmCase {
	G := cols / QK
	c := q8AsmCase{rows: rows, cols: cols, T: T,
		wq: make([]int8, rows*cols), ws: make([]float32, rows*G),
		xq: make([]int8, T*cols), xs: make([]float32, T*G)}
	for i := range c.wq {
		c.wq[i] = int8(r.IntN(256) - 128)
	}
	for i := range c.xq {
		c.xq[i] = int8(r.IntN(255) - 127)
	}
	if extreme {
		for i := range c.wq {
			c.wq[i] = [...]int8{-128, 127, -127, 0}[r.IntN(4)]
		}
		for i := range c.xq {
			c.xq[i] = [...]int8{-127, 127}[r.IntN(2)]
		}
	}
	sc := func(s []float32) {
		for i := range s {
			switch r.IntN(8) {
			case 0:
				s[i] = 0
			case 1:
				s[i] = 65504
			default:
				s[i] = float32(r.NormFloat64()) * 0.01
			}
		}
	}
	sc(c.ws)
	sc(c.xs)
	return c
}

// TestQ8AsmBitwise: the assembly tiles give bitwise what matQ8AVX512 gives,
// for every T (the 4×4 tiles and the one-token tail), column counts that
// are and are not multiples of 16 groups, row ranges ending inside a tile,
// scales without padding, and extreme quants and scales.
func TestQ8AsmBitwise(t *testing.T) {
	if supported() < levelAVX512 {
		t.Skip("no AVX-512")
	}
	r := rand.New(rand.NewPCG(21, 8))
	for _, cols := range []int{32, 64, 96, 480, 512, 544, 768, 1056, 2048, 4096} {
		for _, rows := range []int{1, 3, 4, 5, 8, 13} {
			for T := 1; T <= 9; T++ {
				if cols >= 2048 && T > 3 && rows > 5 {
					continue
				}
				c := newQ8AsmCase(r, rows, cols, T, (rows+T)%3 == 0)
				name := fmt.Sprintf("%dx%dxT%d", rows, cols, T)
				for _, lr := range [][2]int{{0, rows}, {1, rows}, {rows / 2, rows}, {0, (rows + 1) / 2}} {
					lo, hi := lr[0], lr[1]
					if lo >= hi {
						continue
					}
					want := make([]float32, T*rows)
					got := make([]float32, T*rows)
					for i := range got {
						got[i], want[i] = -1, -1 // outside [lo,hi) must stay untouched
					}
					matQ8AVX512(want, c.wq, c.ws, c.xq, c.xs, lo, hi, rows, cols, T)
					matQ8AVX512Asm(got, c.wq, c.ws, c.xq, c.xs, lo, hi, rows, cols, T)
					if i := sameBits(got, want); i >= 0 {
						t.Fatalf("%s rows [%d,%d): out[%d] = %g (%#x), archsimd %g (%#x)", name, lo, hi, i,
							got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
					}
				}
			}
		}
	}
}

// TestQ8AsmPortable: the dispatch at the AVX-512 level with the assembly
// agrees with the portable loops within the Q8_0 tolerance, and each token
// alone is bitwise the batch.
func TestQ8AsmPortable(t *testing.T) {
	if level < levelAVX512 || !q8Asm {
		t.Skip("assembly not in use")
	}
	r := rand.New(rand.NewPCG(5, 6))
	rows, cols, T := 37, 800, 11
	w, _ := QuantizeMat(&Mat{Type: F32, Rows: rows, Cols: cols, F: randVec(r, rows*cols)})
	x := randVec(r, T*cols)
	xq, xs := make([]int8, len(x)), NewScales(len(x)/QK)
	QuantizeRows(x, xq, xs)
	got := make([]float32, T*rows)
	matQ8(got, w.Q, w.S, xq, xs, 0, rows, rows, cols, T)
	want := make([]float32, T*rows)
	matQ8Portable(want, w.Q, w.S, xq, xs, 0, rows, rows, cols, T)
	for i := range got {
		if d := math.Abs(float64(got[i] - want[i])); d > relTolQ8*float64(cols)+1e-6 {
			t.Fatalf("out %d = %g, portable %g", i, got[i], want[i])
		}
	}
	G := cols / QK
	for tk := range T {
		one := make([]float32, rows)
		matQ8(one, w.Q, w.S, xq[tk*cols:(tk+1)*cols], xs[tk*G:(tk+1)*G], 0, rows, rows, cols, 1)
		if !slices.Equal(one, got[tk*rows:(tk+1)*rows]) {
			t.Fatalf("token %d alone differs from the batch", tk)
		}
	}
}

// FuzzQ8AsmBitwise compares one small product built from the fuzz bytes.
func FuzzQ8AsmBitwise(f *testing.F) {
	if supported() < levelAVX512 {
		f.Skip("no AVX-512")
	}
	f.Add(uint8(5), uint8(3), uint8(2), uint64(1))
	f.Add(uint8(4), uint8(17), uint8(9), uint64(2))
	f.Fuzz(func(t *testing.T, rows, groups, T uint8, seed uint64) {
		nr, ng, nt := int(rows%9)+1, int(groups%40)+1, int(T%9)+1
		c := newQ8AsmCase(rand.New(rand.NewPCG(seed, 3)), nr, ng*QK, nt, seed%2 == 0)
		want := make([]float32, nt*nr)
		got := make([]float32, nt*nr)
		matQ8AVX512(want, c.wq, c.ws, c.xq, c.xs, 0, nr, nr, ng*QK, nt)
		matQ8AVX512Asm(got, c.wq, c.ws, c.xq, c.xs, 0, nr, nr, ng*QK, nt)
		if i := sameBits(got, want); i >= 0 {
			t.Fatalf("out[%d] = %g, archsimd %g", i, got[i], want[i])
		}
	})
}

// TestQ8SignGroupVNNI: VPDPBUSD(|w| as u8, x·sgn(w) as s8) gives exactly
// the lanes of VPMADDUBSW + VPMADDWD(ones) (q8SignGroup): the products are
// the same and neither saturates, since a pair is at most 2·128·127 =
// 32512 < 2^15 for VPMADDUBSW and VPDPBUSD sums four into int32 without
// saturating at all.
func TestQ8SignGroupVNNI(t *testing.T) {
	if supported() < levelAVX512 || !archsimd.X86.AVX512VNNI() {
		t.Skip("no AVX512_VNNI")
	}
	check := func(w, x *[32]int8) {
		t.Helper()
		var got [8]int32
		q8SignGroupVNNI(w, x, &got)
		if want := q8SignLanes(w, x); got != want {
			t.Fatalf("VPDPBUSD %v, VPMADDUBSW+VPMADDWD %v (w %v, x %v)", got, want, w, x)
		}
		for k := range 8 {
			var s int32
			for i := 4 * k; i < 4*k+4; i++ {
				s += int32(w[i]) * int32(x[i])
			}
			if got[k] != s {
				t.Fatalf("lane %d = %d, scalar %d", k, got[k], s)
			}
		}
	}
	r := rand.New(rand.NewPCG(9, 9))
	vals := []int8{-128, -127, -1, 0, 1, 127}
	for range 20000 {
		var w, x [32]int8
		for i := range w {
			if r.IntN(2) == 0 {
				w[i], x[i] = vals[r.IntN(len(vals))], vals[1+r.IntN(len(vals)-1)]
			} else {
				w[i], x[i] = int8(r.IntN(256)-128), int8(r.IntN(255)-127)
			}
		}
		check(&w, &x)
	}
	var w, x [32]int8
	for i := range w {
		w[i], x[i] = -128, -127
	}
	check(&w, &x)
	for i := range w {
		w[i], x[i] = -128, 127
	}
	check(&w, &x)
}

// BenchmarkQ8AsmDecode times one-token products streaming their weights
// from DRAM, as decode does: eight 16384×768 Q8_0 matrices (100 MB, more
// than the L3), one product per matrix in turn, the archsimd kernel and the
// assembly alternating on different matrices. GB/s are weight bytes per
// CPU second; asm-cpu-ratio is the archsimd CPU time over the assembly's.
// This is where the assembly's next-tile prefetch (PREFETCHNEXT in
// q8asm_amd64.s) shows: BenchmarkQ8Kernels' 2048×768 matrix stays in L3.
func BenchmarkQ8AsmDecode(b *testing.B) {
	if supported() < levelAVX512 {
		b.Skip("no AVX-512")
	}
	r := rand.New(rand.NewPCG(1, 1))
	rows, cols := 16384, 768
	var ms []*Mat
	for range 8 {
		q := &Mat{Type: Q8_0, Rows: rows, Cols: cols, Q: NewI8(rows * cols), S: NewScales(rows * cols / QK)}
		for i := range q.Q {
			q.Q[i] = int8(r.Uint32())
		}
		for i := range q.S {
			q.S[i] = r.Float32() * 0.01
		}
		ms = append(ms, q)
	}
	x := randVec(r, cols)
	xq, xs := make([]int8, len(x)), NewScales(len(x)/QK)
	QuantizeRows(x, xq, xs)
	out := make([]float32, rows)
	var c512, casm, t512, tasm time.Duration
	i := 0
	for b.Loop() {
		w := ms[i%len(ms)]
		c0, s := cpuTime(), time.Now()
		matQ8AVX512(out, w.Q, w.S, xq, xs, 0, rows, rows, cols, 1)
		w = ms[(i+1)%len(ms)]
		c1, m := cpuTime(), time.Now()
		matQ8AVX512Asm(out, w.Q, w.S, xq, xs, 0, rows, rows, cols, 1)
		c2, e := cpuTime(), time.Now()
		// Odd and even matrices swap kernels each round.
		i += 3
		c512 += c1 - c0
		casm += c2 - c1
		t512 += m.Sub(s)
		tasm += e.Sub(m)
	}
	bytes := float64(ms[0].Bytes()) * float64(b.N)
	b.ReportMetric(float64(t512)/float64(tasm), "asm-ratio")
	if casm > 0 && c512 > 0 {
		b.ReportMetric(bytes/float64(c512.Nanoseconds()), "avx512-GB/s")
		b.ReportMetric(bytes/float64(casm.Nanoseconds()), "asm-GB/s")
		b.ReportMetric(float64(c512)/float64(casm), "asm-cpu-ratio")
	}
}
