//go:build goexperiment.simd && amd64

package kernels

import "golang.org/x/sys/cpu"

// The one-token F16 product of the AVX-512 level in Go assembly
// (f16asm_amd64.s). Decode streams every weight once per token and is
// bound by memory: matF16's buffer path (widen a few rows into a per-thread
// fp32 buffer, then the fp32 kernel) streamed about 10-19 GB/s from DRAM.
// The assembly widens with VCVTPH2PS (which archsimd lacks) straight into
// the FMAs, eight rows per pass over the whole row range in one call (then
// four, then the last rows repeated in a four-row tile), and prefetches a
// tile ahead (PREFETCHT0, as the Q8_0 and Q6_K assembly do: the hardware
// prefetchers fall behind several interleaved row streams).
//
// Measured on a Zen 5 EPYC (one thread, matrices from DRAM, 2026-12-05,
// machine not quiet): the next-tile prefetch takes the four-row tile from
// 17-21 to 24-28 GB/s; prefetching 2-16 KiB further ahead did no better;
// PREFETCHT1 no better. Eight rows over four: 7-21% less time on
// 768-column matrices (the 110M shape), even on 1024 and 3072 columns.
// BenchmarkF16AsmDecode: 1.2-1.5× the buffer path's speed (2-3.7× on
// 1024×3072). End to end, one thread, decode (tok/s, before → after,
// alternating binaries, machine busy with other builds): 110M F16 38-65
// → 44-100, median pair ratio 1.46 over 11 pairs (llama.cpp 87.5 on a
// quiet machine); Qwen3-0.6B shape F16 7.9-8.6 → 11.7-14.3 (llama.cpp
// 15.0).
//
// Each output is bitwise what the buffer path gives (TestF16AsmBitwise):
// the same widened values (both widenings are exact for finite halves), the
// same one 16-lane accumulator per row with fma(w, x, acc) in column order,
// the same fold16 + hsum4 reduction. Only infinities and NaN halves, which
// no finite model holds, widen differently (F16ToF32Rows' integer trick
// makes them finite). Rows whose length is not a multiple of 16 keep the
// buffer path (its scalar tail is not reproduced here).
//
// VCVTPH2PS with a zmm destination is an AVX512F instruction; the rest is
// AVX512F plus VL for the xmm/ymm folds.

// f16Dot4 stores out[4k..4k+3] for k < tiles: the products of rows w0..w3
// (n16·16 halves each) advanced by 4k·stride bytes with x (n16·16 floats).
// Its prefetches run 4·stride bytes (one tile) ahead of w0.
//
//go:noescape
func f16Dot4(out *float32, w0, w1, w2, w3 *uint16, x *float32, n16, tiles, stride int)

// f16Dot8 is f16Dot4 for eight consecutive rows per tile from w (row k
// at w + k·stride bytes), tiles times, storing 8 outputs per tile.
//
//go:noescape
func f16Dot8(out *float32, w *uint16, x *float32, n16, tiles, stride int)

// f16AsmOK is whether the CPU runs f16Dot4; f16Asm selects it at the
// AVX-512 level. Only tests and benchmarks clear f16Asm, to reach the
// buffer path.
var (
	f16AsmOK = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL
	f16Asm   = true
)

// matF16DecodeAsm computes rows [lo,hi) of a one-token F16 product with
// f16Dot4, or reports false where it does not apply.
func matF16DecodeAsm(out []float32, w *Mat, x []float32, lo, hi int) bool {
	cols := w.Cols
	if !f16Asm || !f16AsmOK || cols%16 != 0 || cols <= 0 {
		return false
	}
	if lo >= hi {
		return true
	}
	if lo < 0 || hi > w.Rows || len(w.H) < hi*cols || len(x) < cols || len(out) < hi {
		panic("kernels: F16 product bounds")
	}
	n16, stride := cols/16, 2*cols
	if n8 := (hi - lo) / 8; n8 > 0 {
		f16Dot8(&out[lo], &w.H[lo*cols], &x[0], n16, n8, stride)
		lo += 8 * n8
	}
	n := (hi - lo) / 4
	if n > 0 {
		f16Dot4(&out[lo], &w.H[lo*cols], &w.H[(lo+1)*cols], &w.H[(lo+2)*cols], &w.H[(lo+3)*cols], &x[0], n16, n, stride)
	}
	if r := lo + 4*n; r < hi {
		// Fewer than four rows left: the last row repeated, into a
		// scratch tile (each row is reduced on its own).
		var tile [4]float32
		r1, r2, r3 := min(r+1, hi-1), min(r+2, hi-1), min(r+3, hi-1)
		f16Dot4(&tile[0], &w.H[r*cols], &w.H[r1*cols], &w.H[r2*cols], &w.H[r3*cols], &x[0], n16, 1, 0)
		copy(out[r:hi], tile[:])
	}
	return true
}
