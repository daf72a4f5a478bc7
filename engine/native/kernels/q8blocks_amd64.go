//go:build goexperiment.simd && amd64

package kernels

import (
	"simd/archsimd"
	"unsafe"
)

// The Q8_0B products of the vector levels (q8blocks.go says what they
// keep): matQ8BSignAVX2 is matQ8SignAVX2 over blocks, and the AVX-512
// tiles (q8BDot*, q8asm_amd64.s) are the Q8_0 assembly tiles over blocks.

// matQ8BSignAVX2 is matQ8SignAVX2 for a Q8_0B matrix. Each four-row
// tile's scales are widened once per token block into sc (q8BScalesAVX2),
// so the tile loop is q8SignTile's with quants read from the blocks.
func matQ8BSignAVX2(out []float32, w *Mat, xq []int8, xs []float32, lo, hi, T int) {
	if lo >= hi || T <= 0 {
		return
	}
	G, rb := checkQ8B(out, w, xq, xs, lo, hi, T)
	rows, cols := w.Rows, w.Cols
	pw, px, po := unsafe.Pointer(&w.B[0]), unsafe.Pointer(&xq[0]), unsafe.Pointer(&out[0])
	// Declared while the vector state is clean (see doc.go).
	var tile [4]float32
	var h [8]uint32
	var stack [4 * q8BStackGroups]float32
	gp := (G + 7) &^ 7 // each row's scales padded to whole vectors
	sc := stack[:]
	if gp > q8BStackGroups {
		sc = make([]float32, 4*gp)
	}
	sc = sc[:4*gp]
	k112 := pow112()
	scales := func(r0, r1, r2, r3 int) {
		q8BScalesAVX2(sc[0:gp], unsafe.Add(pw, r0*rb), G, &h, k112)
		q8BScalesAVX2(sc[gp:2*gp], unsafe.Add(pw, r1*rb), G, &h, k112)
		q8BScalesAVX2(sc[2*gp:3*gp], unsafe.Add(pw, r2*rb), G, &h, k112)
		q8BScalesAVX2(sc[3*gp:4*gp], unsafe.Add(pw, r3*rb), G, &h, k112)
	}
	for t0 := 0; t0 < T; t0 += tokenBlock {
		t1 := min(T, t0+tokenBlock)
		r := lo
		for ; r+4 <= hi; r += 4 {
			scales(r, r+1, r+2, r+3)
			for t := t0; t < t1; t++ {
				q8BSignTile(po, t*rows+r, pw, rb, sc, gp, G, r, r+1, r+2, r+3, unsafe.Add(px, t*cols), xs[t*G:(t+1)*G])
			}
		}
		if r < hi {
			r1, r2, r3 := min(r+1, hi-1), min(r+2, hi-1), min(r+3, hi-1)
			scales(r, r1, r2, r3)
			for t := t0; t < t1; t++ {
				q8BSignTile(unsafe.Pointer(&tile), 0, pw, rb, sc, gp, G, r, r1, r2, r3, unsafe.Add(px, t*cols), xs[t*G:(t+1)*G])
				archsimd.ClearAVXUpperBits()
				copy(out[t*rows+r:t*rows+hi], tile[:hi-r])
			}
		}
	}
	archsimd.ClearAVXUpperBits()
}

// q8BScalesAVX2 sets s[0:G] to the fp16 scales of the G blocks at w,
// widened exactly by bcastF16's scheme eight at a time in vector integer
// code (no scalar float code; shifts as multiplies): the half's magnitude
// bits placed as an fp32's, its sign, and for the all-ones exponent
// (infinities, NaN) 0x70000000 more, times 2^112. It may set s up to the
// next multiple of eight. h is scratch.
func q8BScalesAVX2(s []float32, w unsafe.Pointer, G int, h *[8]uint32, k112 archsimd.Float32x8) {
	b := archsimd.BroadcastUint32x8
	mag, sgn, exp, one := b(0x7fff), b(0x8000), b(0x7c00), b(0x0400)
	shl13, shl16, inf := b(1<<13), b(1<<16), b(0x70000000/0x8000)
	for g8 := 0; g8 < G; g8 += 8 {
		for j := range min(8, G-g8) {
			h[j] = uint32(*(*uint16)(unsafe.Add(w, (g8+j)*q8BlockBytes)))
		}
		v := archsimd.LoadUint32x8(h)
		f := v.And(mag).Mul(shl13).Or(v.And(sgn).Mul(shl16)).Or(v.And(exp).Add(one).And(sgn).Mul(inf))
		f.AsFloat32x8().Mul(k112).Store((*[8]float32)(s[g8 : g8+8]))
	}
}

// q8BSignTile is q8SignTile over block rows, with the rows' scales at
// sc[k*gp:] (row k of the tile): the same operands in the same order.
func q8BSignTile(po unsafe.Pointer, o int, pw unsafe.Pointer, rb int, sc []float32, gp, G, r0, r1, r2, r3 int, x0 unsafe.Pointer, xs []float32) {
	q8SignRows(po, o, unsafe.Add(pw, r0*rb+2), unsafe.Add(pw, r1*rb+2), unsafe.Add(pw, r2*rb+2), unsafe.Add(pw, r3*rb+2), q8BlockBytes,
		sc[0:gp], sc[gp:2*gp], sc[2*gp:3*gp], sc[3*gp:4*gp], G, x0, xs)
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
