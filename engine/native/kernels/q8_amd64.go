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

// q8SignRows is the four-row tile of matQ8BSignAVX2 (q8blocks_amd64.go):
// group g's 32 quants of row k at wk + g·q8BlockBytes (wk
// already skips the scale), row k's scales widened to fp32 in sk.
func q8SignRows(po unsafe.Pointer, o int, w0, w1, w2, w3 unsafe.Pointer, s0, s1, s2, s3 []float32, G int, x0 unsafe.Pointer, xs []float32) {
	var a0, a1, a2, a3 archsimd.Float32x8
	ones := archsimd.BroadcastInt16x16(1)
	for g8 := 0; g8 < G; g8 += 8 {
		d := scales8(xs, g8)
		c0, c1 := scales8(s0, g8).Mul(d), scales8(s1, g8).Mul(d)
		c2, c3 := scales8(s2, g8).Mul(d), scales8(s3, g8).Mul(d)
		for j := range min(8, G-g8) {
			x := ldi8(x0, (g8+j)*QK)
			off := (g8 + j) * q8BlockBytes
			p := &laneIdx[j]
			a0 = q8SignGroup(ldi8(w0, off), x, ones).ConvertToFloat32().MulAdd(perm(c0, p), a0)
			a1 = q8SignGroup(ldi8(w1, off), x, ones).ConvertToFloat32().MulAdd(perm(c1, p), a1)
			a2 = q8SignGroup(ldi8(w2, off), x, ones).ConvertToFloat32().MulAdd(perm(c2, p), a2)
			a3 = q8SignGroup(ldi8(w3, off), x, ones).ConvertToFloat32().MulAdd(perm(c3, p), a3)
		}
	}
	st4p(po, o, hsum4(a0, a1, a2, a3))
}
