//go:build goexperiment.simd && amd64

package kernels

import (
	"simd/archsimd"
	"unsafe"
)

// f16RowsAVX512 widens 16 halves per step without VCVTPH2PS (archsimd has
// no fp16 conversion): the half's exponent and mantissa shifted into an
// fp32's (bits << 13) are the value times 2^-112 for normal and subnormal
// halves alike, so one multiply by 2^112 rescales them exactly; the sign
// is moved separately. Halves with the maximum exponent (infinities, NaN)
// come out as finite values ≥ 65536 here; the KV cache never holds them
// unless the model itself overflowed.
func f16RowsAVX512(dst []float32, dstride int, src []uint16, sstride, rows, width int) {
	n16 := width / 16
	pd, ps := unsafe.Pointer(&dst[0]), unsafe.Pointer(&src[0])
	if n16 > 0 {
		mag, sgn := archsimd.BroadcastUint32x16(0x7fff), archsimd.BroadcastUint32x16(0x8000)
		k := archsimd.BroadcastUint32x16(0x77800000).AsFloat32x16() // 2^112
		for i := range rows {
			s, d := unsafe.Add(ps, 2*i*sstride), unsafe.Add(pd, 4*i*dstride)
			for c := range n16 {
				h := archsimd.LoadUint16x16((*[16]uint16)(unsafe.Add(s, 32*c))).ExtendToUint32()
				f := h.And(mag).ShiftAllLeft(13).AsFloat32x16().Mul(k)
				f.AsUint32x16().Or(h.And(sgn).ShiftAllLeft(16)).AsFloat32x16().Store((*[16]float32)(unsafe.Add(d, 64*c)))
			}
		}
		archsimd.ClearAVXUpperBits()
	}
	if r := n16 * 16; r < width {
		for i := range rows {
			for j := r; j < width; j++ {
				dst[i*dstride+j] = F16ToF32(src[i*sstride+j])
			}
		}
	}
}

// f32ToF16AVX512 is F32ToF16 16 values at a time, bit for bit, without
// VCVTPS2PH (archsimd has none): the branch-free round-to-nearest-even
// narrowing of F. Giesen's float_to_half_fast3_rtne, each case computed
// for all lanes and picked by mask. Normal halves: the exponent rebased
// and the mantissa rounded by adding 0xfff plus its lowest kept bit before
// the shift (a carry into the exponent rounds up to the next binade, or
// to infinity). Subnormal halves and zero: adding 0.5 as a float puts the
// rounded mantissa in the low bits (the FPU does the rounding). Infinity
// and overflow: 0x7c00; NaN: 0x7e00.
func f32ToF16AVX512(dst []uint16, src []float32) {
	n16 := len(src) &^ 15
	if n16 > 0 {
		_ = dst[n16-1]
		f32ToF16x16(unsafe.Pointer(&dst[0]), unsafe.Pointer(&src[0]), n16)
	}
	for i := n16; i < len(src); i++ {
		dst[i] = F32ToF16(src[i])
	}
}

func f32ToF16x16(pd, ps unsafe.Pointer, n16 int) {
	b := archsimd.BroadcastUint32x16
	signBit, inf32, max16 := b(0x80000000), b(0x7f800000), b(0x47800000)
	minNormal16, magic := b(0x38800000), b(0x3f000000)
	rebias, one := b(0xc8000fff), b(1)
	for i := 0; i < n16; i += 16 {
		x := l16(ps, i).AsUint32x16()
		sign := x.And(signBit)
		f := x.Xor(sign)
		norm := f.Add(rebias).Add(f.ShiftAllRight(13).And(one)).ShiftAllRight(13)
		sub := f.AsFloat32x16().Add(magic.AsFloat32x16()).AsUint32x16().Sub(magic)
		o := norm.Merge(sub, f.GreaterEqual(minNormal16))
		big := b(0x7c00).Merge(b(0x7e00), f.LessEqual(inf32))
		o = big.Merge(o, f.GreaterEqual(max16))
		o.Or(sign.ShiftAllRight(16)).TruncateToUint16().Store((*[16]uint16)(unsafe.Add(pd, 2*i)))
	}
	archsimd.ClearAVXUpperBits()
}
