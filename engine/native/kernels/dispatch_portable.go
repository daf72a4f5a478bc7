//go:build !(goexperiment.simd && amd64)

package kernels

// Impl names the kernel set compiled in, for benchmark reports.
func Impl() string { return "portable" }

func matF32(out, w, x []float32, lo, hi, rows, cols, T int) {
	matF32Portable(out, w, x, lo, hi, rows, cols, T)
}

func matQ8(out []float32, wq []int8, ws []float32, xq []int8, xs []float32, lo, hi, rows, cols, T int) {
	matQ8Portable(out, wq, ws, xq, xs, lo, hi, rows, cols, T)
}

func dotF32(a, b []float32) float32 { return dotF32Portable(a, b) }
