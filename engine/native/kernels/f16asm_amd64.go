//go:build goexperiment.simd && amd64

package kernels

import "golang.org/x/sys/cpu"

// The one-token F16 product of the AVX-512 level in Go assembly
// (f16asm_amd64.s). Decode streams every weight once per token and is
// bound by memory, and matF16's buffer path (widen a few rows into a
// per-thread fp32 buffer, then the fp32 kernel) streamed too slowly from DRAM.
// The assembly widens with VCVTPH2PS (which archsimd lacks) straight into
// the FMAs, eight rows per pass over the whole row range in one call (then
// four, then the last rows repeated in a four-row tile), and prefetches a
// tile ahead (PREFETCHT0, as the Q8_0 and Q6_K assembly do: the hardware
// prefetchers fall behind several interleaved row streams).
//
// The next-tile prefetch raised the four-row tile's bandwidth, where
// prefetching further ahead or with PREFETCHT1 did not; eight rows per
// pass beat four on every shape tried; and the assembly beats the buffer
// path in BenchmarkF16AsmDecode and end to end in decode. The figures, with
// their commands, are in docs/benchmarks/native.md ("Kernel design
// figures").
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
