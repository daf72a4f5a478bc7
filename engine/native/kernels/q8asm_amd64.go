//go:build goexperiment.simd && amd64

package kernels

// The Q8_0 × Q8_0 product of the AVX-512 level in Go assembly
// (q8asm_amd64.s): the same integer lanes and float order as matQ8AVX512
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
// (PREFETCHNEXT in the .s file) is what makes them faster there than the
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

// q8Dot4x1 stores at out[0..3] the products of weight rows w0..w3 (scales
// s0..s3, G groups each) with one activation row x (scales xs).
//
//go:noescape
func q8Dot4x1(w0, w1, w2, w3 *int8, s0, s1, s2, s3 *float32, x *int8, xs *float32, G int, out *float32)

// q8Dot4x4 is q8Dot4x1 for four activation rows at x + t*cols (scales
// xs + t*G), storing token t's four outputs at out + t*ostride bytes.
//
//go:noescape
func q8Dot4x4(w0, w1, w2, w3 *int8, s0, s1, s2, s3 *float32, x *int8, xs *float32, G, cols int, out *float32, ostride int)

// q8Dot4x2 is q8Dot4x4 for two activation rows.
//
//go:noescape
func q8Dot4x2(w0, w1, w2, w3 *int8, s0, s1, s2, s3 *float32, x *int8, xs *float32, G, cols int, out *float32, ostride int)

// q8SignGroupVNNI stores the sign-trick sums of one group computed with
// VPDPBUSD (a check for tests; needs AVX512_VNNI and VL).
//
//go:noescape
func q8SignGroupVNNI(w, x *[32]int8, out *[8]int32)

// q8Dot8x1 is q8Dot4x1 for eight consecutive rows from w (scales from s),
// storing out[0..7].
//
//go:noescape
func q8Dot8x1(w *int8, s *float32, x *int8, xs *float32, G, cols int, out *float32)

// q8Asm selects the assembly tiles at the AVX-512 level. Only tests and
// benchmarks clear it, to compare against the archsimd kernel.
var q8Asm = true

func matQ8AVX512Asm(out []float32, wq []int8, ws []float32, xq []int8, xs []float32, lo, hi, rows, cols, T int) {
	if lo >= hi || T <= 0 {
		return
	}
	checkMat(len(out), len(wq), len(xq), lo, hi, rows, cols, T)
	G := cols / QK
	if G <= 0 || len(ws) < hi*G || len(xs) < T*G {
		panic("kernels: Q8_0 scale bounds")
	}
	var tile [16]float32
	for t0 := 0; t0 < T; t0 += tokenBlock {
		t1 := min(T, t0+tokenBlock)
		r := lo
		if t1-t0 == 1 {
			for ; r+8 <= hi; r += 8 {
				q8Dot8x1(&wq[r*cols], &ws[r*G], &xq[t0*cols], &xs[t0*G], G, cols, &out[t0*rows+r])
			}
		}
		for ; r+4 <= hi; r += 4 {
			q8AsmRows(out[t0*rows+r:], rows*4, wq, ws, xq, xs, r, r+1, r+2, r+3, cols, G, t0, t1)
		}
		if r < hi {
			// Fewer than four rows left: the last row repeated, into a
			// scratch tile (each output's order is that of a full tile).
			r1, r2, r3 := min(r+1, hi-1), min(r+2, hi-1), min(r+3, hi-1)
			for t := t0; t < t1; t += 4 {
				q8AsmRows(tile[:], 16, wq, ws, xq, xs, r, r1, r2, r3, cols, G, t, min(t+4, t1))
				for k := range min(4, t1-t) {
					copy(out[(t+k)*rows+r:(t+k)*rows+hi], tile[4*k:4*k+hi-r])
				}
			}
		}
	}
}

// q8AsmRows runs tokens [t0,t1) against rows r0..r3, storing token t's
// four outputs at o[(t-t0)*ostride/4:], four tokens per tile, then two,
// then one. The caller has checked every bound the rows and tokens touch.
func q8AsmRows(o []float32, ostride int, wq []int8, ws []float32, xq []int8, xs []float32, r0, r1, r2, r3, cols, G, t0, t1 int) {
	w0, w1, w2, w3 := &wq[r0*cols], &wq[r1*cols], &wq[r2*cols], &wq[r3*cols]
	s0, s1, s2, s3 := &ws[r0*G], &ws[r1*G], &ws[r2*G], &ws[r3*G]
	_ = o[(t1-t0-1)*ostride/4+3]
	t := t0
	for ; t+4 <= t1; t += 4 {
		q8Dot4x4(w0, w1, w2, w3, s0, s1, s2, s3, &xq[t*cols], &xs[t*G], G, cols, &o[(t-t0)*ostride/4], ostride)
	}
	if t+2 <= t1 {
		q8Dot4x2(w0, w1, w2, w3, s0, s1, s2, s3, &xq[t*cols], &xs[t*G], G, cols, &o[(t-t0)*ostride/4], ostride)
		t += 2
	}
	if t < t1 {
		q8Dot4x1(w0, w1, w2, w3, s0, s1, s2, s3, &xq[t*cols], &xs[t*G], G, &o[(t-t0)*ostride/4])
	}
}
