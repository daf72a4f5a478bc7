//go:build goexperiment.simd && amd64

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"simd/archsimd"
	"testing"
	"time"
)

// TestQ8AsmBitwise: the assembly tiles give bitwise what matQ8BAVX512
// gives, for every T (the 8×1 decode tiles, the 4×4 tiles and the
// one-token tail), column counts that are and are not multiples of 16
// groups, row ranges starting and ending inside a tile, activation scales
// without padding, and extreme quants and scales.
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
				c := newQ8BlockCase(r, rows, cols, T, (rows+T)%3 == 0)
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
					matQ8BAVX512(want, c.blk, c.xq, c.xs, lo, hi, T)
					matQ8BAVX512Asm(got, c.blk, c.xq, c.xs, lo, hi, T)
					if i := sameBits(got, want); i >= 0 {
						t.Fatalf("%s rows [%d,%d): out[%d] = %g (%#x), archsimd %g (%#x)", name, lo, hi, i,
							got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
					}
				}
			}
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
		c := newQ8BlockCase(rand.New(rand.NewPCG(seed, 3)), nr, ng*QK, nt, seed%2 == 0)
		want := make([]float32, nt*nr)
		got := make([]float32, nt*nr)
		matQ8BAVX512(want, c.blk, c.xq, c.xs, 0, nr, nt)
		matQ8BAVX512Asm(got, c.blk, c.xq, c.xs, 0, nr, nt)
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
// from DRAM, as decode does: eight 16384×768 Q8_0 matrices (106 MB, more
// than the L3), one product per matrix in turn, the archsimd kernel and the
// assembly alternating on different matrices. GB/s are weight bytes per
// CPU second; asm-cpu-ratio is the archsimd CPU time over the assembly's.
// This is where the assembly's next-tile prefetch (PREFETCHT0 in
// q8asm_amd64.s) shows: BenchmarkQ8Kernels' 2048×768 matrix stays in L3.
func BenchmarkQ8AsmDecode(b *testing.B) {
	if supported() < levelAVX512 {
		b.Skip("no AVX-512")
	}
	r := rand.New(rand.NewPCG(1, 1))
	rows, cols := 16384, 768
	var ms []*Mat
	for range 8 {
		ms = append(ms, randQ8B(r, rows, cols, NewBytes))
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
		matQ8BAVX512(out, w, xq, xs, 0, rows, 1)
		w = ms[(i+1)%len(ms)]
		c1, m := cpuTime(), time.Now()
		matQ8BAVX512Asm(out, w, xq, xs, 0, rows, 1)
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
