//go:build goexperiment.simd && amd64

package kernels

import (
	"simd/archsimd"
	"unsafe"
)

// The AVX2 k-quant kernels as they were before the Q8_K activations
// (q8k_amd64.go): Q8_0-style activations, one fp32 scale per 32 values,
// so every group of 32 weights costs a convert and a float FMA, and the
// Q4_K/Q5_K min terms use xm[g] = xs[g]·Σ_g x. Kept in the tests as the
// baseline BenchmarkKQuantKernels measures the new kernels against in
// the same run.

func q4kRowAVX2(acc *[8]float32, pb unsafe.Pointer, n int, px, pxs, pxm unsafe.Pointer) {
	var a, b, m archsimd.Float32x8
	m4 := archsimd.BroadcastUint8x32(0x0F)
	ones := archsimd.BroadcastInt16x16(1)
	k112 := pow112()
	r4 := k16(1 << 12)
	for i := range n {
		x := unsafe.Add(pb, 144*i)
		sb, mb := kScaleBytes(x)
		c := u8f(sb).Mul(bcastF16(x, k112)).Mul(l8(pxs, 8*i))
		m = u8f(mb).Mul(bcastF16(unsafe.Add(x, 2), k112)).MulAdd(l8(pxm, 8*i), m)
		y := unsafe.Add(px, 256*i)
		for j := range 4 {
			q := ldu8(x, 16+32*j)
			lo := q.And(m4)
			hi := shr16(q.AsUint16x16(), r4).AsUint8x32().And(m4)
			i0 := lo.DotProductPairsSaturated(ldi8(y, 64*j)).DotProductPairs(ones)
			i1 := hi.DotProductPairsSaturated(ldi8(y, 64*j+32)).DotProductPairs(ones)
			a = i0.ConvertToFloat32().MulAdd(perm(c, &laneIdx[2*j]), a)
			b = i1.ConvertToFloat32().MulAdd(perm(c, &laneIdx[2*j+1]), b)
		}
	}
	a.Add(b).Sub(m).Store(acc)
}

func q5kRowAVX2(acc *[8]float32, pb unsafe.Pointer, n int, px, pxs, pxm unsafe.Pointer) {
	var a, b, m archsimd.Float32x8
	m4 := archsimd.BroadcastUint8x32(0x0F)
	b4 := archsimd.BroadcastUint8x32(0x10)
	ones := archsimd.BroadcastInt16x16(1)
	k112 := pow112()
	r4, r2, l4, l3 := k16(1<<12), k16(1<<14), k16(1<<4), k16(1<<3)
	for i := range n {
		x := unsafe.Add(pb, 176*i)
		sb, mb := kScaleBytes(x)
		c := u8f(sb).Mul(bcastF16(x, k112)).Mul(l8(pxs, 8*i))
		m = u8f(mb).Mul(bcastF16(unsafe.Add(x, 2), k112)).MulAdd(l8(pxm, 8*i), m)
		y := unsafe.Add(px, 256*i)
		// Bits 2j and 2j+1 of qh[l] are the fifth bits of value l of
		// groups 2j and 2j+1; 16-bit shifts never carry a wrong bit into
		// the byte bit kept by the mask.
		qh := ldu8(x, 16).AsUint16x16()
		for j := range 4 {
			q := ldu8(x, 48+32*j)
			lo := q.And(m4).Or(shl16(qh, l4).AsUint8x32().And(b4))
			hi := shr16(q.AsUint16x16(), r4).AsUint8x32().And(m4).Or(shl16(qh, l3).AsUint8x32().And(b4))
			qh = shr16(qh, r2)
			i0 := lo.DotProductPairsSaturated(ldi8(y, 64*j)).DotProductPairs(ones)
			i1 := hi.DotProductPairsSaturated(ldi8(y, 64*j+32)).DotProductPairs(ones)
			a = i0.ConvertToFloat32().MulAdd(perm(c, &laneIdx[2*j]), a)
			b = i1.ConvertToFloat32().MulAdd(perm(c, &laneIdx[2*j+1]), b)
		}
	}
	a.Add(b).Sub(m).Store(acc)
}

// q6kGroup is one Q6_K group of 32 values v (0..63) against y: the int32
// partial sums of (v−32)·y, lanes 0-3 over values 0-15, 4-7 over 16-31.
func q6kGroup(v archsimd.Uint8x32, y archsimd.Int8x32, m32 archsimd.Uint8x32, ones archsimd.Int16x16) archsimd.Float32x8 {
	return v.DotProductPairsSaturated(y).Sub(m32.DotProductPairsSaturated(y)).DotProductPairs(ones).ConvertToFloat32()
}

func q6kRowAVX2(acc *[8]float32, pb unsafe.Pointer, n int, px, pxs unsafe.Pointer) {
	var a, b archsimd.Float32x8
	m4 := archsimd.BroadcastUint8x32(0x0F)
	m30 := archsimd.BroadcastUint8x32(0x30)
	m32 := archsimd.BroadcastUint8x32(32)
	ones := archsimd.BroadcastInt16x16(1)
	k112 := pow112()
	r4, r2, l4, l2 := k16(1<<12), k16(1<<14), k16(1<<4), k16(1<<2)
	for i := range n {
		x := unsafe.Add(pb, 210*i)
		d := bcastF16(unsafe.Add(x, 208), k112)
		xs := l8(pxs, 8*i)
		// Sixteen int8 scales, one per 16 values: C[h] lane 2k+e is
		// d·scale[8h+2k+e]·xs[group 4h+k].
		// (Two variables, not an array: Go zeroes arrays with legacy SSE.)
		c0 := bytes8(*(*uint64)(unsafe.Add(x, 192))).AsInt8x16().ExtendLo8ToInt32().ConvertToFloat32().Mul(d).Mul(perm(xs, &dupLo))
		c1 := bytes8(*(*uint64)(unsafe.Add(x, 200))).AsInt8x16().ExtendLo8ToInt32().ConvertToFloat32().Mul(d).Mul(perm(xs, &dupHi))
		for h := range 2 {
			ql, y := unsafe.Add(x, 64*h), unsafe.Add(px, 256*i+128*h)
			qa, qb := ldu8(ql, 0), ldu8(ql, 32)
			qh := ldu8(x, 128+32*h).AsUint16x16()
			ch := c0
			if h == 1 {
				ch = c1
			}
			v := qa.And(m4).Or(shl16(qh, l4).AsUint8x32().And(m30))
			a = q6kGroup(v, ldi8(y, 0), m32, ones).MulAdd(perm(ch, &pairIdx[0]), a)
			v = qb.And(m4).Or(shl16(qh, l2).AsUint8x32().And(m30))
			b = q6kGroup(v, ldi8(y, 32), m32, ones).MulAdd(perm(ch, &pairIdx[1]), b)
			v = shr16(qa.AsUint16x16(), r4).AsUint8x32().And(m4).Or(qh.AsUint8x32().And(m30))
			a = q6kGroup(v, ldi8(y, 64), m32, ones).MulAdd(perm(ch, &pairIdx[2]), a)
			v = shr16(qb.AsUint16x16(), r4).AsUint8x32().And(m4).Or(shr16(qh, r2).AsUint8x32().And(m30))
			b = q6kGroup(v, ldi8(y, 96), m32, ones).MulAdd(perm(ch, &pairIdx[3]), b)
		}
	}
	a.Add(b).Store(acc)
}

func q4kRow2AVX2(acc, acc2 *[8]float32, pb unsafe.Pointer, n int, px, px2, pxs, pxs2, pxm, pxm2 unsafe.Pointer) {
	var a, b, m, a2, b2, m2 archsimd.Float32x8
	m4 := archsimd.BroadcastUint8x32(0x0F)
	ones := archsimd.BroadcastInt16x16(1)
	k112 := pow112()
	r4 := k16(1 << 12)
	for i := range n {
		x := unsafe.Add(pb, 144*i)
		sb, mb := kScaleBytes(x)
		sf := u8f(sb).Mul(bcastF16(x, k112))
		mf := u8f(mb).Mul(bcastF16(unsafe.Add(x, 2), k112))
		c, c2 := sf.Mul(l8(pxs, 8*i)), sf.Mul(l8(pxs2, 8*i))
		m = mf.MulAdd(l8(pxm, 8*i), m)
		m2 = mf.MulAdd(l8(pxm2, 8*i), m2)
		y, y2 := unsafe.Add(px, 256*i), unsafe.Add(px2, 256*i)
		for j := range 4 {
			q := ldu8(x, 16+32*j)
			lo := q.And(m4)
			hi := shr16(q.AsUint16x16(), r4).AsUint8x32().And(m4)
			e, o := &laneIdx[2*j], &laneIdx[2*j+1]
			a = lo.DotProductPairsSaturated(ldi8(y, 64*j)).DotProductPairs(ones).ConvertToFloat32().MulAdd(perm(c, e), a)
			b = hi.DotProductPairsSaturated(ldi8(y, 64*j+32)).DotProductPairs(ones).ConvertToFloat32().MulAdd(perm(c, o), b)
			a2 = lo.DotProductPairsSaturated(ldi8(y2, 64*j)).DotProductPairs(ones).ConvertToFloat32().MulAdd(perm(c2, e), a2)
			b2 = hi.DotProductPairsSaturated(ldi8(y2, 64*j+32)).DotProductPairs(ones).ConvertToFloat32().MulAdd(perm(c2, o), b2)
		}
	}
	a.Add(b).Sub(m).Store(acc)
	a2.Add(b2).Sub(m2).Store(acc2)
}

func q6kRow2AVX2(acc, acc2 *[8]float32, pb unsafe.Pointer, n int, px, px2, pxs, pxs2 unsafe.Pointer) {
	var a, b, a2, b2 archsimd.Float32x8
	m4 := archsimd.BroadcastUint8x32(0x0F)
	m30 := archsimd.BroadcastUint8x32(0x30)
	m32 := archsimd.BroadcastUint8x32(32)
	ones := archsimd.BroadcastInt16x16(1)
	k112 := pow112()
	r4, r2, l4, l2 := k16(1<<12), k16(1<<14), k16(1<<4), k16(1<<2)
	for i := range n {
		x := unsafe.Add(pb, 210*i)
		d := bcastF16(unsafe.Add(x, 208), k112)
		s0 := bytes8(*(*uint64)(unsafe.Add(x, 192))).AsInt8x16().ExtendLo8ToInt32().ConvertToFloat32().Mul(d)
		s1 := bytes8(*(*uint64)(unsafe.Add(x, 200))).AsInt8x16().ExtendLo8ToInt32().ConvertToFloat32().Mul(d)
		xs, xs2 := l8(pxs, 8*i), l8(pxs2, 8*i)
		for h := range 2 {
			ch, ch2 := s0.Mul(perm(xs, &dupLo)), s0.Mul(perm(xs2, &dupLo))
			if h == 1 {
				ch, ch2 = s1.Mul(perm(xs, &dupHi)), s1.Mul(perm(xs2, &dupHi))
			}
			ql := unsafe.Add(x, 64*h)
			y, y2 := unsafe.Add(px, 256*i+128*h), unsafe.Add(px2, 256*i+128*h)
			qa, qb := ldu8(ql, 0), ldu8(ql, 32)
			qh := ldu8(x, 128+32*h).AsUint16x16()
			v := qa.And(m4).Or(shl16(qh, l4).AsUint8x32().And(m30))
			a = q6kGroup(v, ldi8(y, 0), m32, ones).MulAdd(perm(ch, &pairIdx[0]), a)
			a2 = q6kGroup(v, ldi8(y2, 0), m32, ones).MulAdd(perm(ch2, &pairIdx[0]), a2)
			v = qb.And(m4).Or(shl16(qh, l2).AsUint8x32().And(m30))
			b = q6kGroup(v, ldi8(y, 32), m32, ones).MulAdd(perm(ch, &pairIdx[1]), b)
			b2 = q6kGroup(v, ldi8(y2, 32), m32, ones).MulAdd(perm(ch2, &pairIdx[1]), b2)
			v = shr16(qa.AsUint16x16(), r4).AsUint8x32().And(m4).Or(qh.AsUint8x32().And(m30))
			a = q6kGroup(v, ldi8(y, 64), m32, ones).MulAdd(perm(ch, &pairIdx[2]), a)
			a2 = q6kGroup(v, ldi8(y2, 64), m32, ones).MulAdd(perm(ch2, &pairIdx[2]), a2)
			v = shr16(qb.AsUint16x16(), r4).AsUint8x32().And(m4).Or(shr16(qh, r2).AsUint8x32().And(m30))
			b = q6kGroup(v, ldi8(y, 96), m32, ones).MulAdd(perm(ch, &pairIdx[3]), b)
			b2 = q6kGroup(v, ldi8(y2, 96), m32, ones).MulAdd(perm(ch2, &pairIdx[3]), b2)
		}
	}
	a.Add(b).Store(acc)
	a2.Add(b2).Store(acc2)
}

// blockRow2 is blockRow for two activation rows at once, each output
// bitwise what blockRow gives.
func blockRow2Old(typ DType, acc, acc2 *[8]float32, pb unsafe.Pointer, n int, px, px2, pxs, pxs2, pxm, pxm2 unsafe.Pointer) {
	switch typ {
	case Q4_K:
		q4kRow2AVX2(acc, acc2, pb, n, px, px2, pxs, pxs2, pxm, pxm2)
	case Q6_K:
		q6kRow2AVX2(acc, acc2, pb, n, px, px2, pxs, pxs2)
	}
}

// matKQuantOldAVX2 computes rows [lo,hi) for T activation rows, four rows at
// a time (their horizontal sums folded together, as for Q8_0).
func matKQuantOldAVX2(out []float32, w *Mat, xq []int8, xs, xm []float32, lo, hi, T int) {
	if lo >= hi || T <= 0 {
		return
	}
	rows, cols := w.Rows, w.Cols
	rb, err := BlockRowBytes(w.Type, cols)
	vals, _ := blockGeom(w.Type)
	G := cols / QK
	if err != nil || len(w.B) < hi*rb || len(xq) < T*cols || len(xs) < T*G || len(out) < (T-1)*rows+hi || lo < 0 {
		panic("kernels: block product bounds")
	}
	typ := w.Type
	var pxm unsafe.Pointer
	if w.Type == Q4_K || w.Type == Q5_K {
		if len(xm) < T*G {
			panic("kernels: block product bounds")
		}
		pxm = unsafe.Pointer(&xm[0])
	}
	n := cols / vals
	pw, px, pxs := unsafe.Pointer(&w.B[0]), unsafe.Pointer(&xq[0]), unsafe.Pointer(&xs[0])
	// Declared while the vector state is clean (see doc.go).
	var acc, acc2 [4][8]float32
	var tile [4]float32
	two := typ == Q4_K || typ == Q6_K
	for t0 := 0; t0 < T; t0 += tokenBlock {
		t1 := min(T, t0+tokenBlock)
		for r := lo; r < hi; r += 4 {
			w0, w1 := unsafe.Add(pw, r*rb), unsafe.Add(pw, min(r+1, hi-1)*rb)
			w2, w3 := unsafe.Add(pw, min(r+2, hi-1)*rb), unsafe.Add(pw, min(r+3, hi-1)*rb)
			for t := t0; t < t1; {
				xt, st := unsafe.Add(px, t*cols), unsafe.Add(pxs, t*G*4)
				var mt unsafe.Pointer
				if pxm != nil {
					mt = unsafe.Add(pxm, t*G*4)
				}
				if two && t+2 <= t1 {
					// Two tokens per pass over a row: the unpacked weights
					// and block scales serve both (matrix-matrix prefill).
					x2, s2 := unsafe.Add(xt, cols), unsafe.Add(st, G*4)
					var m2 unsafe.Pointer
					if mt != nil {
						m2 = unsafe.Add(mt, G*4)
					}
					blockRow2Old(typ, &acc[0], &acc2[0], w0, n, xt, x2, st, s2, mt, m2)
					blockRow2Old(typ, &acc[1], &acc2[1], w1, n, xt, x2, st, s2, mt, m2)
					blockRow2Old(typ, &acc[2], &acc2[2], w2, n, xt, x2, st, s2, mt, m2)
					blockRow2Old(typ, &acc[3], &acc2[3], w3, n, xt, x2, st, s2, mt, m2)
					storeRows(&acc, out, t*rows+r, hi-r, &tile)
					storeRows(&acc2, out, (t+1)*rows+r, hi-r, &tile)
					t += 2
					continue
				}
				blockRowOld(typ, &acc[0], w0, n, xt, st, mt)
				blockRowOld(typ, &acc[1], w1, n, xt, st, mt)
				blockRowOld(typ, &acc[2], w2, n, xt, st, mt)
				blockRowOld(typ, &acc[3], w3, n, xt, st, mt)
				storeRows(&acc, out, t*rows+r, hi-r, &tile)
				t++
			}
		}
	}
	archsimd.ClearAVXUpperBits()
}

// blockRow computes one output: the weight row at pb (n super-blocks,
// or Q4_0 blocks) against the activation row at px with group scales pxs
// and xs·xsum at pxm, storing the 8-lane accumulator (a − m) at acc.
// Direct calls (not a function value), so acc stays on the caller's stack.
func blockRowOld(typ DType, acc *[8]float32, pb unsafe.Pointer, n int, px, pxs, pxm unsafe.Pointer) {
	switch typ {
	case Q4_0:
		q40RowAVX2(acc, pb, n, px, pxs)
	case Q4_K:
		q4kRowAVX2(acc, pb, n, px, pxs, pxm)
	case Q5_K:
		q5kRowAVX2(acc, pb, n, px, pxs, pxm)
	case Q6_K:
		q6kRowAVX2(acc, pb, n, px, pxs)
	}
}
