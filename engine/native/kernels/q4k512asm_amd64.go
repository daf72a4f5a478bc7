//go:build goexperiment.simd && amd64

package kernels

import (
	"simd/archsimd"
	"unsafe"
)

// Q4_K × Q8_K at the AVX-512 level, in assembly (q4k512_amd64.s), in
// place of the archsimd kernels (q4kRow512, q4kStep4x512 and the Go loops
// around them) where the CPU has what it uses. The archsimd kernels hit
// the compiler's limits (16 vector registers, scalar scale decoding,
// accumulators passed through memory, a call per four rows); the
// assembly keeps accumulators and constants in 32 registers, decodes the
// scales with vector instructions, and loops over whole row ranges:
//
//   - decode (one token, q4kDecodeAVX512): four weight rows per pass, the
//     token's 256 activations of a super-block rearranged once per pass
//     so that one 64-byte weight load serves two j (its low nibbles are
//     sub-blocks 2j | 2j+2 against values 64j..64j+31 | 64j+64..64j+95,
//     its high nibbles 2j+1 | 2j+3); hsum4 and the store in assembly.
//   - prefill (q4kPrefill4AVX512): one weight row against eight tokens
//     per pass (the row's unpacked weights, scales and mins shared by
//     eight; eight [a | m] accumulators), four rows and up to tokenBlock
//     tokens per call.
//
// Bitwise the archsimd kernels' results (TestQ4KAsmMatchesArchsimd,
// FuzzQ4KAsm): per super-block each of the eight int32 lanes k holds
// Σ over the eight sub-blocks of sc·Σ_{bytes 4k..4k+3} q·y, as the
// archsimd kernels' folded lanes do. The integer sums are exact (a 4-value
// raw sum is at most 4·15·127 = 7620, an int16; the rest as in
// q8k_amd64.go), so the order in which the assembly adds them does not
// matter; from there the float work is the same: one conversion, an FMA
// with the same products d·dx and dmin·dx (float32 multiplies), a − m,
// hsum4's order. VPDPBUSD + pack + VPDPWSSD does the integer work in
// six multiply-port instructions per 256 values and output where
// VPMADDUBSW + VPDPWSSD took eight; on this machine (Zen 5, shared) the
// two measured the same (BenchmarkQ4KAsm).

// q4kAsm selects the assembly for Q4_K at the AVX-512 level, fixed at
// start-up like level. The assembly uses AVX512F, BW and VL and VPDPBUSD,
// VPDPWSSD (AVX512_VNNI); tests and benchmarks turn it off to compare with
// the archsimd kernels (TANDEM_NATIVE_KERNELS=avx2 picks a level below
// it).
var q4kAsm = avx512VNNI

// q4kRow1AVX512 is q4kRow512: one weight row at x (n super-blocks of 144
// bytes) against the Q8_K row at y (scales d, bsums bs); acc receives
// a − m. The caller has checked every bound.
//
//go:noescape
func q4kRow1AVX512(acc *[8]float32, x unsafe.Pointer, n int, y, d, bs unsafe.Pointer)

// q4kRow4AVX512 is q4kRow1AVX512 for four weight rows against one Q8_K
// row: acc[k] for the row at xk.
//
//go:noescape
func q4kRow4AVX512(acc *[4][8]float32, x0, x1, x2, x3 unsafe.Pointer, n int, y, d, bs unsafe.Pointer)

// q4kTok4AVX512 is kRow4 for Q4_K: one weight row at x against four
// Q8_K rows, token k's values at y + k·ys, scales at d + k·ds, bsums at
// bs + k·bss (bytes); acc[k] receives token k's a − m.
//
//go:noescape
func q4kTok4AVX512(acc *[4][8]float32, x unsafe.Pointer, n int, y, d, bs unsafe.Pointer, ys, ds, bss int)

// q4kTok8AVX512 is q4kTok4AVX512 for eight Q8_K rows.
//
//go:noescape
func q4kTok8AVX512(acc *[8][8]float32, x unsafe.Pointer, n int, y, d, bs unsafe.Pointer, ys, ds, bss int)

// q4kDecodeAVX512 computes groups·4 consecutive outputs of a one-token
// product: the weight rows at x, x+rb, ... (n super-blocks each, rb =
// 144·n bytes apart) against the Q8_K row at y (scales d, bsums bs),
// storing each group's four sums at out in hsum4's order (what
// storeRows stores). One call for a whole row range: a call per four rows
// (Go's loop, storeRows) cost a fifth of a product's time
// (BenchmarkQ4KAsm; docs/benchmarks/native.md).
//
//go:noescape
func q4kDecodeAVX512(out *float32, x unsafe.Pointer, rb, groups, n int, y, d, bs unsafe.Pointer)

// q4kTakes reports the token counts q4kMat handles: all but 4-7, which
// matKQuantAVX2's four-token rows (kRow4: q4kTok4AVX512) do in one pass
// over the weights.
func q4kTakes(T int) bool { return T < 4 || T >= 8 }

// q4kMat is matKQuantAVX2 for Q4_K at the AVX-512 level with the
// assembly: blocks of eight tokens through q4kPrefill, then the last
// T mod 8 tokens one at a time through q4kDecode (fewer than four) or
// through matKQuantAVX2 (four to seven). matKQuantAVX2 has checked the
// bounds.
func q4kMat(out []float32, w *Mat, a q8kRows, lo, hi, T int) {
	rows, cols := w.Rows, w.Cols
	n := cols / QKK
	T8 := T &^ 7
	if T8 > 0 {
		q4kPrefill(out, w, a, lo, hi, T8)
	}
	tok := func(t int) q8kRows {
		return q8kRows{q: a.q[t*cols:], d: a.d[t*n:], bs: a.bs[t*cols/bsumsPer:]}
	}
	if T-T8 >= 4 {
		matKQuantAVX2(out[T8*rows:], w, tok(T8), lo, hi, T-T8)
		return
	}
	for t := T8; t < T; t++ {
		q4kDecode(out[t*rows:], w.B, tok(t), lo, hi, n)
	}
}

// q4kDecode is matKQuantAVX2 for one Q4_K token at the AVX-512 level
// with the assembly: rows [lo,hi) of out from the weights at pw (rows
// rb bytes apart, n super-blocks) against the Q8_K row at py, pd, pbs.
// The caller has checked the bounds (matKQuantAVX2's panic); they are
// checked again here, for the assembly.
func q4kDecode(out []float32, w []byte, a q8kRows, lo, hi, n int) {
	rb := n * 144
	if lo < 0 || lo >= hi || len(out) < hi || len(w) < hi*rb || len(a.q) < n*QKK || len(a.d) < n || len(a.bs) < n*QKK/bsumsPer {
		panic("kernels: Q4_K decode bounds")
	}
	pw, py, pd, pbs := unsafe.Pointer(&w[0]), unsafe.Pointer(&a.q[0]), unsafe.Pointer(&a.d[0]), unsafe.Pointer(&a.bs[0])
	g := (hi - lo) / 4
	if g > 0 {
		q4kDecodeAVX512(&out[lo], unsafe.Add(pw, lo*rb), rb, g, n, py, pd, pbs)
	}
	if r := lo + 4*g; r < hi {
		// The last one to three rows: the last row repeated, as
		// matKQuantAVX2 does, and storeRows' partial store.
		var acc [4][8]float32
		var tile [4]float32
		row := func(k int) unsafe.Pointer { return unsafe.Add(pw, min(r+k, hi-1)*rb) }
		q4kRow4AVX512(&acc, row(0), row(1), row(2), row(3), n, py, pd, pbs)
		storeRows(&acc, out, r, hi-r, &tile)
		archsimd.ClearAVXUpperBits()
	}
}

// q4kPrefill4AVX512 computes four consecutive weight rows (at x, rb =
// 144·n bytes apart) against tblocks blocks of eight Q8_K rows (token k's
// values at y + k·ys, scales d + k·ds, bsums bs + k·bss, bytes; blocks
// follow one another), storing token k's four sums (hsum4's order) at
// out + k·ostride bytes. scratch holds a block's [a − m] per row and token
// until the four rows are done. Eight tokens per pass over a weight row:
// the row's unpacked weights, scales and mins (Z10-Z19) are shared by
// more tokens than four, and eight [a | m] accumulators still fit.
//
//go:noescape
func q4kPrefill4AVX512(out *float32, ostride int, x unsafe.Pointer, rb, n int, y unsafe.Pointer, ys int, d unsafe.Pointer, ds int, bs unsafe.Pointer, bss, tblocks int, scratch *[4][8][8]float32)

// q4kPrefill is q4kMat's T tokens, T a multiple of 8: per block of up to
// tokenBlock tokens, each group of four rows against the block's tokens
// eight at a time in one call; the last one to three rows through
// q4kTok8AVX512 and storeSums. Every output is what the one-token path
// gives, bitwise.
func q4kPrefill(out []float32, w *Mat, a q8kRows, lo, hi, T int) {
	rows, cols := w.Rows, w.Cols
	n := cols / QKK
	rb := n * 144
	if lo < 0 || lo >= hi || hi > rows || len(out) < (T-1)*rows+hi || len(w.B) < hi*rb ||
		len(a.q) < T*cols || len(a.d) < T*n || len(a.bs) < T*cols/bsumsPer {
		panic("kernels: Q4_K prefill bounds")
	}
	pw, py, pd, pbs := unsafe.Pointer(&w.B[0]), unsafe.Pointer(&a.q[0]), unsafe.Pointer(&a.d[0]), unsafe.Pointer(&a.bs[0])
	ds, bss := n*4, cols/bsumsPer*2
	T8 := T &^ 7 // T
	var scratch [4][8][8]float32
	var tile [4]float32
	for t0 := 0; t0 < T8; t0 += tokenBlock {
		tb := min(T8-t0, tokenBlock) / 8
		yt, dt, bt := unsafe.Add(py, t0*cols), unsafe.Add(pd, t0*ds), unsafe.Add(pbs, t0*bss)
		r := lo
		for ; r+4 <= hi; r += 4 {
			q4kPrefill4AVX512(&out[t0*rows+r], rows*4, unsafe.Add(pw, r*rb), rb, n, yt, cols, dt, ds, bt, bss, tb, &scratch)
		}
		if r == hi {
			continue
		}
		for b := range tb {
			t := t0 + 8*b
			yb, db, bb := unsafe.Add(py, t*cols), unsafe.Add(pd, t*ds), unsafe.Add(pbs, t*bss)
			for k := range 4 {
				q4kTok8AVX512(&scratch[k], unsafe.Add(pw, min(r+k, hi-1)*rb), n, yb, db, bb, cols, ds, bss)
			}
			for k := range 8 {
				storeSums(hsum4(archsimd.LoadFloat32x8(&scratch[0][k]), archsimd.LoadFloat32x8(&scratch[1][k]),
					archsimd.LoadFloat32x8(&scratch[2][k]), archsimd.LoadFloat32x8(&scratch[3][k])), out, (t+k)*rows+r, hi-r, &tile)
			}
		}
	}
	archsimd.ClearAVXUpperBits()
}

// q4kRowAVX512 is kRow's Q4_K path at the AVX-512 level.
func q4kRowAVX512(acc *[8]float32, pb unsafe.Pointer, n, size int, py, pd, pbs unsafe.Pointer) {
	if q4kAsm {
		q4kRow1AVX512(acc, pb, n, py, pd, pbs)
		return
	}
	q4kRow512(acc, pb, n, size, py, pd, pbs)
}
