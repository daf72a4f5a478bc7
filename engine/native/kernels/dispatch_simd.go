//go:build goexperiment.simd && amd64

package kernels

import (
	"os"
	"simd/archsimd"

	"golang.org/x/sys/cpu"
)

// Kernel levels of the simd build, best first.
const (
	levelPortable = iota
	levelAVX2
	levelAVX512
)

var levelNames = [...]string{"portable (simd build, no AVX2/FMA)", "archsimd-avx2", "archsimd-avx512"}

// level is fixed at start-up from the CPU's features: every product in a
// process must take the same path, or batched and single-token results
// would stop agreeing. TANDEM_NATIVE_KERNELS=avx2 (or portable) selects a
// lower level, to measure or test it on a machine that has a higher one.
var level = pickLevel(os.Getenv("TANDEM_NATIVE_KERNELS"))

// avx512VNNI is whether the CPU has what the Q4_K and Q6_K assembly uses
// (q4k512_amd64.s, q6k512_amd64.s): AVX512F, BW and VL, and AVX512_VNNI
// for VPDPBUSD and VPDPWSSD.
var avx512VNNI = cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512VNNI

func supported() int {
	switch {
	case archsimd.X86.AVX512() && archsimd.X86.FMA():
		return levelAVX512
	case archsimd.X86.AVX2() && archsimd.X86.FMA():
		return levelAVX2
	}
	return levelPortable
}

func pickLevel(want string) int {
	l := supported()
	switch want {
	case "avx2":
		return min(l, levelAVX2)
	case "portable":
		return levelPortable
	}
	return l
}

// Impl names the kernel set in use, for benchmark reports.
func Impl() string { return levelNames[level] }

func matF32(out, w, x []float32, lo, hi, rows, cols, T int) {
	switch level {
	case levelAVX512:
		matF32AVX512(out, w, x, lo, hi, rows, cols, T)
	case levelAVX2:
		matF32AVX2(out, w, x, lo, hi, rows, cols, T)
	default:
		matF32Portable(out, w, x, lo, hi, rows, cols, T)
	}
}

// matQ8B is the Q8_0 product: the AVX-512 level runs the assembly tiles
// (q8asm_amd64.s; with q8Asm cleared, matQ8BAVX512), the AVX2 level the sign-trick archsimd kernel
// (q8blocks_amd64.go), else the portable loops (q8blocks.go).
func matQ8B(out []float32, w *Mat, xq []int8, xs []float32, lo, hi, T int) {
	switch level {
	case levelAVX512:
		if q8Asm {
			matQ8BAVX512Asm(out, w, xq, xs, lo, hi, T)
		} else {
			matQ8BAVX512(out, w, xq, xs, lo, hi, T)
		}
	case levelAVX2:
		matQ8BSignAVX2(out, w, xq, xs, lo, hi, T)
	default:
		matQ8BPortable(out, w, xq, xs, lo, hi, T)
	}
}

func dotF32(a, b []float32) float32 {
	switch level {
	case levelAVX512:
		return dotF32AVX512(a, b)
	case levelAVX2:
		return dotF32AVX2(a, b)
	}
	return dotF32Portable(a, b)
}

func axpyF32(a float32, x, y []float32) {
	switch level {
	case levelAVX512:
		axpyAVX512(a, x, y)
	case levelAVX2:
		axpyAVX2(a, x, y)
	default:
		axpyPortable(a, x, y)
	}
}

func dotStrided(out, q, m []float32, stride int) {
	switch level {
	case levelAVX512:
		dotStridedAVX512(out, q, m, stride)
	case levelAVX2:
		dotStridedAVX2(out, q, m, stride)
	default:
		dotStridedPortable(out, q, m, stride)
	}
}

func axpyStrided(a, m []float32, stride int, y []float32) {
	switch level {
	case levelAVX512:
		axpyStridedAVX512(a, m, stride, y)
	case levelAVX2:
		axpyStridedAVX2(a, m, stride, y)
	default:
		axpyStridedPortable(a, m, stride, y)
	}
}

func quantizeRows(x []float32, q []int8, s []float32) {
	if level == levelAVX512 {
		quantizeRowsAVX512(x, q, s)
		return
	}
	quantizeRowsPortable(x, q, s)
}

// kernelLevels and setKernelLevel let the tests run every level this CPU
// supports; nothing else may change the level after start-up.
func kernelLevels() []string {
	var out []string
	for l := supported(); l >= levelPortable; l-- {
		out = append(out, [...]string{"portable", "avx2", "avx512"}[l])
	}
	return out
}

func setKernelLevel(name string) (restore func()) {
	old := level
	level = pickLevel(name)
	return func() { level = old }
}

func f16Fast() bool { return level == levelAVX512 }

// f16Decode runs the one-token F16 assembly (f16asm_amd64.go) at the
// AVX-512 level; false leaves the product to matF16's buffer path.
func f16Decode(out []float32, w *Mat, x []float32, lo, hi int) bool {
	return level == levelAVX512 && matF16DecodeAsm(out, w, x, lo, hi)
}

func f16Rows(dst []float32, dstride int, src []uint16, sstride, rows, width int) {
	if level == levelAVX512 {
		f16RowsAVX512(dst, dstride, src, sstride, rows, width)
		return
	}
	f16RowsPortable(dst, dstride, src, sstride, rows, width)
}

func f32ToF16Row(dst []uint16, src []float32) {
	if level == levelAVX512 {
		f32ToF16AVX512(dst, src)
		return
	}
	f32ToF16RowPortable(dst, src)
}

func quantizeK(x []float32, q []int8, d []float32, bs []int16) {
	if level == levelAVX512 {
		quantizeRowsKAVX512(x, q, d, bs)
		return
	}
	quantizeRowsKPortable(x, q, d, bs)
}

func swiglu(g, u []float32) {
	if level == levelAVX512 {
		swigluAVX512(g, u)
		return
	}
	swigluPortable(g, u)
}

func divF32(x []float32, d float32) {
	if level == levelAVX512 {
		divAVX512(x, d)
		return
	}
	divPortable(x, d)
}

func softmax(x []float32) {
	if level == levelAVX512 {
		softmaxAVX512(x)
		return
	}
	softmaxPortable(x)
}

func dotStridedN(out []float32, ostride int, q []float32, qstride, hd, nq int, m []float32, stride, n int) {
	if level == levelAVX512 {
		dotStridedNAVX512(out, ostride, q, qstride, hd, nq, m, stride, n)
		return
	}
	if level == levelPortable {
		dotStridedNPortable(out, ostride, q, qstride, hd, nq, m, stride, n)
		return
	}
	dotStridedNLoop(out, ostride, q, qstride, hd, nq, m, stride, n)
}

func axpyStridedN(a []float32, astride, n int, m []float32, stride int, y []float32, ystride, hd, nq int) {
	if level == levelAVX512 {
		axpyStridedNAVX512(a, astride, n, m, stride, y, ystride, hd, nq)
		return
	}
	if level == levelPortable {
		axpyStridedNPortable(a, astride, n, m, stride, y, ystride, hd, nq)
		return
	}
	axpyStridedNLoop(a, astride, n, m, stride, y, ystride, hd, nq)
}

// matBlocksFast runs the AVX2 Q4_0 kernel (blocks_amd64.go) at the AVX2
// and AVX-512 levels; false leaves the product to the portable loops.
func matBlocksFast(out []float32, w *Mat, xq []int8, xs []float32, lo, hi, T int) bool {
	if level < levelAVX2 {
		return false
	}
	matBlocksAVX2(out, w, xq, xs, lo, hi, T)
	return true
}

// matKQuantFast runs the k-quant × Q8_K kernels (q8k_amd64.go; at the
// AVX-512 level with the 512-bit four-token steps of q8k512_amd64.go) at
// the AVX2 and AVX-512 levels; false leaves the product to the portable
// loops.
func matKQuantFast(out []float32, w *Mat, a q8kRows, lo, hi, T int) bool {
	if level < levelAVX2 {
		return false
	}
	matKQuantAVX2(out, w, a, lo, hi, T)
	return true
}
