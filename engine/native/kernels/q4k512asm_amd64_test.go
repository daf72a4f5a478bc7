//go:build goexperiment.simd && amd64

package kernels

import (
	"fmt"
	"math/rand/v2"
	"os"
	"simd/archsimd"
	"strconv"
	"testing"
	"time"
	"unsafe"
)

// q4kFill is how a test fills Q4_K weights and Q8_K activations.
type q4kFill int

const (
	fillRandom  q4kFill = iota // random bytes (finite d, dmin), random activations
	fillMaxPos                 // every weight byte 0xFF but d, dmin = 65504; activations +127
	fillMaxNeg                 // as fillMaxPos, activations −127
	fillMixed                  // random weights with 0xFF scale bytes; activations ±127
	fillNegHalf                // d, dmin negative halves, small and subnormal
)

// q4kCase builds rows Q4_K weight rows of n super-blocks and T Q8_K
// activation rows (bsums consistent with the values, as quantizeSuperK
// writes them; activations in [−127, 127]).
func q4kCase(r *rand.Rand, fill q4kFill, rows, n, T int) (*Mat, q8kRows) {
	cols := n * QKK
	rb := n * 144
	w := &Mat{Type: Q4_K, Rows: rows, Cols: cols, B: make([]byte, rows*rb)}
	for i := range w.B {
		w.B[i] = byte(r.IntN(256))
	}
	for b := 0; b < rows*n; b++ {
		x := w.B[144*b : 144*(b+1)]
		for _, o := range []int{0, 2} {
			h := uint16(x[o]) | uint16(x[o+1])<<8
			switch fill {
			case fillMaxPos, fillMaxNeg:
				h = 0x7BFF // 65504, the largest finite half
			case fillNegHalf:
				h = 0x8000 | h&0x03FF | uint16(r.IntN(2))<<10 // subnormal or the smallest normals
			default:
				if h&0x7C00 == 0x7C00 {
					h &^= 0x4000 // no infinities or NaNs
				}
			}
			x[o], x[o+1] = byte(h), byte(h>>8)
		}
		switch fill {
		case fillMaxPos, fillMaxNeg:
			for i := 4; i < 144; i++ {
				x[i] = 0xFF
			}
		case fillMixed:
			for i := 4; i < 16; i++ {
				x[i] = 0xFF
			}
		}
	}
	a := q8kRows{q: make([]int8, T*cols), d: make([]float32, T*n), bs: make([]int16, T*cols/bsumsPer)}
	for i := range a.q {
		switch fill {
		case fillMaxPos:
			a.q[i] = 127
		case fillMaxNeg:
			a.q[i] = -127
		case fillMixed:
			a.q[i] = int8(127 * (1 - 2*r.IntN(2)))
		default:
			a.q[i] = int8(r.IntN(255) - 127)
		}
	}
	for i := range a.d {
		a.d[i] = float32(r.NormFloat64() * 0.01)
		if fill == fillMaxPos || fill == fillMaxNeg {
			a.d[i] = 1e30 // products overflow: Inf and NaN must agree too
		}
	}
	for k := range a.bs {
		var s int16
		for _, v := range a.q[16*k : 16*k+16] {
			s += int16(v)
		}
		a.bs[k] = s
	}
	return w, a
}

var q4kFills = []q4kFill{fillRandom, fillMaxPos, fillMaxNeg, fillMixed, fillNegHalf}

// TestQ4KAsmMatchesArchsimd: the assembly's 8-lane accumulators (one row,
// four rows, four tokens) are bitwise the archsimd kernels' (q4kRow512,
// kRow4 with q4kStep4x512), and whole products are bitwise equal for
// every row count, token count and row range.
func TestQ4KAsmMatchesArchsimd(t *testing.T) {
	if level != levelAVX512 || !q4kAsm {
		t.Skip("no AVX-512 assembly level")
	}
	r := rand.New(rand.NewPCG(41, 42))
	for _, fill := range q4kFills {
		for n := 1; n <= 12; n++ {
			w, a := q4kCase(r, fill, 4, n, 4)
			cols := n * QKK
			pw, py, pd, pbs := unsafe.Pointer(&w.B[0]), unsafe.Pointer(&a.q[0]), unsafe.Pointer(&a.d[0]), unsafe.Pointer(&a.bs[0])
			row := func(k int) unsafe.Pointer { return unsafe.Add(pw, k*n*144) }
			var want, got [4][8]float32
			for k := range 4 {
				q4kRow512(&want[k], row(k), n, 144, py, pd, pbs)
				archsimd.ClearAVXUpperBits()
				q4kRow1AVX512(&got[k], row(k), n, py, pd, pbs)
			}
			if !equalBits(flat(&want), flat(&got)) {
				t.Fatalf("fill %d n %d: one-row accumulators %v, archsimd %v", fill, n, got, want)
			}
			var got4 [4][8]float32
			q4kRow4AVX512(&got4, row(0), row(1), row(2), row(3), n, py, pd, pbs)
			if !equalBits(flat(&want), flat(&got4)) {
				t.Fatalf("fill %d n %d: four-row accumulators %v, archsimd %v", fill, n, got4, want)
			}
			var st kState4
			var wantT, gotT [4][8]float32
			restore := q4kUseAsm(false)
			kRow4(Q4_K, &wantT, pw, n, 144, py, pd, pbs, cols, &st)
			restore()
			archsimd.ClearAVXUpperBits()
			q4kTok4AVX512(&gotT, pw, n, py, pd, pbs, cols, n*4, cols/bsumsPer*2)
			if !equalBits(flat(&wantT), flat(&gotT)) {
				t.Fatalf("fill %d n %d: four-token accumulators %v, archsimd %v", fill, n, gotT, wantT)
			}
		}
	}
	for _, fill := range q4kFills {
		for _, sh := range []struct{ rows, n int }{{1, 1}, {3, 2}, {5, 3}, {13, 1}, {9, 5}, {4, 12}} {
			for _, T := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 23, 70} {
				w, a := q4kCase(r, fill, sh.rows, sh.n, T)
				for _, rg := range [][2]int{{0, sh.rows}, {1, sh.rows}, {0, sh.rows - 1}, {sh.rows / 2, sh.rows}} {
					lo, hi := rg[0], rg[1]
					if lo >= hi {
						continue
					}
					want := make([]float32, T*sh.rows)
					got := make([]float32, T*sh.rows)
					restore := q4kUseAsm(false)
					matKQuantAVX2(want, w, a, lo, hi, T)
					restore()
					matKQuantAVX2(got, w, a, lo, hi, T)
					if !equalBits(want, got) {
						t.Fatalf("fill %d %dx%d T%d rows [%d,%d): assembly %v, archsimd %v", fill, sh.rows, sh.n*QKK, T, lo, hi, got, want)
					}
				}
			}
		}
	}
}

func flat(a *[4][8]float32) []float32 { return unsafe.Slice(&a[0][0], 32) }

// q4kUseAsm sets q4kAsm (tests and benchmarks) and returns the undo.
func q4kUseAsm(on bool) (restore func()) {
	old := q4kAsm
	q4kAsm = on
	return func() { q4kAsm = old }
}

// FuzzQ4KAsm: any weight bytes and activations, one to three
// super-blocks, one to twelve tokens: the assembly's products are bitwise
// the archsimd kernels'.
func FuzzQ4KAsm(f *testing.F) {
	if level != levelAVX512 || !q4kAsm {
		f.Skip("no AVX-512 assembly level")
	}
	f.Add(uint8(1), uint8(5), make([]byte, 144+QKK))
	seed := make([]byte, 3*(144+5*QKK))
	for i := range seed {
		seed[i] = 0xFF
	}
	f.Add(uint8(3), uint8(2), seed)
	f.Fuzz(func(t *testing.T, nb, tb uint8, b []byte) {
		n, T, rows := 1+int(nb)%3, 1+int(tb)%12, 5
		w, a := q4kCase(rand.New(rand.NewPCG(uint64(nb), uint64(tb))), fillRandom, rows, n, T)
		for i := range w.B {
			if i < len(b) {
				w.B[i] = b[i]
			}
		}
		for i := range a.q {
			if j := len(w.B) + i; j < len(b) {
				a.q[i] = max(-127, int8(b[j]))
			}
		}
		for k := range a.bs {
			var s int16
			for _, v := range a.q[16*k : 16*k+16] {
				s += int16(v)
			}
			a.bs[k] = s
		}
		want := make([]float32, T*rows)
		got := make([]float32, T*rows)
		restore := q4kUseAsm(false)
		matKQuantAVX2(want, w, a, 0, rows, T)
		restore()
		matKQuantAVX2(got, w, a, 0, rows, T)
		if !equalBits(want, got) {
			t.Fatalf("assembly %v, archsimd %v", got, want)
		}
	})
}

// BenchmarkQ4KAsm times the Q4_K product at the AVX-512 level with the
// assembly and with the archsimd kernels it replaces, alternating in the
// same run, one thread, on a 110M Llama's up projection (2048×768), at
// T = 1 (decode) and T = 64 (prefill). asm-ratio is archsimd/assembly
// wall time, asm-cpu-ratio the same in process CPU time (above 1: the
// assembly is faster; on a shared machine the CPU times move less).
// Q4K_ROWS and Q4K_COLS change the shape.
func BenchmarkQ4KAsm(b *testing.B) {
	if level != levelAVX512 || !q4kAsm {
		b.Skip("no AVX-512 assembly level")
	}
	r := rand.New(rand.NewPCG(1, 1))
	rows, cols := 2048, 768
	if v := os.Getenv("Q4K_ROWS"); v != "" {
		rows, _ = strconv.Atoi(v)
	}
	if v := os.Getenv("Q4K_COLS"); v != "" {
		cols, _ = strconv.Atoi(v)
	}
	blk, err := QuantizeBlocks(Q4_K, randVec(r, rows*cols), rows, cols)
	if err != nil {
		b.Fatal(err)
	}
	w := &Mat{Type: Q4_K, Rows: rows, Cols: cols, B: blk}
	for _, T := range []int{1, 64} {
		var sc Scratch
		a := sc.prepareK(randVec(r, T*cols), T, cols)
		out := make([]float32, T*rows)
		b.Run(fmt.Sprintf("T%d", T), func(b *testing.B) {
			var tasm, tsimd, casm, csimd time.Duration
			for b.Loop() {
				c0, s := cpuTime(), time.Now()
				matKQuantAVX2(out, w, a, 0, rows, T)
				c1, m := cpuTime(), time.Now()
				restore := q4kUseAsm(false)
				matKQuantAVX2(out, w, a, 0, rows, T)
				restore()
				c2, e := cpuTime(), time.Now()
				tasm += m.Sub(s)
				tsimd += e.Sub(m)
				casm += c1 - c0
				csimd += c2 - c1
			}
			n := float64(b.N)
			b.ReportMetric(float64(tasm.Nanoseconds())/n, "asm-ns/op")
			b.ReportMetric(float64(tsimd.Nanoseconds())/n, "archsimd-ns/op")
			b.ReportMetric(float64(casm.Nanoseconds())/n, "asm-cpu-ns/op")
			b.ReportMetric(float64(csimd.Nanoseconds())/n, "archsimd-cpu-ns/op")
			b.ReportMetric(float64(tsimd)/float64(tasm), "asm-ratio")
			if casm > 0 {
				b.ReportMetric(float64(csimd)/float64(casm), "asm-cpu-ratio")
			}
		})
	}
}
