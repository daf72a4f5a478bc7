//go:build !(goexperiment.simd && amd64)

package kernels

// Impl names the kernel set compiled in, for benchmark reports.
func Impl() string { return "portable" }

func matF32(out, w, x []float32, lo, hi, rows, cols, T int) {
	matF32Portable(out, w, x, lo, hi, rows, cols, T)
}

func matQ8B(out []float32, w *Mat, xq []int8, xs []float32, lo, hi, T int) {
	matQ8BPortable(out, w, xq, xs, lo, hi, T)
}

func dotF32(a, b []float32) float32 { return dotF32Portable(a, b) }

func axpyF32(a float32, x, y []float32) { axpyPortable(a, x, y) }

func dotStrided(out, q, m []float32, stride int) { dotStridedPortable(out, q, m, stride) }

func axpyStrided(a, m []float32, stride int, y []float32) { axpyStridedPortable(a, m, stride, y) }

func quantizeRows(x []float32, q []int8, s []float32) { quantizeRowsPortable(x, q, s) }

// kernelLevels and setKernelLevel let the tests run every compiled level.
func kernelLevels() []string { return []string{"portable"} }

func setKernelLevel(string) (restore func()) { return func() {} }

func divF32(x []float32, d float32) { divPortable(x, d) }

func swiglu(g, u []float32) { swigluPortable(g, u) }

func quantizeK(x []float32, q []int8, d []float32, bs []int16) { quantizeRowsKPortable(x, q, d, bs) }

func f32ToF16Row(dst []uint16, src []float32) { f32ToF16RowPortable(dst, src) }

func f16Fast() bool { return false }

func f16Decode(_ []float32, _ *Mat, _ []float32, _, _ int) bool { return false }

func f16Rows(dst []float32, dstride int, src []uint16, sstride, rows, width int) {
	f16RowsPortable(dst, dstride, src, sstride, rows, width)
}

func softmax(x []float32) { softmaxPortable(x) }

func dotStridedN(out []float32, ostride int, q []float32, qstride, hd, nq int, m []float32, stride, n int) {
	dotStridedNPortable(out, ostride, q, qstride, hd, nq, m, stride, n)
}

func axpyStridedN(a []float32, astride, n int, m []float32, stride int, y []float32, ystride, hd, nq int) {
	axpyStridedNPortable(a, astride, n, m, stride, y, ystride, hd, nq)
}

func matBlocksFast(_ []float32, _ *Mat, _ []int8, _ []float32, _, _, _ int) bool { return false }

func matKQuantFast(_ []float32, _ *Mat, _ q8kRows, _, _, _ int) bool { return false }
