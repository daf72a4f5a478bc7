//go:build goexperiment.simd && amd64

package kernels

import (
	"math"
	"simd/archsimd"
	"unsafe"
)

// The AVX-512 kernels. Their reduction order, shared by every tile:
//
//   - fp32: one 16-lane FMA accumulator per output over the first cols&^15
//     inputs, in input order; the lanes folded 16→8 (low half + high half),
//     then the AVX2 horizontal order (8→4 the same way, then two pairwise
//     adds); then the remaining inputs one by one.
//   - Q8_0: per group of 32 in order, the group's exact int32 pair sums
//     (VPMADDWD over sign-extended int16, 16 lanes), converted to float and
//     FMA'd with (weight scale × activation scale) into one 16-lane
//     accumulator; then the fp32 horizontal order.
//
// (At this level the Q8_0 product runs the assembly of q8asm_amd64.s, in
// this same order; matQ8BAVX512 stays as its bitwise reference.)
//
// The tiles (4 rows × 2 tokens and 4 × 1 for fp32; fewer than 4 rows left
// are computed as a 4-row tile with the last row repeated) only change
// which outputs are computed together, never an output's own order, so
// batched and single-token products agree bitwise.
//
// Go's register allocator uses 16 vector registers, so the widest fp32 tile
// that does not spill is 4 rows × 2 tokens (8 accumulators). Pointers are formed
// with unsafe after the slice bounds are checked once per call: bounds
// checks and slice headers in the inner loops cost more registers than
// there are. Every pointer formed stays inside its slice (go test -race
// runs with checkptr).

type f32x16 = archsimd.Float32x16

func l16(p unsafe.Pointer, i int) f32x16 {
	return archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(p, i*4)))
}

func fold16(a f32x16) archsimd.Float32x8 { return a.GetLo().Add(a.GetHi()) }

// st4x16 stores the four horizontal sums at o, o+1, o+2, o+3.
func st4x16(po unsafe.Pointer, o int, a0, a1, a2, a3 f32x16) {
	hsum4(fold16(a0), fold16(a1), fold16(a2), fold16(a3)).Store((*[4]float32)(unsafe.Add(po, o*4)))
}

// hsum16To stores the horizontal sum of a (in the order of st4x16) to
// one[0]. Callers read it only after ClearAVXUpperBits: a scalar SSE load
// or store while the upper vector halves are dirty is very slow on Intel.
func hsum16To(a f32x16, one *[4]float32) {
	h := fold16(a)
	l := h.GetLo().Add(h.GetHi())
	l = l.AddPairs(l)
	l.AddPairs(l).Store(one)
}

// checkMat panics unless every index a product over rows [lo,hi) and T ≥ 1
// tokens touches is inside its slice (the last output is (T−1)·rows+hi−1).
func checkMat(nout, nw, nx, lo, hi, rows, cols, T int) {
	if lo < 0 || hi > rows || T < 1 || nw < hi*cols || nx < T*cols || nout < (T-1)*rows+hi {
		panic("kernels: product bounds")
	}
}

func matF32AVX512(out, w, x []float32, lo, hi, rows, cols, T int) {
	if lo >= hi || T <= 0 {
		return
	}
	checkMat(len(out), len(w), len(x), lo, hi, rows, cols, T)
	n16 := cols &^ 15
	rs := cols * 4
	pw, px, po := unsafe.Pointer(&w[0]), unsafe.Pointer(&x[0]), unsafe.Pointer(&out[0])
	var tile [4]float32 // zeroed while the vector state is clean (doc.go)
	for t0 := 0; t0 < T; t0 += tokenBlock {
		t1 := min(T, t0+tokenBlock)
		r := lo
		for ; r+4 <= hi; r += 4 {
			w0 := unsafe.Add(pw, r*rs)
			t := t0
			for ; t+2 <= t1; t += 2 {
				f32Tile4x2(po, w0, unsafe.Add(px, t*rs), rs, n16, t*rows+r, rows)
			}
			if t < t1 {
				f32Tile4x1(po, w0, unsafe.Add(w0, rs), unsafe.Add(w0, 2*rs), unsafe.Add(w0, 3*rs), unsafe.Add(px, t*rs), n16, t*rows+r)
			}
		}
		if r < hi {
			// Fewer than 4 rows left: a 4-row tile with the last row
			// repeated, into a scratch tile.
			p0, p1 := unsafe.Add(pw, r*rs), unsafe.Add(pw, min(r+1, hi-1)*rs)
			p2, p3 := unsafe.Add(pw, min(r+2, hi-1)*rs), unsafe.Add(pw, min(r+3, hi-1)*rs)
			for t := t0; t < t1; t++ {
				f32Tile4x1(unsafe.Pointer(&tile), p0, p1, p2, p3, unsafe.Add(px, t*rs), n16, 0)
				archsimd.ClearAVXUpperBits()
				copy(out[t*rows+r:t*rows+hi], tile[:])
			}
		}
	}
	archsimd.ClearAVXUpperBits()
	if n16 == cols {
		return
	}
	for r := lo; r < hi; r++ {
		for t := range T {
			addTail(out, t*rows+r, w[r*cols:(r+1)*cols], x[t*cols:(t+1)*cols], n16)
		}
	}
}

func f32Tile4x2(po, w0, x0 unsafe.Pointer, rs, n16, o, rows int) {
	w1, w2, w3 := unsafe.Add(w0, rs), unsafe.Add(w0, 2*rs), unsafe.Add(w0, 3*rs)
	x1 := unsafe.Add(x0, rs)
	var a00, a01, a10, a11, a20, a21, a30, a31 f32x16
	for i := 0; i < n16; i += 16 {
		y0, y1 := l16(x0, i), l16(x1, i)
		v := l16(w0, i)
		a00 = v.MulAdd(y0, a00)
		a01 = v.MulAdd(y1, a01)
		v = l16(w1, i)
		a10 = v.MulAdd(y0, a10)
		a11 = v.MulAdd(y1, a11)
		v = l16(w2, i)
		a20 = v.MulAdd(y0, a20)
		a21 = v.MulAdd(y1, a21)
		v = l16(w3, i)
		a30 = v.MulAdd(y0, a30)
		a31 = v.MulAdd(y1, a31)
	}
	st4x16(po, o, a00, a10, a20, a30)
	st4x16(po, o+rows, a01, a11, a21, a31)
}

func f32Tile4x1(po, w0, w1, w2, w3, x0 unsafe.Pointer, n16, o int) {
	var a0, a1, a2, a3 f32x16
	for i := 0; i < n16; i += 16 {
		y := l16(x0, i)
		a0 = l16(w0, i).MulAdd(y, a0)
		a1 = l16(w1, i).MulAdd(y, a1)
		a2 = l16(w2, i).MulAdd(y, a2)
		a3 = l16(w3, i).MulAdd(y, a3)
	}
	st4x16(po, o, a0, a1, a2, a3)
}

func dotF32AVX512(a, b []float32) float32 {
	n := len(a)
	b = b[:n]
	n16 := n &^ 15
	var one [4]float32
	var acc f32x16
	if n16 > 0 {
		pa, pb := unsafe.Pointer(&a[0]), unsafe.Pointer(&b[0])
		for i := 0; i < n16; i += 16 {
			acc = l16(pa, i).MulAdd(l16(pb, i), acc)
		}
	}
	hsum16To(acc, &one)
	archsimd.ClearAVXUpperBits()
	s := one[0]
	for i := n16; i < n; i++ {
		s += a[i] * b[i]
	}
	return s
}

// axpyAVX512 sets y[i] = fma(a, x[i], y[i]) for the first len&^15 values and
// y[i] += a*x[i] (two roundings) for the rest.
func axpyAVX512(a float32, x, y []float32) {
	n := len(x)
	y = y[:n]
	n16 := n &^ 15
	if n16 > 0 {
		var s archsimd.Float32x4
		av := s.SetElem(0, a).Broadcast1To16()
		px, py := unsafe.Pointer(&x[0]), unsafe.Pointer(&y[0])
		for i := 0; i < n16; i += 16 {
			l16(px, i).MulAdd(av, l16(py, i)).Store((*[16]float32)(unsafe.Add(py, i*4)))
		}
		archsimd.ClearAVXUpperBits()
	}
	for i := n16; i < n; i++ {
		y[i] += a * x[i]
	}
}

// dotStridedAVX512 is dotF32AVX512 over rows of m, four at a time.
func dotStridedAVX512(out, q, m []float32, stride int) {
	hd := len(q)
	n16 := hd &^ 15
	n := len(out)
	var tile [4]float32 // zeroed while the vector state is clean
	if n16 > 0 {
		pq, pm, po := unsafe.Pointer(&q[0]), unsafe.Pointer(&m[0]), unsafe.Pointer(&out[0])
		rs := stride * 4
		i := 0
		for ; i+4 <= n; i += 4 {
			m0 := unsafe.Add(pm, i*rs)
			f32Tile4x1(po, m0, unsafe.Add(m0, rs), unsafe.Add(m0, 2*rs), unsafe.Add(m0, 3*rs), pq, n16, i)
		}
		if i < n {
			// The last rows, the last one repeated to fill a tile.
			f32Tile4x1(unsafe.Pointer(&tile), unsafe.Add(pm, i*rs), unsafe.Add(pm, min(i+1, n-1)*rs),
				unsafe.Add(pm, min(i+2, n-1)*rs), unsafe.Add(pm, min(i+3, n-1)*rs), pq, n16, 0)
		}
		archsimd.ClearAVXUpperBits()
		copy(out[i:], tile[:])
	} else {
		clear(out)
	}
	if n16 == hd {
		return
	}
	for i := range out {
		addTail(out, i, q, m[i*stride:i*stride+hd], n16)
	}
}

// axpyStridedAVX512 is axpyAVX512 for each row of m in order, with y kept
// in registers 16 values at a time.
func axpyStridedAVX512(a, m []float32, stride int, y []float32) {
	hd := len(y)
	n16 := hd &^ 15
	if n16 > 0 {
		pa, pm, py := unsafe.Pointer(&a[0]), unsafe.Pointer(&m[0]), unsafe.Pointer(&y[0])
		rs := stride * 4
		c := 0
		// Up to 64 values of y stay in registers while the rows stream
		// by, so each weight a[i] is broadcast once per 64 values.
		for ; c+64 <= n16; c += 64 {
			axpy4x16(pa, unsafe.Add(pm, c*4), unsafe.Add(py, c*4), rs, len(a))
		}
		for ; c+32 <= n16; c += 32 {
			y0, y1 := l16(py, c), l16(py, c+16)
			mc := unsafe.Add(pm, c*4)
			for i := range a {
				av := archsimd.BroadcastFloat32x16(*(*float32)(unsafe.Add(pa, i*4)))
				row := unsafe.Add(mc, i*rs)
				y0 = l16(row, 0).MulAdd(av, y0)
				y1 = l16(row, 16).MulAdd(av, y1)
			}
			y0.Store((*[16]float32)(unsafe.Add(py, c*4)))
			y1.Store((*[16]float32)(unsafe.Add(py, (c+16)*4)))
		}
		for ; c < n16; c += 16 {
			acc := l16(py, c)
			mc := unsafe.Add(pm, c*4)
			for i := range a {
				acc = l16(unsafe.Add(mc, i*rs), 0).MulAdd(archsimd.BroadcastFloat32x16(*(*float32)(unsafe.Add(pa, i*4))), acc)
			}
			acc.Store((*[16]float32)(unsafe.Add(py, c*4)))
		}
		archsimd.ClearAVXUpperBits()
	}
	for i, ai := range a {
		row := m[i*stride : i*stride+hd]
		for e := n16; e < hd; e++ {
			y[e] += ai * row[e]
		}
	}
}

// axpy4x16 is 64 values of axpyStridedAVX512: y += a[i] * row i, rows rs
// bytes apart, for i < n.
func axpy4x16(pa, pm, py unsafe.Pointer, rs, n int) {
	y0, y1, y2, y3 := l16(py, 0), l16(py, 16), l16(py, 32), l16(py, 48)
	for i := range n {
		av := archsimd.BroadcastFloat32x16(*(*float32)(unsafe.Add(pa, i*4)))
		row := unsafe.Add(pm, i*rs)
		y0 = l16(row, 0).MulAdd(av, y0)
		y1 = l16(row, 16).MulAdd(av, y1)
		y2 = l16(row, 32).MulAdd(av, y2)
		y3 = l16(row, 48).MulAdd(av, y3)
	}
	y0.Store((*[16]float32)(unsafe.Add(py, 0)))
	y1.Store((*[16]float32)(unsafe.Add(py, 64)))
	y2.Store((*[16]float32)(unsafe.Add(py, 128)))
	y3.Store((*[16]float32)(unsafe.Add(py, 192)))
}

// divAVX512 sets x[i] /= d (the same IEEE division as the scalar loop).
func divAVX512(x []float32, d float32) {
	n := len(x)
	n16 := n &^ 15
	if n16 > 0 {
		dv := archsimd.BroadcastFloat32x16(d)
		px := unsafe.Pointer(&x[0])
		for i := 0; i < n16; i += 16 {
			l16(px, i).Div(dv).Store((*[16]float32)(unsafe.Add(px, i*4)))
		}
		archsimd.ClearAVXUpperBits()
	}
	for i := n16; i < n; i++ {
		x[i] /= d
	}
}

// exp16 is e^x for x <= 0 (softmax's shifted scores), within about 2 ulp
// of float32(math.Exp): the Cephes expf reduction and polynomial, with 0
// below -87.3 (where e^x leaves the normal float32 range).
func exp16(x f32x16) f32x16 {
	const (
		log2e = 1.44269504088896341
		c1    = 0.693359375
		c2    = -2.12194440e-4
	)
	n := x.Mul(archsimd.BroadcastFloat32x16(log2e)).RoundToEvenScaled(0)
	r := n.MulAdd(archsimd.BroadcastFloat32x16(-c1), x)
	r = n.MulAdd(archsimd.BroadcastFloat32x16(-c2), r)
	p := archsimd.BroadcastFloat32x16(1.9875691500e-4)
	p = p.MulAdd(r, archsimd.BroadcastFloat32x16(1.3981999507e-3))
	p = p.MulAdd(r, archsimd.BroadcastFloat32x16(8.3334519073e-3))
	p = p.MulAdd(r, archsimd.BroadcastFloat32x16(4.1665795894e-2))
	p = p.MulAdd(r, archsimd.BroadcastFloat32x16(1.6666665459e-1))
	p = p.MulAdd(r, archsimd.BroadcastFloat32x16(5.0000001201e-1))
	p = p.MulAdd(r.Mul(r), r).Add(archsimd.BroadcastFloat32x16(1))
	pow := n.ConvertToInt32().Add(archsimd.BroadcastInt32x16(127)).ShiftAllLeft(23).AsFloat32x16()
	return p.Mul(pow).Masked(x.GreaterEqual(archsimd.BroadcastFloat32x16(-87.3)))
}

// softmaxAVX512 is Softmax with the exponentials and their sum done 16 at
// a time (exp16, lane sums folded in the fp32 order), and the scalar code
// for the last len%16 values; every caller of a given length gets the same
// result, which is all the batched/single-token contract needs.
func softmaxAVX512(x []float32) {
	n := len(x)
	n16 := n &^ 15
	if n16 == 0 {
		softmaxPortable(x)
		return
	}
	var lanes [16]float32
	var sum4 [4]float32
	px := unsafe.Pointer(&x[0])
	maxLanes(px, n16, &lanes)
	m := lanes[0]
	for _, v := range lanes[1:] {
		m = max(m, v)
	}
	for _, v := range x[n16:] {
		m = max(m, v)
	}
	expSum(px, n16, m, &sum4)
	sum := sum4[0]
	for i := n16; i < n; i++ {
		e := float32(math.Exp(float64(x[i] - m)))
		x[i] = e
		sum += e
	}
	divAVX512(x, sum)
}

// maxLanes and expSum are softmaxAVX512's vector loops, kept apart so that
// no scalar float is live in them (the compiler reloads such values with
// legacy-SSE instructions, which are slow while the vector state is dirty).
func maxLanes(px unsafe.Pointer, n16 int, lanes *[16]float32) {
	mv := l16(px, 0)
	for i := 16; i < n16; i += 16 {
		mv = mv.Max(l16(px, i))
	}
	mv.Store(lanes)
	archsimd.ClearAVXUpperBits()
}

func expSum(px unsafe.Pointer, n16 int, m float32, sum *[4]float32) {
	mb := archsimd.BroadcastFloat32x16(m)
	var acc f32x16
	for i := 0; i < n16; i += 16 {
		e := exp16(l16(px, i).Sub(mb))
		e.Store((*[16]float32)(unsafe.Add(px, i*4)))
		acc = acc.Add(e)
	}
	hsum16To(acc, sum)
	archsimd.ClearAVXUpperBits()
}

// Q8_0 weights.

func ext16(p unsafe.Pointer, off int) archsimd.Int16x32 {
	return archsimd.LoadInt8x32((*[32]int8)(unsafe.Add(p, off))).ExtendToInt16()
}

// q8Chunk is how many groups' scales a tile prepares at a time.
const q8Chunk = 64

// q8Scales holds, for one tile and up to q8Chunk groups, the products
// weight scale × activation scale, laid out [output][group] so that the
// inner loop broadcasts them from memory.
type q8Scales [4][q8Chunk]float32

// fillScales sets sc[g-g0] = w[g] * x[g] for g in [g0, g1) (and may write
// up to the next multiple of 16 after g1). It loads 16 scales at a time
// wherever the slices' capacity allows (NewScales pads for that), and
// otherwise finishes in scalar code after clearing the upper vector state:
// legacy-SSE scalar code (and the SSE in memmove) is very slow on Intel
// while the upper halves of the vector registers are dirty.
//
//go:noinline
func fillScales(sc *[q8Chunk]float32, w, x []float32, g0, g1 int) {
	g := g0
	for ; g < g1 && g+16 <= cap(w) && g+16 <= cap(x); g += 16 {
		a := archsimd.LoadFloat32x16((*[16]float32)(w[g : g+16]))
		b := archsimd.LoadFloat32x16((*[16]float32)(x[g : g+16]))
		a.Mul(b).Store((*[16]float32)(sc[g-g0 : g-g0+16]))
	}
	if g < g1 {
		archsimd.ClearAVXUpperBits()
		for ; g < g1; g++ {
			sc[g-g0] = w[g] * x[g]
		}
	}
}

func bcast(p unsafe.Pointer, i int) f32x16 {
	return archsimd.BroadcastFloat32x16(*(*float32)(unsafe.Add(p, i*4)))
}

// q8BTile4x1 computes the products of block rows r0..r3 (rb bytes each
// from pw; row k's scales widened at ws[k*gp:]) with one activation row
// (x0, scales xs) and stores them at po+o.
func q8BTile4x1(po unsafe.Pointer, o int, pw unsafe.Pointer, rb int, ws []float32, gp, G, r0, r1, r2, r3 int, x0 unsafe.Pointer, xs []float32, sc *q8Scales) {
	w0, w1, w2, w3 := unsafe.Add(pw, r0*rb+2), unsafe.Add(pw, r1*rb+2), unsafe.Add(pw, r2*rb+2), unsafe.Add(pw, r3*rb+2)
	var a0, a1, a2, a3 f32x16
	for g0 := 0; g0 < G; g0 += q8Chunk {
		g1 := min(G, g0+q8Chunk)
		fillScales(&sc[0], ws[0:], xs, g0, g1)
		fillScales(&sc[1], ws[gp:], xs, g0, g1)
		fillScales(&sc[2], ws[2*gp:], xs, g0, g1)
		fillScales(&sc[3], ws[3*gp:], xs, g0, g1)
		ps := unsafe.Pointer(sc)
		const row = q8Chunk * 4
		for g := g0; g < g1; g++ {
			off := g * q8BlockBytes
			j := g - g0
			y := ext16(x0, g*QK)
			a0 = ext16(w0, off).DotProductPairs(y).ConvertToFloat32().MulAdd(bcast(ps, j), a0)
			a1 = ext16(w1, off).DotProductPairs(y).ConvertToFloat32().MulAdd(bcast(unsafe.Add(ps, row), j), a1)
			a2 = ext16(w2, off).DotProductPairs(y).ConvertToFloat32().MulAdd(bcast(unsafe.Add(ps, 2*row), j), a2)
			a3 = ext16(w3, off).DotProductPairs(y).ConvertToFloat32().MulAdd(bcast(unsafe.Add(ps, 3*row), j), a3)
		}
	}
	st4x16(po, o, a0, a1, a2, a3)
}

// Q8_0 activations.

// quantizeRowsAVX512 is quantizeRowsPortable, bit for bit: the scale is
// the same float32 division, and round-half-away-from-zero is done exactly
// in integers (the truncated value plus the sign where the exact remainder
// reaches one half). It stores each scale as a 16-lane vector, so it needs
// s to have the capacity NewScales gives (else it runs the portable code).
func quantizeRowsAVX512(x []float32, q []int8, s []float32) {
	n := len(x) / QK
	if n == 0 {
		return
	}
	_, _ = q[n*QK-1], s[n-1]
	if cap(s) < n+15 {
		quantizeRowsPortable(x, q, s)
		return
	}
	px := unsafe.Pointer(&x[0])
	absMask := archsimd.BroadcastInt32x16(0x7fffffff)
	k127 := archsimd.BroadcastFloat32x16(127)
	one := archsimd.BroadcastFloat32x16(1)
	zero := archsimd.BroadcastFloat32x16(0)
	half := archsimd.BroadcastFloat32x16(0.5)
	nhalf := archsimd.BroadcastFloat32x16(-0.5)
	ione := archsimd.BroadcastInt32x16(1)
	var sw [4]archsimd.Uint32x16
	for k := range sw {
		sw[k] = archsimd.LoadUint32x16(&maxSwaps[k])
	}
	for g := range n {
		v0, v1 := l16(px, g*QK), l16(px, g*QK+16)
		a := v0.AsInt32x16().And(absMask).AsFloat32x16().Max(v1.AsInt32x16().And(absMask).AsFloat32x16())
		for _, p := range sw {
			a = a.Max(a.Permute(p))
		}
		d := a.Div(k127)
		id := one.Div(d).Masked(d.NotEqual(zero))
		d.Store((*[16]float32)(s[g : g+16])) // every lane is d; later groups overwrite the rest
		quant16(v0.Mul(id), half, nhalf, ione).Store((*[16]int8)(q[g*QK : g*QK+16]))
		quant16(v1.Mul(id), half, nhalf, ione).Store((*[16]int8)(q[g*QK+16 : g*QK+32]))
	}
	archsimd.ClearAVXUpperBits()
}

// quant16 rounds f half away from zero, exactly, and narrows to int8.
func quant16(f, half, nhalf f32x16, ione archsimd.Int32x16) archsimd.Int8x16 {
	t := f.ConvertToInt32()
	r := f.Sub(t.ConvertToFloat32())
	t = t.Add(ione.Masked(r.GreaterEqual(half))).Sub(ione.Masked(r.LessEqual(nhalf)))
	return t.SaturateToInt8()
}

// maxSwaps are the lane permutations of a butterfly max over 16 lanes.
var maxSwaps = [4][16]uint32{
	{8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7},
	{4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11},
	{2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13},
	{1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14},
}

// Attention over several queries at once. Each query's scores and value
// sums keep exactly the per-query order of dotStridedAVX512 and
// axpyStridedAVX512 (one 16-lane accumulator per score folded by st4x16;
// one FMA per value row in row order); the tiles only share the loads of a
// key or value row between queries.

// dotStridedNAVX512 computes 4 keys × 2 queries per tile (8 accumulators).
func dotStridedNAVX512(out []float32, ostride int, q []float32, qstride, hd, nq int, m []float32, stride, n int) {
	n16 := hd &^ 15
	n4 := n &^ 3
	if n16 == 0 || n4 == 0 || nq < 2 {
		dotStridedNLoop(out, ostride, q, qstride, hd, nq, m, stride, n)
		return
	}
	po, pq, pm := unsafe.Pointer(&out[0]), unsafe.Pointer(&q[0]), unsafe.Pointer(&m[0])
	rs, qs, os := stride*4, qstride*4, ostride*4
	j := 0
	for ; j+2 <= nq; j += 2 {
		q0, o0 := unsafe.Add(pq, j*qs), unsafe.Add(po, j*os)
		q1, o1 := unsafe.Add(q0, qs), unsafe.Add(o0, os)
		for i := 0; i < n4; i += 4 {
			scoreTile4x2(o0, o1, unsafe.Add(pm, i*rs), rs, q0, q1, n16, i)
		}
	}
	archsimd.ClearAVXUpperBits()
	for jj := range j {
		qj := q[jj*qstride : jj*qstride+hd]
		if n4 < n {
			dotStridedAVX512(out[jj*ostride+n4:jj*ostride+n], qj, m[n4*stride:], stride)
		}
		if n16 < hd {
			for i := range n4 {
				addTail(out, jj*ostride+i, qj, m[i*stride:i*stride+hd], n16)
			}
		}
	}
	if j < nq {
		dotStridedAVX512(out[j*ostride:j*ostride+n], q[j*qstride:j*qstride+hd], m, stride)
	}
}

// scoreTile4x2 is f32Tile4x1 for two queries: keys at m0 + k*rs, k < 4,
// scores stored at o0[i..i+3] and o1[i..i+3].
func scoreTile4x2(o0, o1, m0 unsafe.Pointer, rs int, q0, q1 unsafe.Pointer, n16, i int) {
	m1, m2, m3 := unsafe.Add(m0, rs), unsafe.Add(m0, 2*rs), unsafe.Add(m0, 3*rs)
	var a00, a01, a10, a11, a20, a21, a30, a31 f32x16
	for c := 0; c < n16; c += 16 {
		y0, y1 := l16(q0, c), l16(q1, c)
		v := l16(m0, c)
		a00 = v.MulAdd(y0, a00)
		a01 = v.MulAdd(y1, a01)
		v = l16(m1, c)
		a10 = v.MulAdd(y0, a10)
		a11 = v.MulAdd(y1, a11)
		v = l16(m2, c)
		a20 = v.MulAdd(y0, a20)
		a21 = v.MulAdd(y1, a21)
		v = l16(m3, c)
		a30 = v.MulAdd(y0, a30)
		a31 = v.MulAdd(y1, a31)
	}
	reduce8(o0, o1, i, a00, a10, a20, a30, a01, a11, a21, a31)
}

// reduceIdx are the lane selections of reduce8: halves of 16, halves of 8
// within each 8, even and odd lanes, over the concatenation of two vectors.
var reduceIdx = [6][16]uint32{
	{0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23},
	{8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31},
	{0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27},
	{4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31},
	{0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30},
	{1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31},
}

// reduce8 stores the horizontal sums of a0..a3 at o0[i..i+3] and of
// b0..b3 at o1[i..i+3], each with exactly the additions of st4x16 (lanes
// j+8 onto j, then j+4 onto j, then pairs, then the two pair sums), but
// done for eight accumulators at once with two-vector permutes, which
// takes half the shuffles of eight separate folds.
func reduce8(o0, o1 unsafe.Pointer, i int, a0, a1, a2, a3, b0, b1, b2, b3 f32x16) {
	lo := archsimd.LoadUint32x16(&reduceIdx[0])
	hi := archsimd.LoadUint32x16(&reduceIdx[1])
	x0 := a0.ConcatPermute(a1, lo).Add(a0.ConcatPermute(a1, hi))
	x1 := a2.ConcatPermute(a3, lo).Add(a2.ConcatPermute(a3, hi))
	x2 := b0.ConcatPermute(b1, lo).Add(b0.ConcatPermute(b1, hi))
	x3 := b2.ConcatPermute(b3, lo).Add(b2.ConcatPermute(b3, hi))
	lo = archsimd.LoadUint32x16(&reduceIdx[2])
	hi = archsimd.LoadUint32x16(&reduceIdx[3])
	y0 := x0.ConcatPermute(x1, lo).Add(x0.ConcatPermute(x1, hi))
	y1 := x2.ConcatPermute(x3, lo).Add(x2.ConcatPermute(x3, hi))
	lo = archsimd.LoadUint32x16(&reduceIdx[4])
	hi = archsimd.LoadUint32x16(&reduceIdx[5])
	z := y0.ConcatPermute(y1, lo).Add(y0.ConcatPermute(y1, hi))
	r := z.ConcatPermute(z, lo).Add(z.ConcatPermute(z, hi)).GetLo()
	r.GetLo().Store((*[4]float32)(unsafe.Add(o0, i*4)))
	r.GetHi().Store((*[4]float32)(unsafe.Add(o1, i*4)))
}

// axpyStridedNAVX512 accumulates four queries' outputs per pass over the
// value rows, 32 (then 16) values of each held in registers.
func axpyStridedNAVX512(a []float32, astride, n int, m []float32, stride int, y []float32, ystride, hd, nq int) {
	n16 := hd &^ 15
	if n16 == 0 || nq < 4 {
		axpyStridedNLoop(a, astride, n, m, stride, y, ystride, hd, nq)
		return
	}
	pa, pm, py := unsafe.Pointer(&a[0]), unsafe.Pointer(&m[0]), unsafe.Pointer(&y[0])
	rs, as, ys := stride*4, astride*4, ystride*4
	j := 0
	for ; j+4 <= nq; j += 4 {
		aj, yj := unsafe.Add(pa, j*as), unsafe.Add(py, j*ys)
		c := 0
		for ; c+32 <= n16; c += 32 {
			axpy4q32(aj, as, unsafe.Add(pm, c*4), rs, unsafe.Add(yj, c*4), ys, n)
		}
		for ; c < n16; c += 16 {
			axpy4q16(aj, as, unsafe.Add(pm, c*4), rs, unsafe.Add(yj, c*4), ys, n)
		}
	}
	archsimd.ClearAVXUpperBits()
	if n16 < hd {
		for jj := range j {
			yj := y[jj*ystride : jj*ystride+hd]
			for i, ai := range a[jj*astride : jj*astride+n] {
				row := m[i*stride : i*stride+hd]
				for e := n16; e < hd; e++ {
					yj[e] += ai * row[e]
				}
			}
		}
	}
	for ; j < nq; j++ {
		axpyStridedAVX512(a[j*astride:j*astride+n], m, stride, y[j*ystride:j*ystride+hd])
	}
}

// axpy4q32 is 32 values of axpyStridedAVX512 for four queries: weights at
// pa + j*as, outputs at py + j*ys, rows rs bytes apart, for rows i < n.
// Few pointers stay live across the row loop (pa, pa + 2*as, as, pm, rs),
// so the loop's integer state fits in registers.
func axpy4q32(pa unsafe.Pointer, as int, pm unsafe.Pointer, rs int, py unsafe.Pointer, ys, n int) {
	y00, y01 := l16(py, 0), l16(py, 16)
	y10, y11 := l16(unsafe.Add(py, ys), 0), l16(unsafe.Add(py, ys), 16)
	y20, y21 := l16(unsafe.Add(py, 2*ys), 0), l16(unsafe.Add(py, 2*ys), 16)
	y30, y31 := l16(unsafe.Add(py, 3*ys), 0), l16(unsafe.Add(py, 3*ys), 16)
	pc := unsafe.Add(pa, 2*as)
	for i := range n {
		row := unsafe.Add(pm, i*rs)
		r0, r1 := l16(row, 0), l16(row, 16)
		av := archsimd.BroadcastFloat32x16(*(*float32)(unsafe.Add(pa, i*4)))
		y00 = r0.MulAdd(av, y00)
		y01 = r1.MulAdd(av, y01)
		av = archsimd.BroadcastFloat32x16(*(*float32)(unsafe.Add(pa, as+i*4)))
		y10 = r0.MulAdd(av, y10)
		y11 = r1.MulAdd(av, y11)
		av = archsimd.BroadcastFloat32x16(*(*float32)(unsafe.Add(pc, i*4)))
		y20 = r0.MulAdd(av, y20)
		y21 = r1.MulAdd(av, y21)
		av = archsimd.BroadcastFloat32x16(*(*float32)(unsafe.Add(pc, as+i*4)))
		y30 = r0.MulAdd(av, y30)
		y31 = r1.MulAdd(av, y31)
	}
	y00.Store((*[16]float32)(py))
	y01.Store((*[16]float32)(unsafe.Add(py, 64)))
	py = unsafe.Add(py, ys)
	y10.Store((*[16]float32)(py))
	y11.Store((*[16]float32)(unsafe.Add(py, 64)))
	py = unsafe.Add(py, ys)
	y20.Store((*[16]float32)(py))
	y21.Store((*[16]float32)(unsafe.Add(py, 64)))
	py = unsafe.Add(py, ys)
	y30.Store((*[16]float32)(py))
	y31.Store((*[16]float32)(unsafe.Add(py, 64)))
}

// axpy4q16 is axpy4q32 for 16 values.
func axpy4q16(pa unsafe.Pointer, as int, pm unsafe.Pointer, rs int, py unsafe.Pointer, ys, n int) {
	pa1, pa2, pa3 := unsafe.Add(pa, as), unsafe.Add(pa, 2*as), unsafe.Add(pa, 3*as)
	py1, py2, py3 := unsafe.Add(py, ys), unsafe.Add(py, 2*ys), unsafe.Add(py, 3*ys)
	y0, y1, y2, y3 := l16(py, 0), l16(py1, 0), l16(py2, 0), l16(py3, 0)
	for i := range n {
		r := l16(unsafe.Add(pm, i*rs), 0)
		y0 = r.MulAdd(archsimd.BroadcastFloat32x16(*(*float32)(unsafe.Add(pa, i*4))), y0)
		y1 = r.MulAdd(archsimd.BroadcastFloat32x16(*(*float32)(unsafe.Add(pa1, i*4))), y1)
		y2 = r.MulAdd(archsimd.BroadcastFloat32x16(*(*float32)(unsafe.Add(pa2, i*4))), y2)
		y3 = r.MulAdd(archsimd.BroadcastFloat32x16(*(*float32)(unsafe.Add(pa3, i*4))), y3)
	}
	y0.Store((*[16]float32)(py))
	y1.Store((*[16]float32)(py1))
	y2.Store((*[16]float32)(py2))
	y3.Store((*[16]float32)(py3))
}
