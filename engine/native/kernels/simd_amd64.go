//go:build goexperiment.simd && amd64

package kernels

import (
	"simd/archsimd"
	"unsafe"
)

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

// hsum1To stores the horizontal sum of a (the hsum4 order) to one[0], to be
// read after ClearAVXUpperBits.
func hsum1To(a archsimd.Float32x8, one *[4]float32) {
	h := a.GetLo().Add(a.GetHi())
	h = h.AddPairs(h)
	h.AddPairs(h).Store(one)
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
	var one [4]float32
	hsum1To(acc, &one)
	archsimd.ClearAVXUpperBits()
	s := one[0]
	for i := n8; i < n; i++ {
		s += a[i] * b[i]
	}
	return s
}

// tokenBlock bounds how many activation rows one pass over the weights
// covers, so those rows stay in L2 while weight rows stream through.
const tokenBlock = 64

func l8(p unsafe.Pointer, i int) archsimd.Float32x8 {
	return archsimd.LoadFloat32x8((*[8]float32)(unsafe.Add(p, i*4)))
}

func st4p(po unsafe.Pointer, o int, v archsimd.Float32x4) {
	v.Store((*[4]float32)(unsafe.Add(po, o*4)))
}

func matF32AVX2(out, w, x []float32, lo, hi, rows, cols, T int) {
	if lo >= hi || T <= 0 {
		return
	}
	checkMat(len(out), len(w), len(x), lo, hi, rows, cols, T)
	n8 := cols &^ 7
	rs := cols * 4
	pw, px, po := unsafe.Pointer(&w[0]), unsafe.Pointer(&x[0]), unsafe.Pointer(&out[0])
	for t0 := 0; t0 < T; t0 += tokenBlock {
		t1 := min(T, t0+tokenBlock)
		r := lo
		for ; r+4 <= hi; r += 4 {
			w0 := unsafe.Add(pw, r*rs)
			t := t0
			for ; t+2 <= t1; t += 2 {
				f32Tile4x2AVX2(po, w0, unsafe.Add(px, t*rs), rs, n8, t*rows+r, rows)
			}
			if t < t1 {
				f32Tile4x1AVX2(po, w0, unsafe.Add(px, t*rs), rs, n8, t*rows+r)
			}
		}
		for ; r < hi; r++ {
			w0 := unsafe.Add(pw, r*rs)
			for t := t0; t < t1; t++ {
				x0 := unsafe.Add(px, t*rs)
				var a archsimd.Float32x8
				for i := 0; i < n8; i += 8 {
					a = l8(w0, i).MulAdd(l8(x0, i), a)
				}
				var one [4]float32
				h := a.GetLo().Add(a.GetHi())
				h = h.AddPairs(h)
				h.AddPairs(h).Store(&one)
				archsimd.ClearAVXUpperBits() // before the scalar store
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

func f32Tile4x2AVX2(po, w0, x0 unsafe.Pointer, rs, n8, o, rows int) {
	w1, w2, w3 := unsafe.Add(w0, rs), unsafe.Add(w0, 2*rs), unsafe.Add(w0, 3*rs)
	x1 := unsafe.Add(x0, rs)
	var a0, a1, a2, a3, b0, b1, b2, b3 archsimd.Float32x8
	for i := 0; i < n8; i += 8 {
		y0, y1 := l8(x0, i), l8(x1, i)
		v := l8(w0, i)
		a0 = v.MulAdd(y0, a0)
		b0 = v.MulAdd(y1, b0)
		v = l8(w1, i)
		a1 = v.MulAdd(y0, a1)
		b1 = v.MulAdd(y1, b1)
		v = l8(w2, i)
		a2 = v.MulAdd(y0, a2)
		b2 = v.MulAdd(y1, b2)
		v = l8(w3, i)
		a3 = v.MulAdd(y0, a3)
		b3 = v.MulAdd(y1, b3)
	}
	st4p(po, o, hsum4(a0, a1, a2, a3))
	st4p(po, o+rows, hsum4(b0, b1, b2, b3))
}

func f32Tile4x1AVX2(po, w0, x0 unsafe.Pointer, rs, n8, o int) {
	w1, w2, w3 := unsafe.Add(w0, rs), unsafe.Add(w0, 2*rs), unsafe.Add(w0, 3*rs)
	var a0, a1, a2, a3 archsimd.Float32x8
	for i := 0; i < n8; i += 8 {
		y := l8(x0, i)
		a0 = l8(w0, i).MulAdd(y, a0)
		a1 = l8(w1, i).MulAdd(y, a1)
		a2 = l8(w2, i).MulAdd(y, a2)
		a3 = l8(w3, i).MulAdd(y, a3)
	}
	st4p(po, o, hsum4(a0, a1, a2, a3))
}

// axpyAVX2 sets y[i] = fma(a, x[i], y[i]) for the first len&^7 values and
// y[i] += a*x[i] for the rest.
func axpyAVX2(a float32, x, y []float32) {
	n := len(x)
	y = y[:n]
	n8 := n &^ 7
	if n8 > 0 {
		av := archsimd.BroadcastFloat32x8(a)
		px, py := unsafe.Pointer(&x[0]), unsafe.Pointer(&y[0])
		for i := 0; i < n8; i += 8 {
			l8(px, i).MulAdd(av, l8(py, i)).Store((*[8]float32)(unsafe.Add(py, i*4)))
		}
		archsimd.ClearAVXUpperBits()
	}
	for i := n8; i < n; i++ {
		y[i] += a * x[i]
	}
}

// dotStridedAVX2 is dotF32AVX2 over rows of m, four at a time.
func dotStridedAVX2(out, q, m []float32, stride int) {
	hd := len(q)
	n8 := hd &^ 7
	n := len(out)
	if n8 > 0 {
		pq, pm, po := unsafe.Pointer(&q[0]), unsafe.Pointer(&m[0]), unsafe.Pointer(&out[0])
		rs := stride * 4
		i := 0
		for ; i+4 <= n; i += 4 {
			f32Tile4x1AVX2(po, unsafe.Add(pm, i*rs), pq, rs, n8, i)
		}
		for ; i < n; i++ {
			m0 := unsafe.Add(pm, i*rs)
			var a archsimd.Float32x8
			for k := 0; k < n8; k += 8 {
				a = l8(m0, k).MulAdd(l8(pq, k), a)
			}
			var one [4]float32
			h := a.GetLo().Add(a.GetHi())
			h = h.AddPairs(h)
			h.AddPairs(h).Store(&one)
			archsimd.ClearAVXUpperBits() // before the scalar store
			out[i] = one[0]
		}
		archsimd.ClearAVXUpperBits()
	} else {
		clear(out)
	}
	if n8 == hd {
		return
	}
	for i := range out {
		addTail(out, i, q, m[i*stride:i*stride+hd], n8)
	}
}

// axpyStridedAVX2 is axpyAVX2 for each row of m in order, with y kept in
// registers 8 values at a time.
func axpyStridedAVX2(a, m []float32, stride int, y []float32) {
	hd := len(y)
	n8 := hd &^ 7
	if n8 > 0 {
		pa, pm, py := unsafe.Pointer(&a[0]), unsafe.Pointer(&m[0]), unsafe.Pointer(&y[0])
		rs := stride * 4
		for c := 0; c < n8; c += 8 {
			acc := l8(py, c)
			mc := unsafe.Add(pm, c*4)
			for i := range a {
				acc = l8(unsafe.Add(mc, i*rs), 0).MulAdd(archsimd.BroadcastFloat32x8(*(*float32)(unsafe.Add(pa, i*4))), acc)
			}
			acc.Store((*[8]float32)(unsafe.Add(py, c*4)))
		}
		archsimd.ClearAVXUpperBits()
	}
	for i, ai := range a {
		row := m[i*stride : i*stride+hd]
		for e := n8; e < hd; e++ {
			y[e] += ai * row[e]
		}
	}
}

// scales8 loads the scales of groups [g, g+8) (fewer at the end of a row;
// the missing lanes are never selected).
// Past the row's end it reads the padding NewScales leaves (or the next
// row): only when there is none does it copy, after clearing the upper
// vector state (LoadFloat32x8SlicePart would do a masked load instead, but
// through an array pointer that checkptr rejects at an allocation's end).
func scales8(s []float32, g int) archsimd.Float32x8 {
	if g+8 <= cap(s) {
		return archsimd.LoadFloat32x8((*[8]float32)(s[g : g+8]))
	}
	var b [8]float32
	archsimd.ClearAVXUpperBits()
	copy(b[:], s[g:])
	return archsimd.LoadFloat32x8(&b)
}
