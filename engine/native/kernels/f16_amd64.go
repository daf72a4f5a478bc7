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
