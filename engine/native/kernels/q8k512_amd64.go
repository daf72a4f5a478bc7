//go:build goexperiment.simd && amd64

package kernels

import (
	"simd/archsimd"
	"unsafe"
)

// The AVX-512 level's four-token steps for Q4_K and Q6_K (prefill; kRow4
// picks them): q4kStep4 and q6kStep4 with two 32-value chunks per 512-bit
// vector, where the 256-bit steps take one. The chunks paired are the ones
// whose activations lie side by side (Q4_K: sub-blocks 2j and 2j+1, the
// low and high nibbles of the same 32 weight bytes; Q6_K: chunks 0 and 1,
// and 2 and 3, of a half), so each token's activations are one 64-byte
// load. Joining two tokens' halves instead cost more than it saved: slower
// than the 256-bit steps, where a plain 64-byte load is faster
// (BenchmarkVectorWidth; docs/benchmarks/native.md).
//
// Bitwise the 256-bit steps' results: VPMADDUBSW and VPMADDWD treat each
// 256-bit half of a 512-bit vector exactly as the 256-bit instruction
// treats its operands, so lane k of the lower half holds what the 256-bit
// step adds for the first chunk and lane 8+k what it adds for the second.
// The integer lane sums are exact (the ranges in q8k_amd64.go), so folding
// the halves together (lane k + lane 8+k) gives the 256-bit step's int32
// lanes, whatever the order; from there the float work is the same code.
//
// The weight unpacking is written out in each function rather than shared
// through small inlined helpers: with the helpers, BenchmarkKQuantKernels'
// avx512-ratio at T = 64 fell from 1.10 to 1.01–1.03 (Q4_K) and from
// 1.11–1.24 to 0.99–1.07 (Q6_K), alternating runs; the cause is not traced.

// Per-16-bit-lane shift counts: the lower half's lanes by lo, the upper's
// by hi.
var (
	shift0x4 = halves16(0, 4) // Q4_K: the low nibbles | the high ones
	shift4x4 = halves16(4, 4) // Q6_K: the high nibbles of qa | qb
	shift4x2 = halves16(4, 2) // Q6_K: qh's bits for chunks 0 and 1
	shift0x2 = halves16(0, 2) // Q6_K: qh's bits for chunks 2 and 3
)

func halves16(lo, hi uint16) (t [32]uint16) {
	for i := range t {
		t[i] = lo
		if i >= 16 {
			t[i] = hi
		}
	}
	return
}

func ldi8x64(p unsafe.Pointer, off int) archsimd.Int8x64 {
	return archsimd.LoadInt8x64((*[64]int8)(unsafe.Add(p, off)))
}

// both is v in both 256-bit halves.
func both(v archsimd.Uint8x32) archsimd.Uint8x64 {
	var z archsimd.Uint8x64
	return z.SetLo(v).SetHi(v)
}

// join16 is lo and hi as one vector's halves.
func join16(lo, hi archsimd.Int16x16) archsimd.Int16x32 {
	var z archsimd.Int16x32
	return z.SetLo(lo).SetHi(hi)
}

// fold adds a 512-bit step's halves: the 256-bit step's int32 lanes.
func fold(s archsimd.Int32x16) archsimd.Int32x8 { return s.GetLo().Add(s.GetHi()) }

// q4kStep4x512 is q4kStep4 (the same arguments and results, bitwise).
func q4kStep4x512(x unsafe.Pointer, tk *kTok4, dx *[4]archsimd.Float32x8, acc *[8]archsimd.Float32x8) {
	m4 := archsimd.BroadcastUint8x64(0x0F)
	sh := archsimd.LoadUint16x32(&shift0x4)
	sb, mb := kScaleBytes(x)
	sc := kScales16(sb)
	y0, y1 := tk.y, unsafe.Add(tk.y, tk.ys)
	y2, y3 := unsafe.Add(tk.y, 2*tk.ys), unsafe.Add(tk.y, 3*tk.ys)
	var s0, s1, s2, s3 archsimd.Int32x16
	for j := range 4 {
		// Lower half: the low nibbles (sub-block 2j), upper: the high
		// nibbles (2j+1), against activations 64j..64j+63.
		v := both(ldu8(x, 16+32*j)).AsUint16x32().ShiftRight(sh).AsUint8x64().And(m4)
		c := join16(kScale(sc, 2*j), kScale(sc, 2*j+1))
		o := 64 * j
		s0 = s0.Add(v.DotProductPairsSaturated(ldi8x64(y0, o)).DotProductPairs(c))
		s1 = s1.Add(v.DotProductPairsSaturated(ldi8x64(y1, o)).DotProductPairs(c))
		s2 = s2.Add(v.DotProductPairsSaturated(ldi8x64(y2, o)).DotProductPairs(c))
		s3 = s3.Add(v.DotProductPairsSaturated(ldi8x64(y3, o)).DotProductPairs(c))
	}
	k112 := pow112()
	d, dm := bcastF16(x, k112), bcastF16(unsafe.Add(x, 2), k112)
	acc[0] = fold(s0).ConvertToFloat32().MulAdd(d.Mul(dx[0]), acc[0])
	acc[2] = fold(s1).ConvertToFloat32().MulAdd(d.Mul(dx[1]), acc[2])
	acc[4] = fold(s2).ConvertToFloat32().MulAdd(d.Mul(dx[2]), acc[4])
	acc[6] = fold(s3).ConvertToFloat32().MulAdd(d.Mul(dx[3]), acc[6])
	acc[1] = kMins(mb, tk.bs).ConvertToFloat32().MulAdd(dm.Mul(dx[0]), acc[1])
	acc[3] = kMins(mb, unsafe.Add(tk.bs, tk.bss)).ConvertToFloat32().MulAdd(dm.Mul(dx[1]), acc[3])
	acc[5] = kMins(mb, unsafe.Add(tk.bs, 2*tk.bss)).ConvertToFloat32().MulAdd(dm.Mul(dx[2]), acc[5])
	acc[7] = kMins(mb, unsafe.Add(tk.bs, 3*tk.bss)).ConvertToFloat32().MulAdd(dm.Mul(dx[3]), acc[7])
}

// q6kStep4x512 is q6kStep4 (the same arguments and results, bitwise).
func q6kStep4x512(x unsafe.Pointer, tk *kTok4, dx *[4]archsimd.Float32x8, acc *[8]archsimd.Float32x8) {
	w := q6kScalesW(x)
	lo, hi := w.InterleaveLoGrouped(w), w.InterleaveHiGrouped(w)
	y0, y1 := tk.y, unsafe.Add(tk.y, tk.ys)
	y2, y3 := unsafe.Add(tk.y, 2*tk.ys), unsafe.Add(tk.y, 3*tk.ys)
	m4, m30 := archsimd.BroadcastUint8x64(0x0F), archsimd.BroadcastUint8x64(0x30)
	s44, s42, s02 := archsimd.LoadUint16x32(&shift4x4), archsimd.LoadUint16x32(&shift4x2), archsimd.LoadUint16x32(&shift0x2)
	var s0, s1, s2, s3 archsimd.Int32x16
	for h := range 2 {
		ql := archsimd.LoadUint8x64((*[64]uint8)(unsafe.Add(x, 64*h))) // qa | qb
		qh := both(ldu8(x, 128+32*h)).AsUint16x32()
		// Chunks 0 | 1: the low nibbles of qa | qb, with qh's bits 0-1 |
		// 2-3 moved to bits 4-5; chunks 2 | 3: the high nibbles, with
		// qh's bits 4-5 | 6-7.
		v01 := ql.And(m4).Or(qh.ShiftLeft(s42).AsUint8x64().And(m30))
		v23 := ql.AsUint16x32().ShiftRight(s44).AsUint8x64().And(m4).Or(qh.ShiftRight(s02).AsUint8x64().And(m30))
		c01 := join16(pick(lo, 2*h), pick(lo, 2*h+1))
		c23 := join16(pick(hi, 2*h), pick(hi, 2*h+1))
		o := 128 * h
		s0 = s0.Add(v01.DotProductPairsSaturated(ldi8x64(y0, o)).DotProductPairs(c01))
		s1 = s1.Add(v01.DotProductPairsSaturated(ldi8x64(y1, o)).DotProductPairs(c01))
		s2 = s2.Add(v01.DotProductPairsSaturated(ldi8x64(y2, o)).DotProductPairs(c01))
		s3 = s3.Add(v01.DotProductPairsSaturated(ldi8x64(y3, o)).DotProductPairs(c01))
		s0 = s0.Add(v23.DotProductPairsSaturated(ldi8x64(y0, o+64)).DotProductPairs(c23))
		s1 = s1.Add(v23.DotProductPairsSaturated(ldi8x64(y1, o+64)).DotProductPairs(c23))
		s2 = s2.Add(v23.DotProductPairsSaturated(ldi8x64(y2, o+64)).DotProductPairs(c23))
		s3 = s3.Add(v23.DotProductPairsSaturated(ldi8x64(y3, o+64)).DotProductPairs(c23))
	}
	d := bcastF16(unsafe.Add(x, 208), pow112())
	acc[0] = fold(s0).Sub(q6kOffset(w, tk.bs)).ConvertToFloat32().MulAdd(d.Mul(dx[0]), acc[0])
	acc[2] = fold(s1).Sub(q6kOffset(w, unsafe.Add(tk.bs, tk.bss))).ConvertToFloat32().MulAdd(d.Mul(dx[1]), acc[2])
	acc[4] = fold(s2).Sub(q6kOffset(w, unsafe.Add(tk.bs, 2*tk.bss))).ConvertToFloat32().MulAdd(d.Mul(dx[2]), acc[4])
	acc[6] = fold(s3).Sub(q6kOffset(w, unsafe.Add(tk.bs, 3*tk.bss))).ConvertToFloat32().MulAdd(d.Mul(dx[3]), acc[6])
}

// q4kRow512 is kRow for Q4_K (the same result, bitwise: each super-block
// is q4kStep's work), with the loop over the row's n super-blocks inside:
// decode, where one thread's product is bound by these instructions, not
// by memory, and a call per super-block (its accumulators passed through
// memory) weighed as much as the step's own work.
func q4kRow512(acc *[8]float32, pb unsafe.Pointer, n, size int, py, pd, pbs unsafe.Pointer) {
	m4 := archsimd.BroadcastUint8x64(0x0F)
	sh := archsimd.LoadUint16x32(&shift0x4)
	k112 := pow112()
	var a, m archsimd.Float32x8
	for i := range n {
		x, y, bs := unsafe.Add(pb, size*i), unsafe.Add(py, QKK*i), unsafe.Add(pbs, 32*i)
		dx := bcast32(pd, i)
		sb, mb := kScaleBytes(x)
		sc := kScales16(sb)
		mn := kMins(mb, bs)
		var s archsimd.Int32x16
		for j := range 4 {
			v := both(ldu8(x, 16+32*j)).AsUint16x32().ShiftRight(sh).AsUint8x64().And(m4)
			s = s.Add(v.DotProductPairsSaturated(ldi8x64(y, 64*j)).DotProductPairs(join16(kScale(sc, 2*j), kScale(sc, 2*j+1))))
		}
		a = fold(s).ConvertToFloat32().MulAdd(bcastF16(x, k112).Mul(dx), a)
		m = mn.ConvertToFloat32().MulAdd(bcastF16(unsafe.Add(x, 2), k112).Mul(dx), m)
	}
	a.Sub(m).Store(acc)
}

// q6kRow512 is kRow for Q6_K (the same result, bitwise), as q4kRow512.
func q6kRow512(acc *[8]float32, pb unsafe.Pointer, n, size int, py, pd, pbs unsafe.Pointer) {
	m4, m30 := archsimd.BroadcastUint8x64(0x0F), archsimd.BroadcastUint8x64(0x30)
	s44, s42, s02 := archsimd.LoadUint16x32(&shift4x4), archsimd.LoadUint16x32(&shift4x2), archsimd.LoadUint16x32(&shift0x2)
	k112 := pow112()
	var a archsimd.Float32x8
	for i := range n {
		x, y, bs := unsafe.Add(pb, size*i), unsafe.Add(py, QKK*i), unsafe.Add(pbs, 32*i)
		w := q6kScalesW(x)
		lo, hi := w.InterleaveLoGrouped(w), w.InterleaveHiGrouped(w)
		var s archsimd.Int32x16
		for h := range 2 {
			ql := archsimd.LoadUint8x64((*[64]uint8)(unsafe.Add(x, 64*h)))
			qh := both(ldu8(x, 128+32*h)).AsUint16x32()
			v01 := ql.And(m4).Or(qh.ShiftLeft(s42).AsUint8x64().And(m30))
			v23 := ql.AsUint16x32().ShiftRight(s44).AsUint8x64().And(m4).Or(qh.ShiftRight(s02).AsUint8x64().And(m30))
			o := 128 * h
			s = s.Add(v01.DotProductPairsSaturated(ldi8x64(y, o)).DotProductPairs(join16(pick(lo, 2*h), pick(lo, 2*h+1))))
			s = s.Add(v23.DotProductPairsSaturated(ldi8x64(y, o+64)).DotProductPairs(join16(pick(hi, 2*h), pick(hi, 2*h+1))))
		}
		a = fold(s).Sub(q6kOffset(w, bs)).ConvertToFloat32().MulAdd(bcastF16(unsafe.Add(x, 208), k112).Mul(bcast32(pd, i)), a)
	}
	a.Store(acc)
}
