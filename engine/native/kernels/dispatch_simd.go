//go:build goexperiment.simd && amd64

package kernels

import "simd/archsimd"

// useAVX2 is fixed at start-up: every product in a process must take the
// same path, or batched and single-token results would stop agreeing.
var useAVX2 = archsimd.X86.AVX2() && archsimd.X86.FMA()

// Impl names the kernel set in use, for benchmark reports.
func Impl() string {
	if useAVX2 {
		return "archsimd-avx2"
	}
	return "portable (simd build, no AVX2/FMA)"
}

func matF32(out, w, x []float32, lo, hi, rows, cols, T int) {
	if useAVX2 {
		matF32AVX2(out, w, x, lo, hi, rows, cols, T)
		return
	}
	matF32Portable(out, w, x, lo, hi, rows, cols, T)
}

func matQ8(out []float32, wq []int8, ws []float32, xq []int8, xs []float32, lo, hi, rows, cols, T int) {
	if useAVX2 {
		matQ8AVX2(out, wq, ws, xq, xs, lo, hi, rows, cols, T)
		return
	}
	matQ8Portable(out, wq, ws, xq, xs, lo, hi, rows, cols, T)
}

func dotF32(a, b []float32) float32 {
	if useAVX2 {
		return dotF32AVX2(a, b)
	}
	return dotF32Portable(a, b)
}
