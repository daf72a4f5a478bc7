//go:build goexperiment.simd && amd64

package kernels

import "simd/archsimd"

// The AVX2 Q8_0 kernel as it was before matQ8SignAVX2 (sign-extending
// loads and VPMADDWD), kept in the tests as the baseline that
// BenchmarkQ8Kernels measures the new kernel against in the same run.

// q8group is the exact integer dot product of one 32-value group, as eight
// int32 partial sums.
func q8group(w, x []int8) archsimd.Int32x8 {
	wl := archsimd.LoadInt8x16((*[16]int8)(w[0:16])).ExtendToInt16()
	wh := archsimd.LoadInt8x16((*[16]int8)(w[16:32])).ExtendToInt16()
	xl := archsimd.LoadInt8x16((*[16]int8)(x[0:16])).ExtendToInt16()
	xh := archsimd.LoadInt8x16((*[16]int8)(x[16:32])).ExtendToInt16()
	return wl.DotProductPairs(xl).Add(wh.DotProductPairs(xh))
}

// The Q8_0 reduction order: per group in order, the exact int32 partial
// sums converted to float and FMA'd with (weight scale × activation scale)
// into one 8-lane accumulator; then the canonical horizontal sum.
func matQ8ExtendAVX2(out []float32, wq []int8, ws []float32, xq []int8, xs []float32, lo, hi, rows, cols, T int) {
	G := cols / QK
	var idx [8]archsimd.Uint32x8
	for j := range idx {
		idx[j] = archsimd.BroadcastUint32x8(uint32(j))
	}
	for t0 := 0; t0 < T; t0 += tokenBlock {
		t1 := min(T, t0+tokenBlock)
		r := lo
		for ; r+4 <= hi; r += 4 {
			q0 := wq[r*cols : (r+4)*cols]
			s0, s1 := ws[r*G:(r+1)*G], ws[(r+1)*G:(r+2)*G]
			s2, s3 := ws[(r+2)*G:(r+3)*G], ws[(r+3)*G:(r+4)*G]
			for t := t0; t < t1; t++ {
				xt, xst := xq[t*cols:(t+1)*cols], xs[t*G:(t+1)*G]
				var a0, a1, a2, a3 archsimd.Float32x8
				for g8 := 0; g8 < G; g8 += 8 {
					d := scales8(xst, g8)
					c0, c1 := scales8(s0, g8).Mul(d), scales8(s1, g8).Mul(d)
					c2, c3 := scales8(s2, g8).Mul(d), scales8(s3, g8).Mul(d)
					for j := range min(8, G-g8) {
						g := g8 + j
						xg := xt[g*QK : g*QK+QK]
						p := idx[j]
						a0 = q8group(q0[g*QK:], xg).ConvertToFloat32().MulAdd(c0.Permute(p), a0)
						a1 = q8group(q0[cols+g*QK:], xg).ConvertToFloat32().MulAdd(c1.Permute(p), a1)
						a2 = q8group(q0[2*cols+g*QK:], xg).ConvertToFloat32().MulAdd(c2.Permute(p), a2)
						a3 = q8group(q0[3*cols+g*QK:], xg).ConvertToFloat32().MulAdd(c3.Permute(p), a3)
					}
				}
				st4(hsum4(a0, a1, a2, a3), out, t*rows+r)
			}
		}
		var one [4]float32
		for ; r < hi; r++ {
			rq, rs := wq[r*cols:(r+1)*cols], ws[r*G:(r+1)*G]
			for t := t0; t < t1; t++ {
				xt, xst := xq[t*cols:(t+1)*cols], xs[t*G:(t+1)*G]
				var a archsimd.Float32x8
				for g8 := 0; g8 < G; g8 += 8 {
					c := scales8(rs, g8).Mul(scales8(xst, g8))
					for j := range min(8, G-g8) {
						g := g8 + j
						a = q8group(rq[g*QK:], xt[g*QK:g*QK+QK]).ConvertToFloat32().MulAdd(c.Permute(idx[j]), a)
					}
				}
				h := a.GetLo().Add(a.GetHi())
				h = h.AddPairs(h)
				h.AddPairs(h).Store(&one)
				archsimd.ClearAVXUpperBits() // before the scalar store
				out[t*rows+r] = one[0]
			}
		}
	}
	archsimd.ClearAVXUpperBits()
}
