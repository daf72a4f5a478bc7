//go:build goexperiment.simd && amd64

package kernels

import (
	"simd/archsimd"
	"unsafe"
)

// swigluAVX512 is SwiGLU 16 values at a time: the scalar loop's math.Exp
// was a visible share of a quantized prefill's profile
// (docs/benchmarks/native.md). silu(v) = v·σ(v) is computed from t = e^−|v|,
// which exp16 (x ≤ 0) covers without overflow: σ(v) = 1/(1+t) for v ≥ 0
// and t/(1+t) below. Within a few ulp of the portable loop, except that
// exp16 flushes e^v below v = −87.3 to 0 (silu there is below 1e-36 in
// magnitude); like every level's kernels, one process uses this one for
// every call.
func swigluAVX512(g, u []float32) {
	n16 := len(g) &^ 15
	if n16 > 0 {
		_ = u[n16-1]
		swiglu16(unsafe.Pointer(&g[0]), unsafe.Pointer(&u[0]), n16)
	}
	swigluPortable(g[n16:], u[n16:len(g)])
}

func swiglu16(pg, pu unsafe.Pointer, n16 int) {
	sign := archsimd.BroadcastUint32x16(0x80000000)
	one, zero := archsimd.BroadcastFloat32x16(1), archsimd.BroadcastFloat32x16(0)
	for i := 0; i < n16; i += 16 {
		v := l16(pg, i)
		t := exp16(v.AsUint32x16().Or(sign).AsFloat32x16())
		s := one.Div(one.Add(t))
		sig := s.Merge(t.Mul(s), v.GreaterEqual(zero))
		v.Mul(sig).Mul(l16(pu, i)).Store((*[16]float32)(unsafe.Add(pg, 4*i)))
	}
	archsimd.ClearAVXUpperBits()
}
