//go:build goexperiment.simd && amd64

package kernels

import (
	"simd/archsimd"
	"unsafe"
)

// The Q8_0B products of the vector levels (q8blocks.go says what they
// keep): matQ8BSignAVX2 is matQ8SignAVX2 over blocks, and the AVX-512
// tiles (q8BDot*, q8asm_amd64.s) are the Q8_0 assembly tiles over blocks.

// matQ8BSignAVX2 is matQ8SignAVX2 for a Q8_0B matrix.
func matQ8BSignAVX2(out []float32, w *Mat, xq []int8, xs []float32, lo, hi, T int) {
	if lo >= hi || T <= 0 {
		return
	}
	G, rb := checkQ8B(out, w, xq, xs, lo, hi, T)
	rows, cols := w.Rows, w.Cols
	pw, px, pxs, po := unsafe.Pointer(&w.B[0]), unsafe.Pointer(&xq[0]), unsafe.Pointer(&xs[0]), unsafe.Pointer(&out[0])
	// Declared while the vector state is clean (see doc.go).
	var tile [4]float32
	for t0 := 0; t0 < T; t0 += tokenBlock {
		t1 := min(T, t0+tokenBlock)
		r := lo
		for ; r+4 <= hi; r += 4 {
			for t := t0; t < t1; t++ {
				q8BSignTile(po, t*rows+r, pw, rb, G, r, r+1, r+2, r+3, unsafe.Add(px, t*cols), unsafe.Add(pxs, 4*t*G))
			}
		}
		if r < hi {
			r1, r2, r3 := min(r+1, hi-1), min(r+2, hi-1), min(r+3, hi-1)
			for t := t0; t < t1; t++ {
				q8BSignTile(unsafe.Pointer(&tile), 0, pw, rb, G, r, r1, r2, r3, unsafe.Add(px, t*cols), unsafe.Add(pxs, 4*t*G))
				archsimd.ClearAVXUpperBits()
				copy(out[t*rows+r:t*rows+hi], tile[:hi-r])
			}
		}
	}
	archsimd.ClearAVXUpperBits()
}

// q8BSignTile is q8SignTile over blocks: per group, each row's scale is
// its block's fp16 widened exactly (bcastF16) times the activation scale,
// the product q8SignTile selects from its scale vectors, so the FMAs see
// the same operands in the same order.
func q8BSignTile(po unsafe.Pointer, o int, pw unsafe.Pointer, rb, G, r0, r1, r2, r3 int, x0, xs unsafe.Pointer) {
	w0, w1, w2, w3 := unsafe.Add(pw, r0*rb), unsafe.Add(pw, r1*rb), unsafe.Add(pw, r2*rb), unsafe.Add(pw, r3*rb)
	var a0, a1, a2, a3 archsimd.Float32x8
	ones := archsimd.BroadcastInt16x16(1)
	k112 := pow112()
	for g := range G {
		off := g * q8BlockBytes
		x := ldi8(x0, g*QK)
		d := archsimd.BroadcastUint32x8(*(*uint32)(unsafe.Add(xs, 4*g))).AsFloat32x8()
		b0, b1 := unsafe.Add(w0, off), unsafe.Add(w1, off)
		b2, b3 := unsafe.Add(w2, off), unsafe.Add(w3, off)
		a0 = q8SignGroup(ldi8(b0, 2), x, ones).ConvertToFloat32().MulAdd(bcastF16(b0, k112).Mul(d), a0)
		a1 = q8SignGroup(ldi8(b1, 2), x, ones).ConvertToFloat32().MulAdd(bcastF16(b1, k112).Mul(d), a1)
		a2 = q8SignGroup(ldi8(b2, 2), x, ones).ConvertToFloat32().MulAdd(bcastF16(b2, k112).Mul(d), a2)
		a3 = q8SignGroup(ldi8(b3, 2), x, ones).ConvertToFloat32().MulAdd(bcastF16(b3, k112).Mul(d), a3)
	}
	st4p(po, o, hsum4(a0, a1, a2, a3))
}

// The Q8_0B tiles of q8asm_amd64.s: q8Dot4x1, q8Dot4x2, q8Dot4x4 and
// q8Dot8x1 over block rows (w0..w3, or w and its row stride rb) in place of
// quant rows. Each group's quants are read at block+2 and the weight
// pointers step 34 bytes a group. The four-row tiles, which run in prefill
// (a tile's scales serve every token of the batch), take the rows' scales
// widened to fp32 once per tile and batch (q8BScales, into a buffer of the
// call); the eight-row one-token tile of decode gathers each chunk's 16
// fp16 scales of a row from its blocks itself (VPGATHERDD at a 34-byte
// stride) and widens them (VCVTPH2PS). The widening is exact, and the
// scale products, group order and folds are the repacked tiles', so every
// output is bitwise theirs.

//go:noescape
func q8BDot4x1(w0, w1, w2, w3 *byte, s0, s1, s2, s3 *float32, x *int8, xs *float32, G int, out *float32)

//go:noescape
func q8BDot4x2(w0, w1, w2, w3 *byte, s0, s1, s2, s3 *float32, x *int8, xs *float32, G, cols int, out *float32, ostride int)

//go:noescape
func q8BDot4x4(w0, w1, w2, w3 *byte, s0, s1, s2, s3 *float32, x *int8, xs *float32, G, cols int, out *float32, ostride int)

//go:noescape
func q8BDot8x1(w *byte, x *int8, xs *float32, G, rb int, out *float32)

//go:noescape
func q8BScales(w *byte, G int, s *float32)

// q8BStackGroups is how many groups per row the four-row tiles' scale
// buffer holds on the stack (32,768 columns); wider rows allocate it.
const q8BStackGroups = 1024

// matQ8BAVX512Asm is matQ8AVX512Asm for a Q8_0B matrix: the same tiles in
// the same places.
func matQ8BAVX512Asm(out []float32, w *Mat, xq []int8, xs []float32, lo, hi, T int) {
	if lo >= hi || T <= 0 {
		return
	}
	G, rb := checkQ8B(out, w, xq, xs, lo, hi, T)
	rows, cols := w.Rows, w.Cols
	wb := w.B
	var tile [16]float32
	var stack [4 * q8BStackGroups]float32
	sc := stack[:]
	if G > q8BStackGroups {
		sc = make([]float32, 4*G)
	}
	sc = sc[:4*G]
	for t0 := 0; t0 < T; t0 += tokenBlock {
		t1 := min(T, t0+tokenBlock)
		r := lo
		if t1-t0 == 1 {
			for ; r+8 <= hi; r += 8 {
				q8BDot8x1(&wb[r*rb], &xq[t0*cols], &xs[t0*G], G, rb, &out[t0*rows+r])
			}
		}
		for ; r+4 <= hi; r += 4 {
			q8BAsmRows(out[t0*rows+r:], rows*4, wb, sc, xq, xs, r, r+1, r+2, r+3, rb, cols, G, t0, t1)
		}
		if r < hi {
			r1, r2, r3 := min(r+1, hi-1), min(r+2, hi-1), min(r+3, hi-1)
			for t := t0; t < t1; t += 4 {
				q8BAsmRows(tile[:], 16, wb, sc, xq, xs, r, r1, r2, r3, rb, cols, G, t, min(t+4, t1))
				for k := range min(4, t1-t) {
					copy(out[(t+k)*rows+r:(t+k)*rows+hi], tile[4*k:4*k+hi-r])
				}
			}
		}
	}
}

// q8BAsmRows is q8AsmRows over block rows r0..r3 of rb bytes: their
// scales are widened into sc (4·G values) first.
func q8BAsmRows(o []float32, ostride int, wb []byte, sc []float32, xq []int8, xs []float32, r0, r1, r2, r3, rb, cols, G, t0, t1 int) {
	w0, w1, w2, w3 := &wb[r0*rb], &wb[r1*rb], &wb[r2*rb], &wb[r3*rb]
	s0, s1, s2, s3 := &sc[0], &sc[G], &sc[2*G], &sc[3*G]
	_ = sc[4*G-1]
	q8BScales(w0, G, s0)
	q8BScales(w1, G, s1)
	q8BScales(w2, G, s2)
	q8BScales(w3, G, s3)
	_ = o[(t1-t0-1)*ostride/4+3]
	t := t0
	for ; t+4 <= t1; t += 4 {
		q8BDot4x4(w0, w1, w2, w3, s0, s1, s2, s3, &xq[t*cols], &xs[t*G], G, cols, &o[(t-t0)*ostride/4], ostride)
	}
	if t+2 <= t1 {
		q8BDot4x2(w0, w1, w2, w3, s0, s1, s2, s3, &xq[t*cols], &xs[t*G], G, cols, &o[(t-t0)*ostride/4], ostride)
		t += 2
	}
	if t < t1 {
		q8BDot4x1(w0, w1, w2, w3, s0, s1, s2, s3, &xq[t*cols], &xs[t*G], G, &o[(t-t0)*ostride/4])
	}
}
