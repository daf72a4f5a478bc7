//go:build goexperiment.simd && amd64

package kernels

import (
	"simd/archsimd"
	"unsafe"
)

// Q6_K × Q8_K products of the AVX-512 level in assembly (q6k512_amd64.s),
// replacing q6kRow512 (decode) and q6kStep4x512 (prefill). Go's register
// allocator uses 16 vector registers and decodes the scales and fp16 in
// scalar code; with all 32 zmm registers, the kernels keep the constants,
// the unpacked weights and several outputs' integer sums in registers.
//
// Per super-block the scheme is q6kRow512's: the 6-bit values unpacked to
// unsigned bytes two 32-value chunks per 512-bit vector, VPMADDUBSW with
// the int8 activations (pairs to int16, exact: at most 2·63·127), then
// VPDPWSSD (AVX512_VNNI: VPMADDWD and VPADDD in one instruction) against
// the sixteen int8 scales spread to int16 lanes with one VPERMW per
// vector. The int32 lanes hold exactly the integers q6kRow512's lanes hold
// (the same 4-value groups per lane, the ranges of q8k_amd64.go keep every
// sum exact, so the order of the additions cannot show), folded to eight
// lanes (k + 8+k), minus Σ 32·sc_k·bsum_k (q6kOffset, as VPMADDWD), then
// converted and FMA'd as a += s·(d·dx) with d from VCVTPH2PS (exact, as
// bcastF16). Every output is therefore bitwise q6kRow512's, whichever
// kernel (one token, four tokens) computes it; TestQ6KAsmBitwise checks it.
//
// Tiles, and why (BenchmarkQ6KAsm; the figures are in
// docs/benchmarks/native.md, "Kernel design figures"):
//
//   - Decode runs the whole row range in one call, four weight rows at a
//     time (the activations loaded once for the four), the sums folded
//     and stored in the assembly, a little faster than a call per four
//     rows with Go's storeRows. It is bound by the vector pipes the
//     multiplies, shifts and VPERMWs share. Read from memory (the output
//     matrix), the four rows' streams defeated the hardware prefetcher
//     and lost to archsimd (which reads one row after another) until the
//     kernel prefetched 8 KiB ahead (4 KiB, 12 KiB and 16 KiB did less).
//   - Prefill runs four weight rows × a token block in one call, eight
//     tokens per pass and one row at a time (eight zmm integer sums; the
//     row's unpacked weights and scales serve eight tokens), the sums
//     folded and stored in the assembly. The 4 VPMADDUBSW + 4 VPDPWSSD,
//     which issue one zmm per cycle, bound it, also with the weights in
//     memory. Two rows × four tokens per pass (q6kTile4AVX512, kept for
//     the last two to four tokens, and for a batch of two to four
//     decodes) was slower, and slower still with its sums folded in Go
//     (storeCol).
//   - Two tokens in one four-token pass rather than two one-token passes:
//     slower in cache (the pass computes four), faster from memory (the
//     weights read once), once that pass prefetches as decode does.
//   - VPDPWSSD against VPMADDWD + VPADDD: a little faster in both.
//     VPDPBUSD would sum four products unscaled, and the scale (one per 16
//     values) would then cost a VPMULLD per vector.
//   - GFNI (VGF2P8AFFINEQB) to place the qh bits and the high nibbles
//     without shifts and masks: within noise; not worth the extra CPU
//     feature.

// q6kAsmOK: the CPU has what the assembly uses (AVX512F, BW and VL, and
// AVX512_VNNI for VPDPWSSD). Fixed at start-up like level; only the
// tests turn it off, to reach the archsimd kernels for comparison.
var q6kAsmOK = avx512VNNI

// useQ6KAsm reports whether Q6_K products take the assembly kernels.
func useQ6KAsm() bool { return level == levelAVX512 && q6kAsmOK }

// q6kRows4AVX512 computes four outputs of one activation row: the weight
// rows at w0..w3 (n Q6_K super-blocks each) against the Q8_K values at py
// (scales pd, bsums pbs), storing each row's 8-lane accumulator in acc[r]
// (bitwise what q6kRow512 stores). The products use q6kMatVecAVX512 (the
// same code per four rows); the tests compare these lanes.
//
//go:noescape
func q6kRows4AVX512(acc *[4][8]float32, w0, w1, w2, w3 unsafe.Pointer, n int, py, pd, pbs unsafe.Pointer)

// q6kMatVecAVX512 computes out[0:rows] for one activation row: weight row
// r at pw + r·rb (n Q6_K super-blocks) against the Q8_K values at py
// (scales pd, bsums pbs). Four rows at a time as q6kRows4AVX512, each sum
// folded in hsum4's order (storeRows), a last partial tile stored through
// a mask.
//
//go:noescape
func q6kMatVecAVX512(out unsafe.Pointer, pw unsafe.Pointer, rb, rows, n int, py, pd, pbs unsafe.Pointer)

// q6kTile4AVX512 computes four weight rows (row r at pw + r·rb; with left
// < 4 the missing ones repeat the last, their outputs not stored) against
// ntok = 1..4 activation rows in one pass: token t's values at py + t·ys,
// scales at pd + t·ds, bsums at pbs + t·bss (strides in bytes), its
// outputs at out + t·os; tokens past ntok repeat the last one and are not
// stored, so two or three tokens (a small batch of decodes) read the
// weights once. Rows two at a time: acc[r][k] holds the 8-lane
// accumulators (as q6kRows4AVX512 would give) before the sums are folded
// in hsum4's order (storeCol).
//
//go:noescape
func q6kTile4AVX512(acc *[4][4][8]float32, out unsafe.Pointer, os int, pw unsafe.Pointer, rb, left, n int, py unsafe.Pointer, ys int, pd unsafe.Pointer, ds int, pbs unsafe.Pointer, bss int, ntok int)

// q6kTile8AVX512 is q6kTile4AVX512 for steps·8 tokens, eight per pass,
// one weight row at a time (rows missing from a partial tile are not
// computed): acc[r][k] for row r, token k.
//
//go:noescape
func q6kTile8AVX512(acc *[4][8][8]float32, out unsafe.Pointer, os int, pw unsafe.Pointer, rb, left, n int, py unsafe.Pointer, ys int, pd unsafe.Pointer, ds int, pbs unsafe.Pointer, bss int, steps int)

// matQ6KAsm is matKQuantAVX2 for Q6_K with the assembly kernels: tiles of
// four weight rows against eight tokens per pass (prefill), then up to
// four more in one pass, a last single token (decode: the only one) over
// all the rows at once. The caller has checked the bounds (pw: the
// weights, rb bytes per row; py, pd, pbs: the Q8_K rows).
func matQ6KAsm(out []float32, pw, py, pd, pbs unsafe.Pointer, rb, rows, cols, lo, hi, T int) {
	n := cols / QKK
	ds, bss := n*4, cols/bsumsPer*2
	T8 := T &^ 7
	// The tile kernels' working memory.
	var acc8 [4][8][8]float32
	var acc4 [4][4][8]float32
	for t0 := 0; t0 < T8; t0 += tokenBlock {
		t1 := min(T8, t0+tokenBlock)
		for r := lo; r < hi; r += 4 {
			q6kTile8AVX512(&acc8, unsafe.Pointer(&out[t0*rows+r]), rows*4, unsafe.Add(pw, r*rb), rb, hi-r, n,
				unsafe.Add(py, t0*cols), cols, unsafe.Add(pd, t0*ds), ds, unsafe.Add(pbs, t0*bss), bss, (t1-t0)/8)
		}
	}
	for t0 := T8; t0 < T; {
		if k := min(4, T-t0); k > 1 {
			for r := lo; r < hi; r += 4 {
				q6kTile4AVX512(&acc4, unsafe.Pointer(&out[t0*rows+r]), rows*4, unsafe.Add(pw, r*rb), rb, hi-r, n,
					unsafe.Add(py, t0*cols), cols, unsafe.Add(pd, t0*ds), ds, unsafe.Add(pbs, t0*bss), bss, k)
			}
			t0 += k
			continue
		}
		q6kMatVecAVX512(unsafe.Pointer(&out[t0*rows+lo]), unsafe.Add(pw, lo*rb), rb, hi-lo, n,
			unsafe.Add(py, t0*cols), unsafe.Add(pd, t0*ds), unsafe.Add(pbs, t0*bss))
		t0++
	}
	archsimd.ClearAVXUpperBits()
}
