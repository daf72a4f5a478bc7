//go:build goexperiment.simd && amd64

package kernels

import "simd/archsimd"

// The AVX2 reduction order, shared by every tile below: one 8-lane FMA
// accumulator per output over the first cols&^7 inputs, the horizontal sum
// (lo+hi, then two pairwise adds), then the remaining inputs one by one.
//
// Go compiles scalar float code to legacy SSE. On Intel CPUs every switch
// between dirty 256-bit state and legacy SSE costs a state transition, so
// the hot loops stay in vector code (scales are broadcast with VPERMPS,
// results stored as vectors) and each kernel ends with VZEROUPPER.

// hsum4 reduces four accumulators to their four sums, each in the
// canonical order.
func hsum4(a0, a1, a2, a3 archsimd.Float32x8) archsimd.Float32x4 {
	h0 := a0.GetLo().Add(a0.GetHi())
	h1 := a1.GetLo().Add(a1.GetHi())
	h2 := a2.GetLo().Add(a2.GetHi())
	h3 := a3.GetLo().Add(a3.GetHi())
	return h0.AddPairs(h1).AddPairs(h2.AddPairs(h3))
}

func hsum1(a archsimd.Float32x8) float32 {
	h := a.GetLo().Add(a.GetHi())
	h = h.AddPairs(h)
	return h.AddPairs(h).GetElem(0)
}

func ld(s []float32, i int) archsimd.Float32x8 {
	return archsimd.LoadFloat32x8((*[8]float32)(s[i : i+8]))
}

func st4(v archsimd.Float32x4, s []float32, i int) { v.Store((*[4]float32)(s[i : i+4])) }

// addTail finishes out[o] for inputs [from, len(a)): scalar, after the
// vector state is cleared.
func addTail(out []float32, o int, a, b []float32, from int) {
	s := out[o]
	for i := from; i < len(a); i++ {
		s += a[i] * b[i]
	}
	out[o] = s
}

func dotF32AVX2(a, b []float32) float32 {
	n := len(a)
	b = b[:n]
	n8 := n &^ 7
	var acc archsimd.Float32x8
	for i := 0; i < n8; i += 8 {
		acc = ld(a, i).MulAdd(ld(b, i), acc)
	}
	s := hsum1(acc)
	archsimd.ClearAVXUpperBits()
	for i := n8; i < n; i++ {
		s += a[i] * b[i]
	}
	return s
}

// tokenBlock bounds how many activation rows one pass over the weights
// covers, so those rows stay in L2 while weight rows stream through.
const tokenBlock = 64

func matF32AVX2(out, w, x []float32, lo, hi, rows, cols, T int) {
	n8 := cols &^ 7
	var one [4]float32
	for t0 := 0; t0 < T; t0 += tokenBlock {
		t1 := min(T, t0+tokenBlock)
		r := lo
		for ; r+4 <= hi; r += 4 {
			w0, w1 := w[r*cols:(r+1)*cols], w[(r+1)*cols:(r+2)*cols]
			w2, w3 := w[(r+2)*cols:(r+3)*cols], w[(r+3)*cols:(r+4)*cols]
			t := t0
			for ; t+2 <= t1; t += 2 {
				x0, x1 := x[t*cols:(t+1)*cols], x[(t+1)*cols:(t+2)*cols]
				var a0, a1, a2, a3, b0, b1, b2, b3 archsimd.Float32x8
				for i := 0; i < n8; i += 8 {
					y0, y1 := ld(x0, i), ld(x1, i)
					v := ld(w0, i)
					a0 = v.MulAdd(y0, a0)
					b0 = v.MulAdd(y1, b0)
					v = ld(w1, i)
					a1 = v.MulAdd(y0, a1)
					b1 = v.MulAdd(y1, b1)
					v = ld(w2, i)
					a2 = v.MulAdd(y0, a2)
					b2 = v.MulAdd(y1, b2)
					v = ld(w3, i)
					a3 = v.MulAdd(y0, a3)
					b3 = v.MulAdd(y1, b3)
				}
				st4(hsum4(a0, a1, a2, a3), out, t*rows+r)
				st4(hsum4(b0, b1, b2, b3), out, (t+1)*rows+r)
			}
			for ; t < t1; t++ {
				xt := x[t*cols : (t+1)*cols]
				var a0, a1, a2, a3 archsimd.Float32x8
				for i := 0; i < n8; i += 8 {
					y := ld(xt, i)
					a0 = ld(w0, i).MulAdd(y, a0)
					a1 = ld(w1, i).MulAdd(y, a1)
					a2 = ld(w2, i).MulAdd(y, a2)
					a3 = ld(w3, i).MulAdd(y, a3)
				}
				st4(hsum4(a0, a1, a2, a3), out, t*rows+r)
			}
		}
		for ; r < hi; r++ {
			wr := w[r*cols : (r+1)*cols]
			for t := t0; t < t1; t++ {
				xt := x[t*cols : (t+1)*cols]
				var a archsimd.Float32x8
				for i := 0; i < n8; i += 8 {
					a = ld(wr, i).MulAdd(ld(xt, i), a)
				}
				h := a.GetLo().Add(a.GetHi())
				h = h.AddPairs(h)
				h.AddPairs(h).Store(&one)
				out[t*rows+r] = one[0]
			}
		}
	}
	archsimd.ClearAVXUpperBits()
	if n8 == cols {
		return
	}
	for r := lo; r < hi; r++ {
		for t := range T {
			addTail(out, t*rows+r, w[r*cols:(r+1)*cols], x[t*cols:(t+1)*cols], n8)
		}
	}
}

// q8group is the exact integer dot product of one 32-value group, as eight
// int32 partial sums.
func q8group(w, x []int8) archsimd.Int32x8 {
	wl := archsimd.LoadInt8x16((*[16]int8)(w[0:16])).ExtendToInt16()
	wh := archsimd.LoadInt8x16((*[16]int8)(w[16:32])).ExtendToInt16()
	xl := archsimd.LoadInt8x16((*[16]int8)(x[0:16])).ExtendToInt16()
	xh := archsimd.LoadInt8x16((*[16]int8)(x[16:32])).ExtendToInt16()
	return wl.DotProductPairs(xl).Add(wh.DotProductPairs(xh))
}

// scales8 loads the scales of groups [g, g+8) (fewer at the end of a row;
// the missing lanes are never selected).
func scales8(s []float32, g int) archsimd.Float32x8 {
	if g+8 <= len(s) {
		return ld(s, g)
	}
	return archsimd.LoadFloat32x8SlicePart(s[g:])
}

// The Q8_0 reduction order: per group in order, the exact int32 partial
// sums converted to float and FMA'd with (weight scale × activation scale)
// into one 8-lane accumulator; then the canonical horizontal sum.
func matQ8AVX2(out []float32, wq []int8, ws []float32, xq []int8, xs []float32, lo, hi, rows, cols, T int) {
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
				out[t*rows+r] = one[0]
			}
		}
	}
	archsimd.ClearAVXUpperBits()
}
