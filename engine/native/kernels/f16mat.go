package kernels

// F16 weight matrices. An F16 GGUF file's matrices used to be widened to
// F32 at load: twice the resident memory, a copy of the whole file before
// the first token, and decode, which streams every weight once per token,
// reading twice the bytes (about half llama.cpp's decode rate on the same
// F16 file: docs/benchmarks/native.md). Kept as halves, the
// matrix is widened f16Tile rows at a time into a per-thread buffer that
// stays in L1 and multiplied there by the fp32 kernel of the level. So
// every output is bitwise the fp32 product of the widened weights (the
// widening is exact), whatever T, row range or thread split, and the same
// as the old widened-at-load matrix gave.

// f16Tile is how many weight rows are widened per fp32 product: 4 rows of
// 2048 columns are 32 KiB of fp32, within L1, and a whole 4-row tile of
// the fp32 kernels.
const f16Tile = 4

// NativeF16 reports whether F16 matrices should stay halves: at the levels
// with a vector widening (F16ToF32Rows). Elsewhere the loaders widen them
// to F32 once, as the per-product widening would cost more than the bytes
// it saves.
func NativeF16() bool { return f16Fast() }

// Widened returns an F16 matrix as an F32 one (anything else as it is).
func (m *Mat) Widened() *Mat {
	if m.Type != F16 {
		return m
	}
	w := &Mat{Type: F32, Rows: m.Rows, Cols: m.Cols, F: NewF32(m.Rows * m.Cols)}
	F16ToF32Rows(w.F, m.Cols, m.H, m.Cols, m.Rows, m.Cols)
	return w
}

// matF16 computes rows [lo,hi) of an F16 product for T activation rows,
// buf holding f16Tile·Cols floats. One token goes to the level's direct
// kernel where there is one (f16asm_amd64.go: decode streams the weights
// once, and the buffer's store and reload cost it a third of its speed).
func matF16(out []float32, w *Mat, x []float32, lo, hi, T int, buf []float32) {
	if T == 1 && f16Decode(out, w, x, lo, hi) {
		return
	}
	cols := w.Cols
	for r := lo; r < hi; r += f16Tile {
		n := min(f16Tile, hi-r)
		F16ToF32Rows(buf, cols, w.H[r*cols:(r+n)*cols], cols, n, cols)
		// out[r:] puts row r's outputs where the fp32 kernel's row 0 goes;
		// token t's stay w.Rows apart.
		matF32(out[r:], buf[:n*cols], x, 0, n, w.Rows, cols, T)
	}
}
