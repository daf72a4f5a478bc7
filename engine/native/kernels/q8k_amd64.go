//go:build goexperiment.simd && amd64

package kernels

import (
	"simd/archsimd"
	"unsafe"
)

// AVX2 products of the k-quants (Q4_K, Q5_K, Q6_K) against Q8_K
// activations (q8k.go), used at the AVX2 and AVX-512 levels (where the
// four-token steps are 512-bit: q8k512_amd64.go). The scheme is
// llama.cpp's AVX2 one (ggml_vec_dot_q4_K_q8_K, ggml_vec_dot_q5_K_q8_K and
// ggml_vec_dot_q6_K_q8_K in ggml/src/ggml-cpu/arch/x86/quants.c of
// https://github.com/ggml-org/llama.cpp): per 32 values, VPMADDUBSW of the
// unsigned weight values and the int8 activations (pairs summed to int16),
// then VPMADDWD against the sub-block's scale broadcast to int16 lanes
// (pairs summed to int32, scale applied); the int32 lanes accumulate over
// the whole super-block, and only then are they converted and FMA'd once
// with d·dx. Per 256 values: one convert and one FMA (two for Q4_K/Q5_K,
// the min term), where the Q8_0-layout kernels needed eight.
//
// Integer ranges (activations are in [−127, 127], quantizeSuperK):
//
//   - VPMADDUBSW saturates at ±32767. A pair sum is at most 2·15·127 =
//     3810 (Q4_K), 2·31·127 = 7874 (Q5_K), 2·63·127 = 16002 (Q6_K, on
//     the unsigned 0..63 values): never saturated, so exact.
//   - VPMADDWD with the scales: Q4_K/Q5_K scales are 0..63, so a lane
//     gains at most 2·7874·63 < 2^20 per 32 values and 8·2^20 = 2^23
//     per super-block. Q6_K scales are int8: 2·16002·128 < 2^22 per 32
//     values, eight sub-pairs per lane: < 2^25.
//   - Q6_K's −32: 32·sc_k·bsum_k, with |bsum| ≤ 16·127 = 2032 and
//     32·|sc| ≤ 4096 (fits int16, so VPMADDWD takes it): a lane is at
//     most 2·4096·2032 < 2^24.
//   - The Q4_K/Q5_K mins (0..63) against the bsums: 2·63·2032 < 2^18.
//
// TestKQuantSumsExact and FuzzKQuantSums check the lane sums of every step
// against the portable integer loops.
//
// The reduction order of one output (fixed whatever T or the row range):
// super-block by super-block in order, the converted int32 lanes FMA'd
// into one 8-lane accumulator a (and the min terms into m), then
// hsum4(a − m). Batched and single-token results are bitwise equal.

// Shuffle indices (VPSHUFB, per 128-bit half).
var (
	// kBcast[k] broadcasts 16-bit lane k of each half to all eight.
	kBcast = func() (t [8][32]int8) {
		for k := range t {
			for i := range 16 {
				t[k][2*i], t[k][2*i+1] = int8(2*k), int8(2*k+1)
			}
		}
		return
	}()
	// kDup doubles each of the low eight bytes: 0,0,1,1,...,7,7.
	kDup = [16]int8{0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7}
)

func ldi16(p unsafe.Pointer) archsimd.Int16x16 {
	return archsimd.LoadInt16x16((*[16]int16)(p))
}

// bcast32 broadcasts the float32 at p+4i with an integer load (no scalar
// float code).
func bcast32(p unsafe.Pointer, i int) archsimd.Float32x8 {
	return archsimd.BroadcastUint32x8(*(*uint32)(unsafe.Add(p, 4*i))).AsFloat32x8()
}

// kScales16 widens the eight scale bytes of sb to int16 lanes 0-7 of both
// 128-bit halves, as kBcast expects.
func kScales16(sb uint64) archsimd.Int8x32 {
	var z archsimd.Uint64x2
	return z.SetElem(0, sb).SetElem(1, sb).AsUint8x16().ExtendToUint16().AsInt8x32()
}

// kScale is scale k of kScales16's vector in all sixteen int16 lanes.
func kScale(sc archsimd.Int8x32, k int) archsimd.Int16x16 {
	return sc.PermuteOrZeroGrouped(archsimd.LoadInt8x32(&kBcast[k])).AsInt16x16()
}

// kMins is Σ m_k·(bsum_2k + bsum_2k+1) in lane k: the eight mins of mb,
// each in two adjacent int16 lanes, against the sixteen bsums at bs.
func kMins(mb uint64, bs unsafe.Pointer) archsimd.Int32x8 {
	m := bytes8(mb).PermuteOrZero(archsimd.LoadInt8x16(&kDup)).ExtendToUint16().AsInt16x16()
	return m.DotProductPairs(ldi16(bs))
}

// kLanes receives a step's integer lanes in the tests (nil in products):
// [0] the scaled sums, [1] the min sums (Q4_K/Q5_K).
type kLanes = [2][8]int32

func storeLanes(l *kLanes, s, mn archsimd.Int32x8) {
	if l != nil {
		s.Store(&l[0])
		mn.Store(&l[1])
	}
}

// The step functions fold one super-block x (against the Q8_K values at
// y, bsums at bs, scale dx in every lane) into a row's accumulators and
// return them. All the integer work is inline, and the accumulators go in
// and out as arguments and results: Go keeps no vector register across a
// call, so anything live across one would be spilled and reloaded per
// super-block.

// q4kStep: a += (d·dx)·sumi, m += (dmin·dx)·mins.
func q4kStep(x, y, bs unsafe.Pointer, dx, a, m archsimd.Float32x8, l *kLanes) (archsimd.Float32x8, archsimd.Float32x8) {
	m4 := archsimd.BroadcastUint8x32(0x0F)
	r4 := k16(1 << 12)
	sb, mb := kScaleBytes(x)
	sc := kScales16(sb)
	mn := kMins(mb, bs)
	var s archsimd.Int32x8
	for j := range 4 {
		q := ldu8(x, 16+32*j)
		lo := q.And(m4)
		hi := shr16(q.AsUint16x16(), r4).AsUint8x32().And(m4)
		p0 := lo.DotProductPairsSaturated(ldi8(y, 64*j)).DotProductPairs(kScale(sc, 2*j))
		p1 := hi.DotProductPairsSaturated(ldi8(y, 64*j+32)).DotProductPairs(kScale(sc, 2*j+1))
		s = s.Add(p0.Add(p1))
	}
	storeLanes(l, s, mn)
	k112 := pow112()
	a = s.ConvertToFloat32().MulAdd(bcastF16(x, k112).Mul(dx), a)
	m = mn.ConvertToFloat32().MulAdd(bcastF16(unsafe.Add(x, 2), k112).Mul(dx), m)
	return a, m
}

// q4kStep2 is q4kStep for two activation rows, unpacking the weights
// once; each row's results are bitwise q4kStep's.
func q4kStep2(x, y, bs, y2, bs2 unsafe.Pointer, dx, dx2 archsimd.Float32x8, acc *[4]archsimd.Float32x8, l, l2 *kLanes) {
	m4 := archsimd.BroadcastUint8x32(0x0F)
	r4 := k16(1 << 12)
	sb, mb := kScaleBytes(x)
	sc := kScales16(sb)
	var s, s2 archsimd.Int32x8
	for j := range 4 {
		q := ldu8(x, 16+32*j)
		lo := q.And(m4)
		hi := shr16(q.AsUint16x16(), r4).AsUint8x32().And(m4)
		c0, c1 := kScale(sc, 2*j), kScale(sc, 2*j+1)
		p0 := lo.DotProductPairsSaturated(ldi8(y, 64*j)).DotProductPairs(c0)
		p1 := hi.DotProductPairsSaturated(ldi8(y, 64*j+32)).DotProductPairs(c1)
		s = s.Add(p0.Add(p1))
		p0 = lo.DotProductPairsSaturated(ldi8(y2, 64*j)).DotProductPairs(c0)
		p1 = hi.DotProductPairsSaturated(ldi8(y2, 64*j+32)).DotProductPairs(c1)
		s2 = s2.Add(p0.Add(p1))
	}
	kFinish2(x, mb, bs, bs2, s, s2, dx, dx2, acc, l, l2)
}

// kFinish2 is the float part of the two-row Q4_K/Q5_K steps: acc holds
// a, m, a2, m2.
func kFinish2(x unsafe.Pointer, mb uint64, bs, bs2 unsafe.Pointer, s, s2 archsimd.Int32x8, dx, dx2 archsimd.Float32x8, acc *[4]archsimd.Float32x8, l, l2 *kLanes) {
	mn, mn2 := kMins(mb, bs), kMins(mb, bs2)
	storeLanes(l, s, mn)
	storeLanes(l2, s2, mn2)
	k112 := pow112()
	d, dm := bcastF16(x, k112), bcastF16(unsafe.Add(x, 2), k112)
	acc[0] = s.ConvertToFloat32().MulAdd(d.Mul(dx), acc[0])
	acc[1] = mn.ConvertToFloat32().MulAdd(dm.Mul(dx), acc[1])
	acc[2] = s2.ConvertToFloat32().MulAdd(d.Mul(dx2), acc[2])
	acc[3] = mn2.ConvertToFloat32().MulAdd(dm.Mul(dx2), acc[3])
}

// q5kStep is q4kStep for Q5_K. Bits 2j and 2j+1 of qh[l] are the fifth
// bits of value l of sub-blocks 2j and 2j+1; 16-bit shifts never carry a
// wrong bit into the byte bit the mask keeps.
func q5kStep(x, y, bs unsafe.Pointer, dx, a, m archsimd.Float32x8, l *kLanes) (archsimd.Float32x8, archsimd.Float32x8) {
	m4 := archsimd.BroadcastUint8x32(0x0F)
	b4 := archsimd.BroadcastUint8x32(0x10)
	r4, r2, l4, l3 := k16(1<<12), k16(1<<14), k16(1<<4), k16(1<<3)
	sb, mb := kScaleBytes(x)
	sc := kScales16(sb)
	mn := kMins(mb, bs)
	qh := ldu8(x, 16).AsUint16x16()
	var s archsimd.Int32x8
	for j := range 4 {
		q := ldu8(x, 48+32*j)
		lo := q.And(m4).Or(shl16(qh, l4).AsUint8x32().And(b4))
		hi := shr16(q.AsUint16x16(), r4).AsUint8x32().And(m4).Or(shl16(qh, l3).AsUint8x32().And(b4))
		qh = shr16(qh, r2)
		p0 := lo.DotProductPairsSaturated(ldi8(y, 64*j)).DotProductPairs(kScale(sc, 2*j))
		p1 := hi.DotProductPairsSaturated(ldi8(y, 64*j+32)).DotProductPairs(kScale(sc, 2*j+1))
		s = s.Add(p0.Add(p1))
	}
	storeLanes(l, s, mn)
	k112 := pow112()
	a = s.ConvertToFloat32().MulAdd(bcastF16(x, k112).Mul(dx), a)
	m = mn.ConvertToFloat32().MulAdd(bcastF16(unsafe.Add(x, 2), k112).Mul(dx), m)
	return a, m
}

// q5kStep2 is q5kStep for two activation rows.
func q5kStep2(x, y, bs, y2, bs2 unsafe.Pointer, dx, dx2 archsimd.Float32x8, acc *[4]archsimd.Float32x8, l, l2 *kLanes) {
	m4 := archsimd.BroadcastUint8x32(0x0F)
	b4 := archsimd.BroadcastUint8x32(0x10)
	r4, r2, l4, l3 := k16(1<<12), k16(1<<14), k16(1<<4), k16(1<<3)
	sb, mb := kScaleBytes(x)
	sc := kScales16(sb)
	qh := ldu8(x, 16).AsUint16x16()
	var s, s2 archsimd.Int32x8
	for j := range 4 {
		q := ldu8(x, 48+32*j)
		lo := q.And(m4).Or(shl16(qh, l4).AsUint8x32().And(b4))
		hi := shr16(q.AsUint16x16(), r4).AsUint8x32().And(m4).Or(shl16(qh, l3).AsUint8x32().And(b4))
		qh = shr16(qh, r2)
		c0, c1 := kScale(sc, 2*j), kScale(sc, 2*j+1)
		p0 := lo.DotProductPairsSaturated(ldi8(y, 64*j)).DotProductPairs(c0)
		p1 := hi.DotProductPairsSaturated(ldi8(y, 64*j+32)).DotProductPairs(c1)
		s = s.Add(p0.Add(p1))
		p0 = lo.DotProductPairsSaturated(ldi8(y2, 64*j)).DotProductPairs(c0)
		p1 = hi.DotProductPairsSaturated(ldi8(y2, 64*j+32)).DotProductPairs(c1)
		s2 = s2.Add(p0.Add(p1))
	}
	kFinish2(x, mb, bs, bs2, s, s2, dx, dx2, acc, l, l2)
}

// Q6_K's sixteen int8 scales, one per 16 values, are widened once per
// super-block to int16 lanes W (lane k = sc_k) and spread as int16 pairs
// into two vectors of int32 lanes: lo = W.InterleaveLo(W) holds scales
// 0-3 and 8-11 (each twice), hi = W.InterleaveHi(W) scales 4-7 and 12-15.
// Chunk c (values 32c..32c+31, scales 2c and 2c+1) then takes its scales
// with one VPERMD (pick): pairIdx picks lanes (2k, 2k+1) of lo or hi into
// lanes 0-3 and 4-7, matching VPMADDUBSW's lane order (values 0-15,
// 16-31).
// Everything stays in 256-bit registers: Go moves and spills 128-bit
// vectors with legacy-SSE MOVUPS, which slowed this many times over on
// Intel (the SSE/AVX transition; docs/benchmarks/native.md).

func q6kScalesW(x unsafe.Pointer) archsimd.Int16x16 {
	return archsimd.LoadInt8x16((*[16]int8)(unsafe.Add(x, 192))).ExtendToInt16()
}

// q6kOffset is Σ 32·sc_k·bsum_k as eight int32 lanes.
func q6kOffset(w archsimd.Int16x16, bs unsafe.Pointer) archsimd.Int32x8 {
	return w.Mul(archsimd.BroadcastInt16x16(32)).DotProductPairs(ldi16(bs))
}

// The chunks of a Q6_K half (32 values each, 0..63 unsigned): the low
// nibbles of qa (chunk 0), qb (1), the high nibbles of qa (2), qb (3);
// bits 2c, 2c+1 of qh as bits 4-5. The constants are plain locals: a
// struct of vectors is copied with legacy-SSE MOVUPS.

// pick is the int16 scales of a chunk from lo or hi (q6kScalesW's
// comment): lanes 2k, 2k+1 of v spread over lanes 0-3 and 4-7.
func pick(v archsimd.Int16x16, k int) archsimd.Int16x16 {
	return v.AsInt32x8().Permute(archsimd.LoadUint32x8(&pairIdx[k&3])).AsInt16x16()
}

// q6kStep: a += (d·dx)·(Σ_k sc_k·Σ q·y − 32·Σ_k sc_k·bsum_k). Half h's
// chunks take scales (lo, 2h), (lo, 2h+1), (hi, 2h), (hi, 2h+1).
func q6kStep(x, y, bs unsafe.Pointer, dx, a archsimd.Float32x8, l *kLanes) archsimd.Float32x8 {
	w := q6kScalesW(x)
	lo, hi := w.InterleaveLoGrouped(w), w.InterleaveHiGrouped(w)
	m4, m30 := archsimd.BroadcastUint8x32(0x0F), archsimd.BroadcastUint8x32(0x30)
	r4, r2, u4, u2 := k16(1<<12), k16(1<<14), k16(1<<4), k16(1<<2)
	var s archsimd.Int32x8
	for h := range 2 {
		qa, qb := ldu8(x, 64*h), ldu8(x, 64*h+32)
		qh := ldu8(x, 128+32*h).AsUint16x16()
		yh := unsafe.Add(y, 128*h)
		s = s.Add(qa.And(m4).Or(shl16(qh, u4).AsUint8x32().And(m30)).DotProductPairsSaturated(ldi8(yh, 0)).DotProductPairs(pick(lo, 2*h)))
		s = s.Add(qb.And(m4).Or(shl16(qh, u2).AsUint8x32().And(m30)).DotProductPairsSaturated(ldi8(yh, 32)).DotProductPairs(pick(lo, 2*h+1)))
		s = s.Add(shr16(qa.AsUint16x16(), r4).AsUint8x32().And(m4).Or(qh.AsUint8x32().And(m30)).DotProductPairsSaturated(ldi8(yh, 64)).DotProductPairs(pick(hi, 2*h)))
		s = s.Add(shr16(qb.AsUint16x16(), r4).AsUint8x32().And(m4).Or(shr16(qh, r2).AsUint8x32().And(m30)).DotProductPairsSaturated(ldi8(yh, 96)).DotProductPairs(pick(hi, 2*h+1)))
	}
	s = s.Sub(q6kOffset(w, bs))
	var z archsimd.Int32x8
	storeLanes(l, s, z)
	return s.ConvertToFloat32().MulAdd(bcastF16(unsafe.Add(x, 208), pow112()).Mul(dx), a)
}

// q6kStep2 is q6kStep for two activation rows (acc holds a, a2 in 0, 2).
func q6kStep2(x, y, bs, y2, bs2 unsafe.Pointer, dx, dx2 archsimd.Float32x8, acc *[4]archsimd.Float32x8, l, l2 *kLanes) {
	w := q6kScalesW(x)
	lo, hi := w.InterleaveLoGrouped(w), w.InterleaveHiGrouped(w)
	m4, m30 := archsimd.BroadcastUint8x32(0x0F), archsimd.BroadcastUint8x32(0x30)
	r4, r2, u4, u2 := k16(1<<12), k16(1<<14), k16(1<<4), k16(1<<2)
	var s, s2 archsimd.Int32x8
	for h := range 2 {
		qa, qb := ldu8(x, 64*h), ldu8(x, 64*h+32)
		qh := ldu8(x, 128+32*h).AsUint16x16()
		yh, yh2 := unsafe.Add(y, 128*h), unsafe.Add(y2, 128*h)
		v, c := qa.And(m4).Or(shl16(qh, u4).AsUint8x32().And(m30)), pick(lo, 2*h)
		s = s.Add(v.DotProductPairsSaturated(ldi8(yh, 0)).DotProductPairs(c))
		s2 = s2.Add(v.DotProductPairsSaturated(ldi8(yh2, 0)).DotProductPairs(c))
		v, c = qb.And(m4).Or(shl16(qh, u2).AsUint8x32().And(m30)), pick(lo, 2*h+1)
		s = s.Add(v.DotProductPairsSaturated(ldi8(yh, 32)).DotProductPairs(c))
		s2 = s2.Add(v.DotProductPairsSaturated(ldi8(yh2, 32)).DotProductPairs(c))
		v, c = shr16(qa.AsUint16x16(), r4).AsUint8x32().And(m4).Or(qh.AsUint8x32().And(m30)), pick(hi, 2*h)
		s = s.Add(v.DotProductPairsSaturated(ldi8(yh, 64)).DotProductPairs(c))
		s2 = s2.Add(v.DotProductPairsSaturated(ldi8(yh2, 64)).DotProductPairs(c))
		v, c = shr16(qb.AsUint16x16(), r4).AsUint8x32().And(m4).Or(shr16(qh, r2).AsUint8x32().And(m30)), pick(hi, 2*h+1)
		s = s.Add(v.DotProductPairsSaturated(ldi8(yh, 96)).DotProductPairs(c))
		s2 = s2.Add(v.DotProductPairsSaturated(ldi8(yh2, 96)).DotProductPairs(c))
	}
	s, s2 = s.Sub(q6kOffset(w, bs)), s2.Sub(q6kOffset(w, bs2))
	var z archsimd.Int32x8
	storeLanes(l, s, z)
	storeLanes(l2, s2, z)
	d := bcastF16(unsafe.Add(x, 208), pow112())
	acc[0] = s.ConvertToFloat32().MulAdd(d.Mul(dx), acc[0])
	acc[2] = s2.ConvertToFloat32().MulAdd(d.Mul(dx2), acc[2])
}

// kTok4 locates four consecutive activation rows at one super-block:
// row k's values at y + k·ys, its bsums at bs + k·bss.
type kTok4 struct {
	y, bs   unsafe.Pointer
	ys, bss int
}

// q4kStep4 is q4kStep for four activation rows, unpacking the weights
// once per super-block; acc holds a0, m0, a1, m1, ... and each row's
// results are bitwise q4kStep's.
func q4kStep4(x unsafe.Pointer, tk *kTok4, dx *[4]archsimd.Float32x8, acc *[8]archsimd.Float32x8) {
	m4 := archsimd.BroadcastUint8x32(0x0F)
	r4 := k16(1 << 12)
	sb, mb := kScaleBytes(x)
	sc := kScales16(sb)
	y0, y1 := tk.y, unsafe.Add(tk.y, tk.ys)
	y2, y3 := unsafe.Add(tk.y, 2*tk.ys), unsafe.Add(tk.y, 3*tk.ys)
	var s0, s1, s2, s3 archsimd.Int32x8
	for j := range 4 {
		q := ldu8(x, 16+32*j)
		lo := q.And(m4)
		hi := shr16(q.AsUint16x16(), r4).AsUint8x32().And(m4)
		c0, c1 := kScale(sc, 2*j), kScale(sc, 2*j+1)
		o0, o1 := 64*j, 64*j+32
		s0 = s0.Add(lo.DotProductPairsSaturated(ldi8(y0, o0)).DotProductPairs(c0).Add(hi.DotProductPairsSaturated(ldi8(y0, o1)).DotProductPairs(c1)))
		s1 = s1.Add(lo.DotProductPairsSaturated(ldi8(y1, o0)).DotProductPairs(c0).Add(hi.DotProductPairsSaturated(ldi8(y1, o1)).DotProductPairs(c1)))
		s2 = s2.Add(lo.DotProductPairsSaturated(ldi8(y2, o0)).DotProductPairs(c0).Add(hi.DotProductPairsSaturated(ldi8(y2, o1)).DotProductPairs(c1)))
		s3 = s3.Add(lo.DotProductPairsSaturated(ldi8(y3, o0)).DotProductPairs(c0).Add(hi.DotProductPairsSaturated(ldi8(y3, o1)).DotProductPairs(c1)))
	}
	k112 := pow112()
	d, dm := bcastF16(x, k112), bcastF16(unsafe.Add(x, 2), k112)
	acc[0] = s0.ConvertToFloat32().MulAdd(d.Mul(dx[0]), acc[0])
	acc[2] = s1.ConvertToFloat32().MulAdd(d.Mul(dx[1]), acc[2])
	acc[4] = s2.ConvertToFloat32().MulAdd(d.Mul(dx[2]), acc[4])
	acc[6] = s3.ConvertToFloat32().MulAdd(d.Mul(dx[3]), acc[6])
	acc[1] = kMins(mb, tk.bs).ConvertToFloat32().MulAdd(dm.Mul(dx[0]), acc[1])
	acc[3] = kMins(mb, unsafe.Add(tk.bs, tk.bss)).ConvertToFloat32().MulAdd(dm.Mul(dx[1]), acc[3])
	acc[5] = kMins(mb, unsafe.Add(tk.bs, 2*tk.bss)).ConvertToFloat32().MulAdd(dm.Mul(dx[2]), acc[5])
	acc[7] = kMins(mb, unsafe.Add(tk.bs, 3*tk.bss)).ConvertToFloat32().MulAdd(dm.Mul(dx[3]), acc[7])
}

// q6kStep4 is q6kStep for four activation rows (acc as for q4kStep4, the
// m slots unused).
func q6kStep4(x unsafe.Pointer, tk *kTok4, dx *[4]archsimd.Float32x8, acc *[8]archsimd.Float32x8) {
	w := q6kScalesW(x)
	lo, hi := w.InterleaveLoGrouped(w), w.InterleaveHiGrouped(w)
	y0, y1 := tk.y, unsafe.Add(tk.y, tk.ys)
	y2, y3 := unsafe.Add(tk.y, 2*tk.ys), unsafe.Add(tk.y, 3*tk.ys)
	var s0, s1, s2, s3 archsimd.Int32x8
	m4, m30 := archsimd.BroadcastUint8x32(0x0F), archsimd.BroadcastUint8x32(0x30)
	r4, r2, u4, u2 := k16(1<<12), k16(1<<14), k16(1<<4), k16(1<<2)
	for h := range 2 {
		qa, qb := ldu8(x, 64*h), ldu8(x, 64*h+32)
		qh := ldu8(x, 128+32*h).AsUint16x16()
		o := 128 * h
		for c := range 4 {
			var v archsimd.Uint8x32
			var sc archsimd.Int16x16
			switch c {
			case 0:
				v, sc = qa.And(m4).Or(shl16(qh, u4).AsUint8x32().And(m30)), pick(lo, 2*h)
			case 1:
				v, sc = qb.And(m4).Or(shl16(qh, u2).AsUint8x32().And(m30)), pick(lo, 2*h+1)
			case 2:
				v, sc = shr16(qa.AsUint16x16(), r4).AsUint8x32().And(m4).Or(qh.AsUint8x32().And(m30)), pick(hi, 2*h)
			default:
				v, sc = shr16(qb.AsUint16x16(), r4).AsUint8x32().And(m4).Or(shr16(qh, r2).AsUint8x32().And(m30)), pick(hi, 2*h+1)
			}
			oc := o + 32*c
			s0 = s0.Add(v.DotProductPairsSaturated(ldi8(y0, oc)).DotProductPairs(sc))
			s1 = s1.Add(v.DotProductPairsSaturated(ldi8(y1, oc)).DotProductPairs(sc))
			s2 = s2.Add(v.DotProductPairsSaturated(ldi8(y2, oc)).DotProductPairs(sc))
			s3 = s3.Add(v.DotProductPairsSaturated(ldi8(y3, oc)).DotProductPairs(sc))
		}
	}
	d := bcastF16(unsafe.Add(x, 208), pow112())
	acc[0] = s0.Sub(q6kOffset(w, tk.bs)).ConvertToFloat32().MulAdd(d.Mul(dx[0]), acc[0])
	acc[2] = s1.Sub(q6kOffset(w, unsafe.Add(tk.bs, tk.bss))).ConvertToFloat32().MulAdd(d.Mul(dx[1]), acc[2])
	acc[4] = s2.Sub(q6kOffset(w, unsafe.Add(tk.bs, 2*tk.bss))).ConvertToFloat32().MulAdd(d.Mul(dx[2]), acc[4])
	acc[6] = s3.Sub(q6kOffset(w, unsafe.Add(tk.bs, 3*tk.bss))).ConvertToFloat32().MulAdd(d.Mul(dx[3]), acc[6])
}

// kRow4 is kRow for four activation rows t..t+3 (Q4_K and Q6_K), each
// output bitwise what kRow gives; out receives a − m per row.
func kRow4(typ DType, out *[4][8]float32, pb unsafe.Pointer, n, size int, py, pd, pbs unsafe.Pointer, cols int, st *kState4) {
	if typ == Q4_K && level == levelAVX512 && q4kAsm {
		q4kTok4AVX512(out, pb, n, py, pd, pbs, cols, n*4, cols/bsumsPer*2)
		return
	}
	var z archsimd.Float32x8
	for k := range st.acc {
		st.acc[k] = z
	}
	ds, bss := n*4, cols/bsumsPer*2
	for i := range n {
		x := unsafe.Add(pb, size*i)
		st.tk = kTok4{y: unsafe.Add(py, QKK*i), bs: unsafe.Add(pbs, 32*i), ys: cols, bss: bss}
		for k := range 4 {
			st.dx[k] = bcast32(unsafe.Add(pd, k*ds), i)
		}
		switch {
		case typ == Q4_K && level == levelAVX512:
			q4kStep4x512(x, &st.tk, &st.dx, &st.acc)
		case typ == Q4_K:
			q4kStep4(x, &st.tk, &st.dx, &st.acc)
		case level == levelAVX512:
			q6kStep4x512(x, &st.tk, &st.dx, &st.acc)
		default:
			q6kStep4(x, &st.tk, &st.dx, &st.acc)
		}
	}
	for k := range 4 {
		st.acc[2*k].Sub(st.acc[2*k+1]).Store(&out[k])
	}
}

// storeCol is storeRows for token k of acc4 ([weight row][token]).
func storeCol(acc4 *[4][4][8]float32, k int, out []float32, o, left int, tile *[4]float32) {
	storeSums(hsum4(archsimd.LoadFloat32x8(&acc4[0][k]), archsimd.LoadFloat32x8(&acc4[1][k]),
		archsimd.LoadFloat32x8(&acc4[2][k]), archsimd.LoadFloat32x8(&acc4[3][k])), out, o, left, tile)
}

// kState4 is kRow4's working memory, declared once by the caller while
// the vector state is clean (see doc.go).
type kState4 struct {
	tk  kTok4
	dx  [4]archsimd.Float32x8
	acc [8]archsimd.Float32x8
}

// kRow computes one output: the weight row at pb (n super-blocks of type
// typ, size bytes each) against the Q8_K row at py (scales pd, bsums
// pbs), storing the 8-lane accumulator a − m at acc.
func kRow(typ DType, acc *[8]float32, pb unsafe.Pointer, n, size int, py, pd, pbs unsafe.Pointer) {
	switch {
	case typ == Q4_K && level == levelAVX512:
		q4kRowAVX512(acc, pb, n, size, py, pd, pbs)
		return
	case typ == Q6_K && level == levelAVX512:
		q6kRow512(acc, pb, n, size, py, pd, pbs)
		return
	}
	var a, m archsimd.Float32x8
	for i := range n {
		x := unsafe.Add(pb, size*i)
		y, bs := unsafe.Add(py, QKK*i), unsafe.Add(pbs, 32*i)
		switch typ {
		case Q4_K:
			a, m = q4kStep(x, y, bs, bcast32(pd, i), a, m, nil)
		case Q5_K:
			a, m = q5kStep(x, y, bs, bcast32(pd, i), a, m, nil)
		case Q6_K:
			a = q6kStep(x, y, bs, bcast32(pd, i), a, nil)
		}
	}
	a.Sub(m).Store(acc)
}

// kRow2 is kRow for two activation rows, each output bitwise what kRow
// gives.
func kRow2(typ DType, acc, acc2 *[8]float32, pb unsafe.Pointer, n, size int, py, pd, pbs, py2, pd2, pbs2 unsafe.Pointer, v *[4]archsimd.Float32x8) {
	var z archsimd.Float32x8
	v[0], v[1], v[2], v[3] = z, z, z, z
	for i := range n {
		x := unsafe.Add(pb, size*i)
		y, bs := unsafe.Add(py, QKK*i), unsafe.Add(pbs, 32*i)
		y2, bs2 := unsafe.Add(py2, QKK*i), unsafe.Add(pbs2, 32*i)
		switch typ {
		case Q4_K:
			q4kStep2(x, y, bs, y2, bs2, bcast32(pd, i), bcast32(pd2, i), v, nil, nil)
		case Q5_K:
			q5kStep2(x, y, bs, y2, bs2, bcast32(pd, i), bcast32(pd2, i), v, nil, nil)
		case Q6_K:
			q6kStep2(x, y, bs, y2, bs2, bcast32(pd, i), bcast32(pd2, i), v, nil, nil)
		}
	}
	v[0].Sub(v[1]).Store(acc)
	v[2].Sub(v[3]).Store(acc2)
}

// matKQuantAVX2 computes rows [lo,hi) of a k-quant product for T Q8_K
// activation rows: four weight rows at a time (their horizontal sums
// folded together), two activation rows per pass over a weight row where
// there are two (the unpacked weights and scales serve both: prefill).
func matKQuantAVX2(out []float32, w *Mat, a q8kRows, lo, hi, T int) {
	if lo >= hi || T <= 0 {
		return
	}
	rows, cols := w.Rows, w.Cols
	rb, err := BlockRowBytes(w.Type, cols)
	_, size := blockGeom(w.Type)
	n := cols / QKK
	if err != nil || !isKQuant(w.Type) || lo < 0 || hi > rows || len(w.B) < hi*rb ||
		len(a.q) < T*cols || len(a.d) < T*n || len(a.bs) < T*cols/bsumsPer || len(out) < (T-1)*rows+hi {
		panic("kernels: k-quant product bounds")
	}
	typ := w.Type
	if typ == Q4_K && level == levelAVX512 && q4kAsm && q4kTakes(T) {
		q4kMat(out, w, a, lo, hi, T)
		return
	}
	pw, py, pd, pbs := unsafe.Pointer(&w.B[0]), unsafe.Pointer(&a.q[0]), unsafe.Pointer(&a.d[0]), unsafe.Pointer(&a.bs[0])
	if typ == Q6_K && useQ6KAsm() {
		matQ6KAsm(out, pw, py, pd, pbs, rb, rows, cols, lo, hi, T) // q6k512_amd64.go
		return
	}
	ds, bss := n*4, cols/bsumsPer*2 // bytes per activation row of d and bs
	// Declared while the vector state is clean (see doc.go).
	var acc, acc2 [4][8]float32
	var tile [4]float32
	var v [4]archsimd.Float32x8 // the two-row steps' accumulators
	var acc4 [4][4][8]float32   // [weight row][token]
	var st4 kState4
	for t0 := 0; t0 < T; t0 += tokenBlock {
		t1 := min(T, t0+tokenBlock)
		for r := lo; r < hi; r += 4 {
			w0, w1 := unsafe.Add(pw, r*rb), unsafe.Add(pw, min(r+1, hi-1)*rb)
			w2, w3 := unsafe.Add(pw, min(r+2, hi-1)*rb), unsafe.Add(pw, min(r+3, hi-1)*rb)
			for t := t0; t < t1; {
				yt, dt, bt := unsafe.Add(py, t*cols), unsafe.Add(pd, t*ds), unsafe.Add(pbs, t*bss)
				if (typ == Q4_K || typ == Q6_K) && t+4 <= t1 {
					// Four tokens per pass over four weight rows.
					kRow4(typ, &acc4[0], w0, n, size, yt, dt, bt, cols, &st4)
					kRow4(typ, &acc4[1], w1, n, size, yt, dt, bt, cols, &st4)
					kRow4(typ, &acc4[2], w2, n, size, yt, dt, bt, cols, &st4)
					kRow4(typ, &acc4[3], w3, n, size, yt, dt, bt, cols, &st4)
					for k := range 4 {
						storeCol(&acc4, k, out, (t+k)*rows+r, hi-r, &tile)
					}
					t += 4
					continue
				}
				if t+2 <= t1 {
					y2, d2, b2 := unsafe.Add(yt, cols), unsafe.Add(dt, ds), unsafe.Add(bt, bss)
					kRow2(typ, &acc[0], &acc2[0], w0, n, size, yt, dt, bt, y2, d2, b2, &v)
					kRow2(typ, &acc[1], &acc2[1], w1, n, size, yt, dt, bt, y2, d2, b2, &v)
					kRow2(typ, &acc[2], &acc2[2], w2, n, size, yt, dt, bt, y2, d2, b2, &v)
					kRow2(typ, &acc[3], &acc2[3], w3, n, size, yt, dt, bt, y2, d2, b2, &v)
					storeRows(&acc, out, t*rows+r, hi-r, &tile)
					storeRows(&acc2, out, (t+1)*rows+r, hi-r, &tile)
					t += 2
					continue
				}
				kRow(typ, &acc[0], w0, n, size, yt, dt, bt)
				kRow(typ, &acc[1], w1, n, size, yt, dt, bt)
				kRow(typ, &acc[2], w2, n, size, yt, dt, bt)
				kRow(typ, &acc[3], w3, n, size, yt, dt, bt)
				storeRows(&acc, out, t*rows+r, hi-r, &tile)
				t++
			}
		}
	}
	archsimd.ClearAVXUpperBits()
}
