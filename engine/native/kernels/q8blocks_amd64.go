//go:build goexperiment.simd && amd64

package kernels

import (
	"simd/archsimd"
	"unsafe"
)

// matQ8BSignAVX2 is the Q8_0 product of the AVX2 level: four-row tiles
// (q8SignRows, q8_amd64.go).
func matQ8BSignAVX2(out []float32, w *Mat, xq []int8, xs []float32, lo, hi, T int) {
	matQ8BTiles(out, w, xq, xs, lo, hi, T, false)
}

// matQ8BAVX512 is the archsimd Q8_0 product of the AVX-512 level
// (q8BTile4x1, simd512_amd64.go): the bitwise reference of the assembly
// tiles (TestQ8AsmBitwise) and their baseline in the benchmarks, reached
// when q8Asm is cleared.
func matQ8BAVX512(out []float32, w *Mat, xq []int8, xs []float32, lo, hi, T int) {
	matQ8BTiles(out, w, xq, xs, lo, hi, T, true)
}

// matQ8BTiles runs the four-row archsimd tiles of the AVX2 level, or with
// avx512 those of the AVX-512 level, over rows [lo,hi) and T tokens. Each
// tile's scales are widened to fp32 once per token block into sc
// (q8BScalesAVX2). Fewer than four rows left are a tile with the last row
// repeated, into a scratch tile, so each output's order is the same in
// every tile.
func matQ8BTiles(out []float32, w *Mat, xq []int8, xs []float32, lo, hi, T int, avx512 bool) {
	if lo >= hi || T <= 0 {
		return
	}
	G, rb := checkQ8B(out, w, xq, xs, lo, hi, T)
	rows, cols := w.Rows, w.Cols
	pw, px, po := unsafe.Pointer(&w.B[0]), unsafe.Pointer(&xq[0]), unsafe.Pointer(&out[0])
	// Declared while the vector state is clean (see doc.go).
	var tile [4]float32
	var h [8]uint32
	var s512 q8Scales
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
				if avx512 {
					q8BTile4x1(po, t*rows+r, pw, rb, sc, gp, G, r, r+1, r+2, r+3, unsafe.Add(px, t*cols), xs[t*G:], &s512)
				} else {
					q8BSignTile(po, t*rows+r, pw, rb, sc, gp, G, r, r+1, r+2, r+3, unsafe.Add(px, t*cols), xs[t*G:(t+1)*G])
				}
			}
		}
		if r < hi {
			r1, r2, r3 := min(r+1, hi-1), min(r+2, hi-1), min(r+3, hi-1)
			scales(r, r1, r2, r3)
			for t := t0; t < t1; t++ {
				if avx512 {
					q8BTile4x1(unsafe.Pointer(&tile), 0, pw, rb, sc, gp, G, r, r1, r2, r3, unsafe.Add(px, t*cols), xs[t*G:], &s512)
				} else {
					q8BSignTile(unsafe.Pointer(&tile), 0, pw, rb, sc, gp, G, r, r1, r2, r3, unsafe.Add(px, t*cols), xs[t*G:(t+1)*G])
				}
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

// q8BSignTile stores at po+o the products of block rows r0..r3 (scales
// at sc[k*gp:] for row k of the tile) with the activation row at x0
// (scales xs).
func q8BSignTile(po unsafe.Pointer, o int, pw unsafe.Pointer, rb int, sc []float32, gp, G, r0, r1, r2, r3 int, x0 unsafe.Pointer, xs []float32) {
	q8SignRows(po, o, unsafe.Add(pw, r0*rb+2), unsafe.Add(pw, r1*rb+2), unsafe.Add(pw, r2*rb+2), unsafe.Add(pw, r3*rb+2),
		sc[0:gp], sc[gp:2*gp], sc[2*gp:3*gp], sc[3*gp:4*gp], G, x0, xs)
}
