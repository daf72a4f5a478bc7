//go:build goexperiment.simd && amd64

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// f16AsmHalves fills n halves: normal values mixed with the extremes
// (±65504, the smallest and largest subnormals, ±0) and, where cancel is
// set, pairs of equal and opposite large weights so products cancel.
func f16AsmHalves(r *rand.Rand, n int, extreme bool) []uint16 {
	h := make([]uint16, n)
	special := []uint16{0x7bff, 0xfbff, 0x0001, 0x8001, 0x03ff, 0x83ff, 0x0000, 0x8000, 0x0400, 0x3c00}
	for i := range h {
		switch {
		case extreme && r.IntN(4) == 0:
			h[i] = special[r.IntN(len(special))]
		case extreme && r.IntN(8) == 0 && i > 0:
			h[i] = h[i-1] ^ 0x8000 // cancels the previous product when x repeats
		default:
			h[i] = F32ToF16(float32(r.NormFloat64() * 0.1))
		}
	}
	return h
}

func f16AsmCase(r *rand.Rand, rows, cols int, extreme bool) (*Mat, []float32) {
	w := &Mat{Type: F16, Rows: rows, Cols: cols, H: f16AsmHalves(r, rows*cols, extreme)}
	x := randVec(r, cols)
	if extreme {
		for i := range x {
			switch r.IntN(6) {
			case 0:
				x[i] = 1e30 * float32(r.NormFloat64())
			case 1:
				x[i] = 1e-30 * float32(r.NormFloat64())
			case 2:
				if i > 0 {
					x[i] = x[i-1]
				}
			}
		}
	}
	return w, x
}

// f16AsmCheck compares rows [lo,hi) of the assembly against the buffer
// path bitwise.
func f16AsmCheck(t *testing.T, w *Mat, x []float32, lo, hi int) {
	t.Helper()
	buf := make([]float32, f16Tile*w.Cols)
	got, want := make([]float32, w.Rows), make([]float32, w.Rows)
	f16Asm = false
	matF16(want, w, x, lo, hi, 1, buf)
	f16Asm = true
	if !matF16DecodeAsm(got, w, x, lo, hi) {
		t.Fatalf("%dx%d: assembly path not taken", w.Rows, w.Cols)
	}
	for i := lo; i < hi; i++ {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%dx%d rows [%d,%d): row %d = %g (%#x), buffer path %g (%#x)", w.Rows, w.Cols, lo, hi, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
		}
	}
}

// TestF16AsmBitwise: the one-token F16 assembly gives bitwise the buffer
// path's outputs (the fp32 product of the widened rows) for every row
// count 1..37 (tails of the 8- and 4-row tiles), row ranges not starting at 0,
// widths 16..4096, with extreme halves and activations.
func TestF16AsmBitwise(t *testing.T) {
	if supported() < levelAVX512 || !f16AsmOK {
		t.Skip("no AVX-512")
	}
	defer setKernelLevel("avx512")()
	r := rand.New(rand.NewPCG(21, 16))
	for _, cols := range []int{16, 32, 48, 112, 768, 1024, 4096} {
		for rows := 1; rows <= 37; rows++ {
			if cols == 4096 && rows > 9 {
				break
			}
			for _, extreme := range []bool{false, true} {
				w, x := f16AsmCase(r, rows, cols, extreme)
				f16AsmCheck(t, w, x, 0, rows)
				if rows > 2 {
					f16AsmCheck(t, w, x, 1, rows-1)
				}
			}
		}
	}
	// Widths that are not a multiple of 16 keep the buffer path.
	w, x := f16AsmCase(r, 5, 40, false)
	if matF16DecodeAsm(make([]float32, 5), w, x, 0, 5) {
		t.Fatal("a 40-column matrix took the assembly")
	}
}

// FuzzF16Asm compares the assembly with the buffer path on arbitrary
// halves.
func FuzzF16Asm(f *testing.F) {
	if supported() < levelAVX512 || !f16AsmOK {
		f.Skip("no AVX-512")
	}
	f.Add([]byte{0xff, 0x7b, 0x01, 0x00, 0x00, 0x80}, uint8(3), uint64(1))
	f.Fuzz(func(t *testing.T, b []byte, rows uint8, seed uint64) {
		defer setKernelLevel("avx512")()
		nr := int(rows%9) + 1
		cols := 16 * (len(b)%5 + 1)
		r := rand.New(rand.NewPCG(seed, 7))
		w, x := f16AsmCase(r, nr, cols, true)
		for i := range w.H {
			if len(b) > 1 {
				w.H[i] = uint16(b[(2*i)%len(b)]) | uint16(b[(2*i+1)%len(b)])<<8
			}
			if w.H[i]&0x7c00 == 0x7c00 {
				w.H[i] &^= 0x4000 // no infinities or NaN: they widen differently
			}
		}
		f16AsmCheck(t, w, x, 0, nr)
	})
}

// BenchmarkF16AsmDecode times one-token F16 products streaming their
// weights from DRAM, as decode does: several matrices of more than the L3
// in all, one product per matrix in turn, the buffer path and the
// assembly alternating on different matrices. asm-ratio is the buffer
// path's wall time over the assembly's; GB/s are weight bytes per second.
func BenchmarkF16AsmDecode(b *testing.B) {
	if supported() < levelAVX512 || !f16AsmOK {
		b.Skip("no AVX-512")
	}
	defer setKernelLevel("avx512")()
	for _, sh := range []struct{ rows, cols, n int }{{32000, 768, 4}, {151936, 1024, 2}, {2048, 768, 128}, {3072, 1024, 64}, {1024, 3072, 64}} {
		b.Run(fmt.Sprintf("%dx%d", sh.rows, sh.cols), func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 1))
			var ms []*Mat
			for range sh.n {
				m := &Mat{Type: F16, Rows: sh.rows, Cols: sh.cols, H: make([]uint16, sh.rows*sh.cols)}
				for i := range m.H {
					m.H[i] = uint16(r.Uint32()) &^ 0x4000
				}
				ms = append(ms, m)
			}
			x := randVec(r, sh.cols)
			out := make([]float32, sh.rows)
			buf := make([]float32, f16Tile*sh.cols)
			defer func() { f16Asm = true }()
			var tb, ta time.Duration
			i := 0
			for b.Loop() {
				w := ms[i%len(ms)]
				s := time.Now()
				f16Asm = false
				matF16(out, w, x, 0, sh.rows, 1, buf)
				f16Asm = true
				w = ms[(i+1)%len(ms)]
				m := time.Now()
				matF16(out, w, x, 0, sh.rows, 1, buf)
				e := time.Now()
				i += 3 // odd and even matrices swap paths each round
				tb += m.Sub(s)
				ta += e.Sub(m)
			}
			bytes := float64(2*sh.rows*sh.cols) * float64(b.N)
			b.ReportMetric(float64(tb)/float64(ta), "asm-ratio")
			b.ReportMetric(bytes/float64(tb.Nanoseconds()), "buf-GB/s")
			b.ReportMetric(bytes/float64(ta.Nanoseconds()), "asm-GB/s")
		})
	}
}
