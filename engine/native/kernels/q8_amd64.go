//go:build goexperiment.simd && amd64

package kernels

import (
	"simd/archsimd"
	"unsafe"
)

// The AVX2 Q8_0 × Q8_0 product, llama.cpp's scheme (mul_sum_i8_pairs_float
// in ggml/src/ggml-cpu/arch/x86/quants.c, and tinyBLAS_Q0_AVX's updot in
// ggml/src/ggml-cpu/llamafile/sgemm.cpp): per group of 32, the weight
// bytes' magnitudes |w| (VPABSB) as unsigned bytes times the activations
// with the weights' signs (VPSIGNB: x·sgn(w)) by VPMADDUBSW, widened to
// int32 by VPMADDWD against ones, converted and FMA'd once with
// (weight scale × activation scale). Two 32-byte loads, five integer
// operations and one FMA per group, where the sign-extending kernel it
// replaces needed four widening loads, two VPMADDWD and an add.
//
// The integer sums are exact: |w| ≤ 128 (a −128 weight, which ggml's
// quantizer never writes but a file may hold, is 128 unsigned) and
// |x| ≤ 127 (QuantizeRows rounds to ±127), so a pair sum is at most
// 2·128·127 = 32512, inside int16 without saturating. The sign is taken
// from the weight, not the activation (llama.cpp takes it from its first
// operand, the weight too): x·sgn(w) with x in [−127, 127] never wraps,
// whereas w·sgn(x) would wrap for w = −128.
//
// Reduction order of one output, fixed whatever T or the row range: lane
// k of group g holds Σ w·x over values 4k..4k+3 of the group (exact
// int32), converted to float and FMA'd into one 8-lane accumulator group
// by group in order, then hsum4. Four weight rows per activation row
// share each activation load; every output is bitwise the same in a
// batch, alone, or in the tail tile.

// q8SignGroup is the exact int32 partial sums of one 32-value group: lane
// k is Σ w[i]·x[i] for i in 4k..4k+3.
func q8SignGroup(w, x archsimd.Int8x32, ones archsimd.Int16x16) archsimd.Int32x8 {
	return w.Abs().AsUint8x32().DotProductPairsSaturated(x.CopySign(w)).DotProductPairs(ones)
}

func matQ8SignAVX2(out []float32, wq []int8, ws []float32, xq []int8, xs []float32, lo, hi, rows, cols, T int) {
	if lo >= hi || T <= 0 {
		return
	}
	checkMat(len(out), len(wq), len(xq), lo, hi, rows, cols, T)
	G := cols / QK
	if len(ws) < hi*G || len(xs) < T*G {
		panic("kernels: Q8_0 scale bounds")
	}
	pw, px, po := unsafe.Pointer(&wq[0]), unsafe.Pointer(&xq[0]), unsafe.Pointer(&out[0])
	// Declared while the vector state is clean (see doc.go).
	var tile [4]float32
	for t0 := 0; t0 < T; t0 += tokenBlock {
		t1 := min(T, t0+tokenBlock)
		r := lo
		for ; r+4 <= hi; r += 4 {
			for t := t0; t < t1; t++ {
				q8SignTile(po, t*rows+r, pw, ws, cols, G, r, r+1, r+2, r+3, unsafe.Add(px, t*cols), xs[t*G:(t+1)*G])
			}
		}
		if r < hi {
			// Fewer than four rows left: the last row repeated, into a
			// scratch tile (each output's order is the same as in a full
			// tile).
			r1, r2, r3 := min(r+1, hi-1), min(r+2, hi-1), min(r+3, hi-1)
			for t := t0; t < t1; t++ {
				q8SignTile(unsafe.Pointer(&tile), 0, pw, ws, cols, G, r, r1, r2, r3, unsafe.Add(px, t*cols), xs[t*G:(t+1)*G])
				archsimd.ClearAVXUpperBits()
				copy(out[t*rows+r:t*rows+hi], tile[:hi-r])
			}
		}
	}
	archsimd.ClearAVXUpperBits()
}

// q8SignTile stores at po+o the products of weight rows r0..r3 with the
// activation row at x0 (scales xs).
func q8SignTile(po unsafe.Pointer, o int, pw unsafe.Pointer, ws []float32, cols, G, r0, r1, r2, r3 int, x0 unsafe.Pointer, xs []float32) {
	q8SignRows(po, o, unsafe.Add(pw, r0*cols), unsafe.Add(pw, r1*cols), unsafe.Add(pw, r2*cols), unsafe.Add(pw, r3*cols), QK,
		ws[r0*G:(r0+1)*G], ws[r1*G:(r1+1)*G], ws[r2*G:(r2+1)*G], ws[r3*G:(r3+1)*G], G, x0, xs)
}

// q8SignRows is the four-row tile of both Q8_0 layouts: group g's 32
// quants of row k at wk + g·wstride (QK for split quants, the 34-byte
// block for Q8_0B, whose wk already skips the scale), row k's scales in
// sk.
func q8SignRows(po unsafe.Pointer, o int, w0, w1, w2, w3 unsafe.Pointer, wstride int, s0, s1, s2, s3 []float32, G int, x0 unsafe.Pointer, xs []float32) {
	var a0, a1, a2, a3 archsimd.Float32x8
	ones := archsimd.BroadcastInt16x16(1)
	for g8 := 0; g8 < G; g8 += 8 {
		d := scales8(xs, g8)
		c0, c1 := scales8(s0, g8).Mul(d), scales8(s1, g8).Mul(d)
		c2, c3 := scales8(s2, g8).Mul(d), scales8(s3, g8).Mul(d)
		for j := range min(8, G-g8) {
			x := ldi8(x0, (g8+j)*QK)
			off := (g8 + j) * wstride
			p := &laneIdx[j]
			a0 = q8SignGroup(ldi8(w0, off), x, ones).ConvertToFloat32().MulAdd(perm(c0, p), a0)
			a1 = q8SignGroup(ldi8(w1, off), x, ones).ConvertToFloat32().MulAdd(perm(c1, p), a1)
			a2 = q8SignGroup(ldi8(w2, off), x, ones).ConvertToFloat32().MulAdd(perm(c2, p), a2)
			a3 = q8SignGroup(ldi8(w3, off), x, ones).ConvertToFloat32().MulAdd(perm(c3, p), a3)
		}
	}
	st4p(po, o, hsum4(a0, a1, a2, a3))
}
