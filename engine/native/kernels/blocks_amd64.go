//go:build goexperiment.simd && amd64

package kernels

import (
	"simd/archsimd"
	"unsafe"
)

// The AVX2 Q4_0 × Q8_0 product, and the helpers the k-quant kernels
// (q8k_amd64.go) share, used at the AVX2 and AVX-512 levels. The scheme is
// llama.cpp's AVX2 one (ggml/src/ggml-cpu/arch/x86/quants.c,
// ggml_vec_dot_q4_0_q8_0): the weight nibbles are unpacked in registers
// to unsigned bytes, multiplied with the signed int8 activations by
// VPMADDUBSW (unsigned×signed byte pairs summed to int16), widened by
// VPMADDWD against ones to int32, and every block of 32 is converted and
// FMA'd with (block scale × activation scale) into an 8-lane accumulator.
// The −8 offset is subtracted in int16 as VPMADDUBSW(8, y), so the sums
// stay exact (a pair sum is at most 2·15·127).
//
// No scalar float code runs inside the kernels (Go compiles it to legacy
// SSE, slow on Intel while the vector upper halves are dirty): the fp16
// block scales are widened to fp32 bit patterns with integer code and
// broadcast into vectors.
//
// The reduction order of one output (fixed whatever T or the row range):
// even and odd blocks in order into two accumulators (two dependency
// chains: one FMA chain was bound by the FMA latency), then hsum4 of
// their sum. Batched and single-token results are therefore bitwise
// equal.

// bcastF16 broadcasts the IEEE half at p as float32, with integer code
// and one vector multiply (no scalar float code): the half's exponent and
// mantissa bits placed as a float32's, times 2^112, is the same value for
// normal and subnormal halves alike; infinities and NaNs get the all-ones
// exponent first (k112 is a vector of 2^112).
func bcastF16(p unsafe.Pointer, k112 archsimd.Float32x8) archsimd.Float32x8 {
	h := uint32(*(*uint16)(p))
	b := (h&0x7fff)<<13 | (h&0x8000)<<16 | ((h>>10&0x1f)+1)>>5*0x70000000
	return archsimd.BroadcastUint32x8(b).AsFloat32x8().Mul(k112)
}

// Shifts are done as multiplies by powers of two: archsimd's ShiftAll*
// take the count in a general register and Go moves it to a vector
// register with a legacy-SSE MOVQ inside the loop, which dominated a Q4_K
// product's time (the SSE/AVX transition; docs/benchmarks/native.md). k is
// a loop-invariant vector of 2^n (left shift) or 2^(16-n) (right shift,
// the high half of the 16-bit product).
func shl16(v archsimd.Uint16x16, k archsimd.Uint16x16) archsimd.Uint16x16 { return v.Mul(k) }
func shr16(v archsimd.Uint16x16, k archsimd.Uint16x16) archsimd.Uint16x16 { return v.MulHigh(k) }

func k16(v uint16) archsimd.Uint16x16 { return archsimd.BroadcastUint16x16(v) }

func pow112() archsimd.Float32x8 {
	return archsimd.BroadcastUint32x8(uint32(127+112) << 23).AsFloat32x8()
}

func ldu8(p unsafe.Pointer, off int) archsimd.Uint8x32 {
	return archsimd.LoadUint8x32((*[32]uint8)(unsafe.Add(p, off)))
}

func ldi8(p unsafe.Pointer, off int) archsimd.Int8x32 {
	return archsimd.LoadInt8x32((*[32]int8)(unsafe.Add(p, off)))
}

// bytes8 puts the eight bytes of v (little-endian) in the low half of a
// vector.
func bytes8(v uint64) archsimd.Uint8x16 {
	var z archsimd.Uint64x2
	return z.SetElem(0, v).AsUint8x16()
}

// Lane selectors for Float32x8.Permute.
var (
	laneIdx = [8][8]uint32{
		{0, 0, 0, 0, 0, 0, 0, 0}, {1, 1, 1, 1, 1, 1, 1, 1}, {2, 2, 2, 2, 2, 2, 2, 2}, {3, 3, 3, 3, 3, 3, 3, 3},
		{4, 4, 4, 4, 4, 4, 4, 4}, {5, 5, 5, 5, 5, 5, 5, 5}, {6, 6, 6, 6, 6, 6, 6, 6}, {7, 7, 7, 7, 7, 7, 7, 7},
	}
	// pairIdx[k]: lanes 0-3 take lane 2k, lanes 4-7 lane 2k+1 (the two
	// 16-value scales of a Q6_K group, matching VPMADDWD's lane order).
	pairIdx = [4][8]uint32{{0, 0, 0, 0, 1, 1, 1, 1}, {2, 2, 2, 2, 3, 3, 3, 3}, {4, 4, 4, 4, 5, 5, 5, 5}, {6, 6, 6, 6, 7, 7, 7, 7}}
	// dupLo/dupHi spread four activation scales over lane pairs.
	dupLo = [8]uint32{0, 0, 1, 1, 2, 2, 3, 3}
	dupHi = [8]uint32{4, 4, 5, 5, 6, 6, 7, 7}
)

func perm(v archsimd.Float32x8, idx *[8]uint32) archsimd.Float32x8 {
	return v.Permute(archsimd.LoadUint32x8(idx))
}

// matBlocksAVX2 computes rows [lo,hi) of a Q4_0 product for T activation
// rows, four rows at a time (their horizontal sums folded together, as
// for Q8_0).
func matBlocksAVX2(out []float32, w *Mat, xq []int8, xs []float32, lo, hi, T int) {
	if lo >= hi || T <= 0 {
		return
	}
	rows, cols := w.Rows, w.Cols
	rb, err := BlockRowBytes(w.Type, cols)
	G := cols / QK
	if err != nil || w.Type != Q4_0 || len(w.B) < hi*rb || len(xq) < T*cols || len(xs) < T*G || len(out) < (T-1)*rows+hi || lo < 0 {
		panic("kernels: block product bounds")
	}
	n := cols / QK
	pw, px, pxs := unsafe.Pointer(&w.B[0]), unsafe.Pointer(&xq[0]), unsafe.Pointer(&xs[0])
	// Declared while the vector state is clean (see doc.go).
	var acc [4][8]float32
	var tile [4]float32
	for t0 := 0; t0 < T; t0 += tokenBlock {
		t1 := min(T, t0+tokenBlock)
		for r := lo; r < hi; r += 4 {
			w0, w1 := unsafe.Add(pw, r*rb), unsafe.Add(pw, min(r+1, hi-1)*rb)
			w2, w3 := unsafe.Add(pw, min(r+2, hi-1)*rb), unsafe.Add(pw, min(r+3, hi-1)*rb)
			for t := t0; t < t1; t++ {
				xt, st := unsafe.Add(px, t*cols), unsafe.Add(pxs, t*G*4)
				q40RowAVX2(&acc[0], w0, n, xt, st)
				q40RowAVX2(&acc[1], w1, n, xt, st)
				q40RowAVX2(&acc[2], w2, n, xt, st)
				q40RowAVX2(&acc[3], w3, n, xt, st)
				storeRows(&acc, out, t*rows+r, hi-r, &tile)
			}
		}
	}
	archsimd.ClearAVXUpperBits()
}

// storeRows folds four rows' accumulators and stores the sums at
// out[o:o+min(4,left)].
func storeRows(acc *[4][8]float32, out []float32, o, left int, tile *[4]float32) {
	storeSums(hsum4(archsimd.LoadFloat32x8(&acc[0]), archsimd.LoadFloat32x8(&acc[1]),
		archsimd.LoadFloat32x8(&acc[2]), archsimd.LoadFloat32x8(&acc[3])), out, o, left, tile)
}

// storeSums stores four row sums at out[o:o+min(4,left)], a partial tile
// through tile.
func storeSums(h archsimd.Float32x4, out []float32, o, left int, tile *[4]float32) {
	if left >= 4 {
		st4(h, out, o)
		return
	}
	h.Store(tile)
	archsimd.ClearAVXUpperBits()
	copy(out[o:o+left], tile[:left])
}

// llama.cpp's masks for unpacking the twelve Q4_K/Q5_K scale bytes.
const (
	kmask1 = 0x3f3f3f3f
	kmask2 = 0x0f0f0f0f
	kmask3 = 0x03030303
)

// kScaleBytes unpacks the twelve scale bytes of a Q4_K/Q5_K super-block
// at x into the eight 6-bit scales (first word) and eight mins (second),
// one per byte, as get_scale_min_k4 decodes them: the utmp shuffle of
// ggml_vec_dot_q4_K_q8_K. Integer code only.
func kScaleBytes(x unsafe.Pointer) (sc, mn uint64) {
	u0 := *(*uint32)(unsafe.Add(x, 4))
	u1 := *(*uint32)(unsafe.Add(x, 8))
	u2 := *(*uint32)(unsafe.Add(x, 12))
	u3 := (u2>>4)&kmask2 | ((u1>>6)&kmask3)<<4
	ux := u1 & kmask1
	u1 = u2&kmask2 | ((u0>>6)&kmask3)<<4
	return uint64(u0&kmask1) | uint64(u1)<<32, uint64(ux) | uint64(u3)<<32
}

func u8f(v uint64) archsimd.Float32x8 {
	return bytes8(v).ExtendLo8ToUint32().AsInt32x8().ConvertToFloat32()
}

func q40RowAVX2(acc *[8]float32, pb unsafe.Pointer, n int, px, pxs unsafe.Pointer) {
	var a, a1 archsimd.Float32x8
	var z archsimd.Uint8x32
	m4 := archsimd.BroadcastUint8x16(0x0F)
	m8 := archsimd.BroadcastUint8x32(8)
	ones := archsimd.BroadcastInt16x16(1)
	k112 := pow112()
	r4 := archsimd.BroadcastUint16x8(1 << 12)
	for b := range n {
		a, a1 = a1, a // even blocks into one chain, odd into the other
		x := unsafe.Add(pb, 18*b)
		q := archsimd.LoadUint8x16((*[16]uint8)(unsafe.Add(x, 2)))
		v := z.SetLo(q.And(m4)).SetHi(q.AsUint16x8().MulHigh(r4).AsUint8x16().And(m4))
		y := ldi8(px, 32*b)
		s := v.DotProductPairsSaturated(y).Sub(m8.DotProductPairsSaturated(y)).DotProductPairs(ones).ConvertToFloat32()
		a = s.MulAdd(bcastF16(x, k112).Mul(archsimd.BroadcastUint32x8(*(*uint32)(unsafe.Add(pxs, 4*b))).AsFloat32x8()), a)
	}
	a.Add(a1).Store(acc)
}
