//go:build goexperiment.simd && amd64

package kernels

import (
	"math/bits"
	"simd/archsimd"
	"unsafe"
)

// quantizeRowsKAVX512 is quantizeRowsKPortable 16 values at a time, byte
// for byte: the largest magnitude as the lanes' maximum of the absolute
// values' bits (for floats that are not NaN, ordering the bits orders the
// magnitudes), its first occurrence found with a lane mask, then
// iscale·x rounded to even and clamped to 127 in vector form. The scalar
// loop was a visible share of a quantized prefill's profile
// (docs/benchmarks/native.md). Called for whole super-blocks only.
func quantizeRowsKAVX512(x []float32, q []int8, d []float32, bs []int16) {
	// Declared while the vector state is clean (see doc.go).
	var lanes [16]uint32
	for i := range len(x) / QKK {
		px := unsafe.Pointer(&x[i*QKK])
		pq := (*[QKK]int8)(q[i*QKK : (i+1)*QKK])
		amax := absMaxBits(px, &lanes)
		if amax == 0 {
			d[i] = 0
			clear(pq[:])
			clear(bs[i*16 : (i+1)*16])
			continue
		}
		vmax := x[i*QKK+firstAbs(px, amax)]
		iscale := -127 / vmax
		quantizeSuper16(px, pq, iscale)
		for k := range 16 {
			var s int16 // |s| ≤ 16·127
			for _, v := range pq[16*k : 16*k+16] {
				s += int16(v)
			}
			bs[i*16+k] = s
		}
		d[i] = 1 / iscale
	}
}

// absMaxBits is the largest |x| of the super-block at px, as float bits.
func absMaxBits(px unsafe.Pointer, lanes *[16]uint32) uint32 {
	abs := archsimd.BroadcastUint32x16(0x7fffffff)
	m := l16(px, 0).AsUint32x16().And(abs)
	for c := 16; c < QKK; c += 16 {
		m = m.Max(l16(px, c).AsUint32x16().And(abs))
	}
	m.Store(lanes)
	archsimd.ClearAVXUpperBits()
	var amax uint32
	for _, v := range lanes {
		amax = max(amax, v)
	}
	return amax
}

// firstAbs is the index of the first value at px whose |x| has bits amax.
func firstAbs(px unsafe.Pointer, amax uint32) int {
	abs, want := archsimd.BroadcastUint32x16(0x7fffffff), archsimd.BroadcastUint32x16(amax)
	for c := 0; c < QKK; c += 16 {
		if b := l16(px, c).AsUint32x16().And(abs).Equal(want).ToBits(); b != 0 {
			archsimd.ClearAVXUpperBits()
			return c + bits.TrailingZeros16(b)
		}
	}
	archsimd.ClearAVXUpperBits()
	return 0 // unreachable: amax is one of the values
}

// quantizeSuper16 writes q = min(127, round-to-even(iscale·x)) for the
// 256 values at px.
func quantizeSuper16(px unsafe.Pointer, q *[QKK]int8, iscale float32) {
	is := archsimd.BroadcastFloat32x16(iscale)
	top := archsimd.BroadcastInt32x16(127)
	for c := 0; c < QKK; c += 16 {
		v := l16(px, c).Mul(is).RoundToEvenScaled(0).ConvertToInt32().Min(top)
		v.TruncateToInt8().Store((*[16]int8)(q[c : c+16]))
	}
	archsimd.ClearAVXUpperBits()
}
