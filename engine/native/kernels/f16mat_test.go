package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestF16MatMatchesWidened: at every level, an F16 product is bitwise the
// fp32 product of the widened matrix, for T = 1..9 and 70, row counts with
// partial tiles, alone, fused with other products (MatMulMulti) and in
// MatMulSwiGLU, on one and three threads.
func TestF16MatMatchesWidened(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	half := func(rows, cols int) *Mat {
		m := &Mat{Type: F16, Rows: rows, Cols: cols, H: make([]uint16, rows*cols)}
		for i := range m.H {
			m.H[i] = F32ToF16(float32(r.NormFloat64() * 0.1))
		}
		m.H[0], m.H[len(m.H)-1] = 0x7bff, 0x0001 // 65504 and the smallest subnormal
		return m
	}
	for _, lv := range kernelLevels() {
		t.Run(lv, func(t *testing.T) {
			defer setKernelLevel(lv)()
			for _, threads := range []int{1, 3} {
				p := NewPool(threads)
				var sc Scratch
				for _, sh := range []struct{ rows, cols int }{{1, 16}, {7, 48}, {37, 100}, {64, 256}} {
					for _, T := range []int{1, 2, 3, 4, 5, 9, 70} {
						t.Run(fmt.Sprintf("%dT/%dx%d/T%d", threads, sh.rows, sh.cols, T), func(t *testing.T) {
							h := half(sh.rows, sh.cols)
							f := h.Widened()
							x := randVec(r, T*sh.cols)
							got, want := make([]float32, T*sh.rows), make([]float32, T*sh.rows)
							p.MatMul(got, h, x, T, &sc)
							p.MatMul(want, f, x, T, &sc)
							checkBits(t, "MatMul", got, want)
							other := half(5, sh.cols)
							g2, w2 := make([]float32, T*5), make([]float32, T*5)
							p.MatMulMulti([]Prod{{got, h}, {g2, other}}, x, T, &sc)
							p.MatMulMulti([]Prod{{want, f}, {w2, other.Widened()}}, x, T, &sc)
							checkBits(t, "MatMulMulti", got, want)
							checkBits(t, "MatMulMulti second", g2, w2)
							up := half(sh.rows, sh.cols)
							u1, u2 := make([]float32, T*sh.rows), make([]float32, T*sh.rows)
							p.MatMulSwiGLU(got, u1, h, up, x, T, &sc)
							p.MatMulSwiGLU(want, u2, f, up.Widened(), x, T, &sc)
							checkBits(t, "MatMulSwiGLU", got, want)
						})
					}
				}
				p.Close()
			}
		})
	}
}

func checkBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: output %d = %g, widened %g", what, i, got[i], want[i])
		}
	}
}

// TestF16MatValidate: an F16 matrix whose halves do not match its shape
// is refused, and Row and Bytes read the halves.
func TestF16MatValidate(t *testing.T) {
	m := &Mat{Type: F16, Rows: 2, Cols: 3, H: []uint16{0x3c00, 0x4000, 0xc000, 0, 0x3800, 0x7bff}}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	row := make([]float32, 3)
	m.Row(row, 1)
	if row[0] != 0 || row[1] != 0.5 || row[2] != 65504 || m.Bytes() != 12 {
		t.Fatalf("row %v, bytes %d", row, m.Bytes())
	}
	m.H = m.H[:5]
	if err := m.Validate(); err == nil {
		t.Fatal("a short F16 matrix was accepted")
	}
}
