//go:build goexperiment.simd && amd64

package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
	"unsafe"
)

// withQ6KAsm runs f with the assembly Q6_K kernels on or off (off: the
// archsimd AVX-512 kernels, q6kRow512 and q6kStep4x512).
func withQ6KAsm(on bool, f func()) {
	old := q6kAsmOK
	q6kAsmOK = on
	defer func() { q6kAsmOK = old }()
	f()
}

func needQ6KAsm(tb testing.TB) {
	tb.Helper()
	if level != levelAVX512 || !q6kAsmOK {
		tb.Skip("no AVX-512 level with AVX512_VNNI")
	}
}

// q6kBlocks fills n super-blocks by mode: 0 random bytes (every quant
// 0..63, every scale −128..127), 1 all quants 63 with scales 127, 2 all
// quants 63 with scales −128, 3 quants 0 with scales −128, 4 random quants
// with scales ±127/−128 only. d is a random finite fp16 (NaNs would make
// "bitwise" a question of payloads), the largest one now and then.
func q6kBlocks(r *rand.Rand, n, mode int) []byte {
	b := make([]byte, n*210)
	for i := range n {
		x := b[210*i : 210*(i+1)]
		m := mode
		if m < 0 {
			m = r.IntN(5)
		}
		for k := range x[:208] {
			switch m {
			case 0, 4:
				x[k] = byte(r.IntN(256))
			case 1, 2:
				x[k] = 0xFF
			case 3:
				x[k] = 0
			}
		}
		for k := 192; k < 208; k++ {
			switch m {
			case 1:
				x[k] = 127
			case 2, 3:
				x[k] = 0x80
			case 4:
				x[k] = []byte{127, 0x80, 0x81}[r.IntN(3)]
			}
		}
		h := F32ToF16(float32(r.NormFloat64()) * 0.01)
		switch r.IntN(8) {
		case 0:
			h = 0x7BFF // 65504
		case 1:
			h = uint16(r.IntN(0x400)) | uint16(r.IntN(2))<<15 // subnormal
		}
		binary.LittleEndian.PutUint16(x[208:], h)
	}
	return b
}

// q8kActs is T rows of n super-blocks of Q8_K activations: random values,
// or by mode all +127, all −127, or random ±127.
func q8kActs(r *rand.Rand, T, n, mode int) q8kRows {
	cols := n * QKK
	a := q8kRows{q: make([]int8, T*cols), d: make([]float32, T*n), bs: make([]int16, T*cols/bsumsPer)}
	for i := range a.q {
		switch mode {
		case 0:
			a.q[i] = int8(r.IntN(255) - 127)
		case 1:
			a.q[i] = 127
		case 2:
			a.q[i] = -127
		default:
			a.q[i] = int8(127 * (2*r.IntN(2) - 1))
		}
	}
	for k := range a.bs {
		var s int16
		for _, v := range a.q[16*k : 16*k+16] {
			s += int16(v)
		}
		a.bs[k] = s
	}
	for i := range a.d {
		a.d[i] = float32(r.ExpFloat64()) * 0.01
	}
	return a
}

// equalBits reports whether a and b hold the same float bit patterns.
func equalBits(a, b []float32) bool { return len(a) == len(b) && sameBits(a, b) < 0 }

// sameBits is the index of the first value whose bits differ between a
// and b, or −1.
func sameBits(a, b []float32) int {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

// TestQ6KAsmBitwise: every output of the assembly Q6_K products is bitwise
// the archsimd AVX-512 kernels' output: n = 1..12 super-blocks, T = 1..9
// tokens (eight- and four-token tiles, one-token tails), row ranges with partial
// tiles, extreme weights and activations.
func TestQ6KAsmBitwise(t *testing.T) {
	needQ6KAsm(t)
	r := rand.New(rand.NewPCG(6, 6))
	for n := 1; n <= 12; n++ {
		for _, rows := range []int{1, 2, 3, 5, 8, 11} {
			for T := 1; T <= 13; T++ {
				wmode, amode := -1, 0
				if (n+rows+T)%3 == 0 {
					wmode, amode = r.IntN(5), r.IntN(4)
				}
				w := &Mat{Type: Q6_K, Rows: rows, Cols: n * QKK, B: q6kBlocks(r, rows*n, wmode)}
				a := q8kActs(r, T, n, amode)
				lo, hi := 0, rows
				if rows > 2 && T%2 == 0 {
					lo, hi = 1, rows-r.IntN(2)
				}
				want, got := make([]float32, T*rows), make([]float32, T*rows)
				withQ6KAsm(false, func() { matKQuantAVX2(want, w, a, lo, hi, T) })
				withQ6KAsm(true, func() { matKQuantAVX2(got, w, a, lo, hi, T) })
				if i := sameBits(want, got); i >= 0 {
					t.Fatalf("n=%d rows=%d T=%d [%d,%d) modes %d/%d: out[%d] = %g (%#x), archsimd %g (%#x)",
						n, rows, T, lo, hi, wmode, amode, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
				}
			}
		}
	}
}

// q6kAccs runs the one-token kernels on one weight block row (n
// super-blocks) against one activation row: q6kRow512's accumulator, and
// the assembly kernel's for the same row in each of its four slots.
func q6kAccs(w []byte, n int, a q8kRows) (want [8]float32, got [4][8]float32) {
	pw := unsafe.Pointer(&w[0])
	py, pd, pbs := unsafe.Pointer(&a.q[0]), unsafe.Pointer(&a.d[0]), unsafe.Pointer(&a.bs[0])
	q6kRow512(&want, pw, n, 210, py, pd, pbs)
	q6kRows4AVX512(&got, pw, pw, pw, pw, n, py, pd, pbs)
	return
}

// TestQ6KAsmLanes: the accumulator lanes themselves, of the one-token
// kernel and of the four- and eight-token tile kernels per row and token.
func TestQ6KAsmLanes(t *testing.T) {
	needQ6KAsm(t)
	r := rand.New(rand.NewPCG(7, 7))
	for it := range 300 {
		n := 1 + it%12
		w := q6kBlocks(r, 4*n, -1)
		a := q8kActs(r, 4, n, it%4)
		cols := n * QKK
		var x4 [4][4][8]float32
		var out [4][4]float32
		ntok := 2 + it%3
		q6kTile4AVX512(&x4, unsafe.Pointer(&out[0][0]), 16, unsafe.Pointer(&w[0]), 210*n, 4, n, unsafe.Pointer(&a.q[0]), cols,
			unsafe.Pointer(&a.d[0]), 4*n, unsafe.Pointer(&a.bs[0]), cols/bsumsPer*2, ntok)
		var x8 [4][8][8]float32
		var out8 [8][4]float32
		a8 := q8kActs(r, 8, n, it%4)
		q6kTile8AVX512(&x8, unsafe.Pointer(&out8[0][0]), 16, unsafe.Pointer(&w[0]), 210*n, 4, n, unsafe.Pointer(&a8.q[0]), cols,
			unsafe.Pointer(&a8.d[0]), 4*n, unsafe.Pointer(&a8.bs[0]), cols/bsumsPer*2, 1)
		for tk := range 8 {
			at := q8kRows{q: a8.q[tk*cols : (tk+1)*cols], d: a8.d[tk*n : (tk+1)*n], bs: a8.bs[tk*cols/bsumsPer : (tk+1)*cols/bsumsPer]}
			for row := range 4 {
				want, _ := q6kAccs(w[210*n*row:210*n*(row+1)], n, at)
				if sameBits(want[:], x8[row][tk][:]) >= 0 {
					t.Fatalf("it %d row %d token %d: eight-token tile lanes %v, archsimd %v", it, row, tk, x8[row][tk], want)
				}
			}
		}
		for tk := range 4 {
			at := q8kRows{q: a.q[tk*cols : (tk+1)*cols], d: a.d[tk*n : (tk+1)*n], bs: a.bs[tk*cols/bsumsPer : (tk+1)*cols/bsumsPer]}
			for row := range 4 {
				want, got := q6kAccs(w[210*n*row:210*n*(row+1)], n, at)
				for k := range 4 {
					if sameBits(want[:], got[k][:]) >= 0 {
						t.Fatalf("it %d row %d token %d: one-token lanes %v, archsimd %v", it, row, tk, got[k], want)
					}
				}
				if tk < ntok && sameBits(want[:], x4[row][tk][:]) >= 0 {
					t.Fatalf("it %d row %d token %d: tile lanes %v, archsimd %v", it, row, tk, x4[row][tk], want)
				}
			}
		}
	}
}

// FuzzQ6KAsm: any super-block bytes (a finite d) against any activations
// in [−127, 127]; the assembly lanes equal q6kRow512's.
func FuzzQ6KAsm(f *testing.F) {
	needQ6KAsm(f)
	f.Add(make([]byte, 210+QKK))
	seed := make([]byte, 210+QKK)
	for i := range seed {
		seed[i] = 0x81
	}
	f.Add(seed)
	f.Fuzz(func(t *testing.T, b []byte) {
		w := make([]byte, 210)
		copy(w, b)
		if w[209]&0x7C == 0x7C {
			w[209] &^= 0x40 // no infinities or NaNs
		}
		a := q8kRows{q: make([]int8, QKK), d: []float32{1}, bs: make([]int16, 16)}
		for i := range a.q {
			if 210+i < len(b) {
				a.q[i] = max(-127, int8(b[210+i]))
			}
			a.bs[i/16] += int16(a.q[i])
		}
		want, got := q6kAccs(w, 1, a)
		if sameBits(want[:], got[0][:]) >= 0 {
			t.Fatalf("lanes %v, archsimd %v", got[0], want)
		}
	})
}

// BenchmarkQ6KAsm times the assembly Q6_K product against the archsimd
// AVX-512 one it replaces, alternating in the same run, one thread: on a
// 2048×768 matrix (a 110M Llama's up projection shape, in cache) at T = 1,
// 2, 4 and 64, and at T = 1 and 2 on a 32000×768 one (the output matrix shape,
// 20 MB) read from memory: 64 MiB are written before each product to push
// it out of the caches. asm-ratio is archsimd/asm wall time,
// asm-cpu-ratio the same in process CPU time (above 1: the assembly is
// faster); the cold case reports CPU time only (the flush is not timed).
func BenchmarkQ6KAsm(b *testing.B) {
	needQ6KAsm(b)
	r := rand.New(rand.NewPCG(1, 1))
	for _, sh := range []struct {
		rows, cols int
		Ts         []int
		cold       bool
	}{{2048, 768, []int{1, 2, 4, 64}, false}, {32000, 768, []int{1, 2}, true}} {
		rows, cols := sh.rows, sh.cols
		blk, err := QuantizeBlocks(Q6_K, randVec(r, rows*cols), rows, cols)
		if err != nil {
			b.Fatal(err)
		}
		w := &Mat{Type: Q6_K, Rows: rows, Cols: cols, B: blk}
		var junk []byte
		if sh.cold {
			junk = make([]byte, 64<<20)
		}
		flush := func() {
			for i := 0; i < len(junk); i += 64 {
				junk[i]++
			}
		}
		for _, T := range sh.Ts {
			var sc Scratch
			a := sc.prepareK(randVec(r, T*cols), T, cols)
			out := make([]float32, T*rows)
			name := fmt.Sprintf("Q6_K/%dx%d/T%d", rows, cols, T)
			if sh.cold {
				name += "-cold"
			}
			b.Run(name, func(b *testing.B) {
				var tsimd, tasm, csimd, casm time.Duration
				for b.Loop() {
					flush()
					c0, s := cpuTime(), time.Now()
					withQ6KAsm(false, func() { matKQuantAVX2(out, w, a, 0, rows, T) })
					c1, m := cpuTime(), time.Now()
					flush()
					c2, m2 := cpuTime(), time.Now()
					matKQuantAVX2(out, w, a, 0, rows, T)
					c3, e := cpuTime(), time.Now()
					tsimd += m.Sub(s)
					tasm += e.Sub(m2)
					csimd += c1 - c0
					casm += c3 - c2
				}
				n := float64(b.N)
				if !sh.cold {
					b.ReportMetric(float64(tsimd.Nanoseconds())/n, "archsimd-ns/op")
					b.ReportMetric(float64(tasm.Nanoseconds())/n, "asm-ns/op")
					b.ReportMetric(float64(tsimd)/float64(tasm), "asm-ratio")
				}
				b.ReportMetric(float64(csimd.Nanoseconds())/n, "archsimd-cpu-ns/op")
				b.ReportMetric(float64(casm.Nanoseconds())/n, "asm-cpu-ns/op")
				if casm > 0 {
					b.ReportMetric(float64(csimd)/float64(casm), "asm-cpu-ratio")
				}
			})
		}
	}
}
