package kernels

// F16 weight matrices. An F16 GGUF file's matrices used to be widened to
// F32 at load: twice the resident memory, a copy of the whole file before
// the first token, and decode, which streams every weight once per token,
// reading twice the bytes (110M shape, one thread: 45.9 tok/s against
// llama.cpp's 87.3 on the same F16 file, 2026-12-05). Kept as halves, the
// matrix is widened f16Tile rows at a time into a per-thread buffer that
// stays in L1 and multiplied there by the fp32 kernel of the level. So
// every output is bitwise the fp32 product of the widened weights (the
// widening is exact), whatever T, row range or thread split, and the same
// as the old widened-at-load matrix gave.

// f16Tile is how many weight rows are widened per fp32 product: 4 rows of
// 2048 columns are 32 KiB of fp32, within L1, and a whole 4-row tile of
// the fp32 kernels.
const f16Tile = 4

// f16DecodeTile is f16Tile for one token where the assembly of the
// AVX-512 level (f16asm_amd64.go, which streams 22-24 GB/s against this
// path's 14-17) does not apply, where the product streams the
// weights from memory once: 2 rows per fp32 call measured fastest (110M
// F16 decode, one thread, tok/s: 1 row 48-51, 2 rows 59-65, 4 rows 55-65,
// 8 rows 33-41, 16 rows 34-35; 2026-12-05; why larger tiles lose was not
// traced). Each row's result is the same whatever the tile: the fp32
// kernels reduce each row on its own. Widening in registers straight into
// the fp32 tile's FMAs (no buffer) measured slower still: 39-43.
const f16DecodeTile = 2

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
// buf holding f16Tile·Cols floats.
func matF16(out []float32, w *Mat, x []float32, lo, hi, T int, buf []float32) {
	cols, tile := w.Cols, f16Tile
	if T == 1 {
		if f16Decode(out, w, x, lo, hi) {
			return
		}
		tile = f16DecodeTile
	}
	for r := lo; r < hi; r += tile {
		n := min(tile, hi-r)
		F16ToF32Rows(buf, cols, w.H[r*cols:(r+n)*cols], cols, n, cols)
		// out[r:] puts row r's outputs where the fp32 kernel's row 0 goes;
		// token t's stay w.Rows apart.
		matF32(out[r:], buf[:n*cols], x, 0, n, w.Rows, cols, T)
	}
}
