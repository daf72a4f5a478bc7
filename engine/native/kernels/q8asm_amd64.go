//go:build goexperiment.simd && amd64

package kernels

// The Q8_0 × Q8_0 product of the AVX-512 level in Go assembly
// (q8asm_amd64.s): the integer lanes and float order of matQ8BAVX512
// (simd512_amd64.go), so every output is bitwise what the archsimd kernel
// gives, which TestQ8AsmBitwise checks. What the assembly buys over the
// archsimd code is registers: 32 vector registers instead of the 16 Go's
// allocator uses, so four weight rows × four tokens (16 accumulators, four
// sign-extended activation rows, one weight row, four products) share each
// weight and activation load in prefill, and the scale products are
// broadcast from memory by the FMA itself instead of through the compiled
// scale tables.
//
// Tiles: 4 rows × 4 tokens (prefill), then 4 × 2 and 4 × 1 for the last
// tokens; decode (one token) runs 8 × 1, then 4 × 1 for the last rows.
// 8 × 1 over 4 × 1 halves the per-tile costs (call, scale setup,
// horizontal sums: a 768-column row is only 24 groups) and shares each
// activation extension over twice the rows, which widened its lead over
// the archsimd kernel with the weights in cache (BenchmarkQ8Kernels/T1)
// and kept it from DRAM (BenchmarkQ8AsmDecode). The 4 × 4 group step is 4
// activation and 4 weight sign-extensions and 16 × (VPMADDWD, VCVTDQ2PS,
// FMA), about one cycle per row·token·group with the data in cache (our
// reading, not traced: VPMADDWD and the FMA both need a multiply pipe).
// Wider tiles would only save a few extensions and were not tried
// (docs/benchmarks/native.md, "Kernel design figures", has the figures).
// The one-token tiles are bound by memory in decode (each weight read once
// per token from DRAM); their next-tile prefetch
// (PREFETCHT0 in the group loops of the .s file) is what makes them faster there than the
// archsimd kernel (BenchmarkQ8AsmDecode).
//
// A cheaper scheme exists but would change the level's order: VPDPBUSD
// (AVX512_VNNI) with the sign trick makes four-value sums, two groups per
// zmm, one multiply-pipe instruction per two groups where VPMADDWD needs
// one per group (TestQ8SignGroupVNNI checks its lanes). Using it means new
// lanes (8 per group) for every Q8_0 path of the AVX-512 level.
//
// It uses AVX-512 F and BW (VPMOVSXBW, VPMADDWD on zmm) and VL (EVEX
// encodings of the ymm/xmm folds), all implied by the AVX-512 level
// (archsimd.X86.AVX512 needs F, CD, BW, DQ and VL).

// q8SignGroupVNNI stores the sign-trick sums of one group computed with
// VPDPBUSD (a check for tests; needs AVX512_VNNI and VL).
//
//go:noescape
func q8SignGroupVNNI(w, x *[32]int8, out *[8]int32)

// The tiles read block rows (w0..w3, or w and its row stride rb): each
// group's quants at block+2, the weight pointers stepping 34 bytes a
// group. The four-row tiles, which run in prefill (a tile's scales serve
// every token of the batch), take the rows' scales widened to fp32 once
// per tile and batch (q8BScales, into a buffer of the call); the eight-row
// one-token tile of decode gathers each chunk's 16 fp16 scales of a row
// from its blocks itself (VPGATHERDD at a 34-byte stride) and widens them
// (VCVTPH2PS). The widening is exact, so the order is the one above.

// q8BDot4x1 stores at out[0..3] the products of block rows w0..w3 (their
// scales widened at s0..s3, G groups each) with one activation row x
// (scales xs).

//go:noescape
func q8BDot4x1(w0, w1, w2, w3 *byte, s0, s1, s2, s3 *float32, x *int8, xs *float32, G int, out *float32)

// q8BDot4x2 is q8BDot4x4 for two activation rows.
//
//go:noescape
func q8BDot4x2(w0, w1, w2, w3 *byte, s0, s1, s2, s3 *float32, x *int8, xs *float32, G, cols int, out *float32, ostride int)

// q8BDot4x4 is q8BDot4x1 for four activation rows at x + t*cols (scales
// xs + t*G), storing token t's four outputs at out + t*ostride bytes.
//
//go:noescape
func q8BDot4x4(w0, w1, w2, w3 *byte, s0, s1, s2, s3 *float32, x *int8, xs *float32, G, cols int, out *float32, ostride int)

// q8BDot8x1 is q8BDot4x1 for eight consecutive block rows from w, rb
// bytes apart, gathering their scales itself, storing out[0..7].
//
//go:noescape
func q8BDot8x1(w *byte, x *int8, xs *float32, G, rb int, out *float32)

// q8BScales sets s[0:G] to the scales of the G blocks at w, widened.
//
//go:noescape
func q8BScales(w *byte, G int, s *float32)

// q8Asm selects the assembly tiles at the AVX-512 level. Only tests and
// benchmarks clear it, to compare against the archsimd kernel.
var q8Asm = true

// q8BStackGroups is how many groups per row the four-row tiles' scale
// buffer holds on the stack (32,768 columns); wider rows allocate it.
const q8BStackGroups = 1024

// matQ8BAVX512Asm is the Q8_0 product of the AVX-512 level: per token
// block, one-token decode runs 8 × 1 tiles, then 4-row tiles of 4, 2 and
// 1 tokens; fewer than four rows left are a tile with the last row
// repeated, into a scratch tile.
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

// q8BAsmRows runs tokens [t0,t1) against block rows r0..r3 of rb bytes,
// their scales widened into sc (4·G values) first, storing token t's four
// outputs at o[(t-t0)*ostride/4:], four tokens per tile, then two, then
// one. The caller has checked every bound the rows and tokens touch.
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
