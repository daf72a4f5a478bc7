//go:build goexperiment.simd && amd64

package kernels

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// Q4_K × Q8_K at the AVX-512 level, in assembly (q4k512_amd64.s): the
// one-token row (decode) and the four-token row (prefill) that replace
// q4kRow512 and q4kStep4x512 where the CPU has what they use. The
// archsimd kernels hit the compiler's limits (16 vector registers, scalar
// scale decoding, accumulators passed through memory); the assembly keeps
// every accumulator and constant in registers and decodes the scales in
// general registers.
//
// Bitwise the archsimd kernels' results (TestQ4KAsmMatchesArchsimd): the
// same int32 lanes per super-block (VPMADDUBSW, then the scales by
// VPDPWSSD, which is VPMADDWD and VPADDD in one instruction; the sums are
// exact, the ranges in q8k_amd64.go), the same conversions and the same
// FMAs with the same scale products d·dx and dmin·dx, the same a − m.

// q4kAsm selects the assembly for Q4_K at the AVX-512 level. The
// assembly uses AVX512F, BW and VL and VPDPWSSD (AVX512_VNNI); tests and
// benchmarks turn it off to compare with the archsimd kernels.
var q4kAsm = cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512VNNI

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

// q4kRowAVX512 is kRow's Q4_K path at the AVX-512 level.
func q4kRowAVX512(acc *[8]float32, pb unsafe.Pointer, n, size int, py, pd, pbs unsafe.Pointer) {
	if q4kAsm {
		q4kRow1AVX512(acc, pb, n, py, pd, pbs)
		return
	}
	q4kRow512(acc, pb, n, size, py, pd, pbs)
}
