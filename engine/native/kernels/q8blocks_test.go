package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// q8BlockCase is one Q8_0 product: the weights as a file holds them and
// quantized activations (their scales without NewScales' padding).
type q8BlockCase struct {
	blk *Mat
	xq  []int8
	xs  []float32
}

// q8Halves draws block scales: ordinary quantizer-like values, zero, the
// largest fp16 (65504), subnormals, negatives and, with extreme, infinity.
func q8Half(r *rand.Rand, extreme bool) uint16 {
	switch r.IntN(10) {
	case 0:
		return 0
	case 1:
		return 0x7bff
	case 2:
		return uint16(1 + r.IntN(0x3ff))
	case 3:
		if extreme && r.IntN(4) == 0 {
			return 0x7c00
		}
		return 0x8000 | F32ToF16(r.Float32()*0.02)
	}
	return F32ToF16(float32(r.NormFloat64()) * 0.01)
}

func newQ8BlockCase(r *rand.Rand, rows, cols, T int, extreme bool) q8BlockCase {
	G := cols / QK
	b := make([]byte, rows*G*q8BlockBytes)
	for g := range rows * G {
		x := b[q8BlockBytes*g : q8BlockBytes*(g+1)]
		binary.LittleEndian.PutUint16(x, q8Half(r, extreme))
		for i := range QK {
			v := int8(r.IntN(256) - 128)
			if extreme {
				v = [...]int8{-128, 127, -127, 0}[r.IntN(4)]
			}
			x[2+i] = byte(v)
		}
	}
	c := q8BlockCase{blk: &Mat{Type: Q8_0, Rows: rows, Cols: cols, B: b},
		xq: make([]int8, T*cols), xs: make([]float32, T*G)}
	for i := range c.xq {
		c.xq[i] = int8(r.IntN(255) - 127)
		if extreme {
			c.xq[i] = [...]int8{-127, 127}[r.IntN(2)]
		}
	}
	for i := range c.xs {
		switch r.IntN(8) {
		case 0:
			c.xs[i] = 0
		case 1:
			c.xs[i] = 65504
		default:
			c.xs[i] = float32(r.NormFloat64()) * 0.01
		}
	}
	return c
}

// fma32 is a·b + c rounded once to float32, as VFMADD231PS computes it:
// the product is exact in float64, the sum's rounding error is recovered
// exactly (two-sum), and a float64 sum that falls on a float32 tie is
// resolved by the sign of that error, which is all that double rounding
// through float64 could get wrong.
func fma32(a, b, c float32) float32 {
	p, z := float64(a)*float64(b), float64(c)
	s := p + z
	r := float32(s)
	if math.IsInf(s, 0) || math.IsNaN(s) || math.IsInf(float64(r), 0) || float64(r) == s {
		return r
	}
	bb := s - p
	e := (p - (s - bb)) + (z - bb)
	if e == 0 {
		return r
	}
	n := math.Nextafter32(r, float32(math.Copysign(math.Inf(1), s-float64(r))))
	if 2*s != float64(r)+float64(n) { // not a tie: s's rounding is the exact sum's
		return r
	}
	if (e > 0) == (n > r) {
		return n
	}
	return r
}

// q8RefDot is one output of the Q8_0 product of the named kernel level,
// written out in scalar code from the level's definition (dispatch and
// the kernels' comments): its integer lanes, its per-lane FMA (the
// portable loops: a multiply and an add) with (weight scale × activation
// scale), and its horizontal order. The kernels must match it bit for
// bit.
func q8RefDot(level string, blk []byte, xq []int8, xs []float32) float32 {
	var acc [16]float32
	lanes, width := 1, QK // lanes, and values per lane (contiguous)
	switch level {
	case "avx2":
		lanes, width = 8, 4
	case "avx512":
		lanes, width = 16, 2
	}
	for g := range xs {
		x := blk[q8BlockBytes*g:]
		c := float32(F16ToF32(binary.LittleEndian.Uint16(x)) * xs[g])
		w, a := x[2:2+QK], xq[g*QK:(g+1)*QK]
		for k := range lanes {
			var sum int32
			for i := k * width; i < (k+1)*width; i++ {
				sum += int32(int8(w[i])) * int32(a[i])
			}
			if lanes == 1 {
				acc[0] = acc[0] + float32(float32(sum)*c)
			} else {
				acc[k] = fma32(float32(sum), c, acc[k])
			}
		}
	}
	switch level {
	case "avx512": // fold16: lanes j+8 onto j
		for j := range 8 {
			acc[j] = acc[j] + acc[j+8]
		}
		fallthrough
	case "avx2": // hsum4: lanes j+4 onto j, then pairs
		h := [4]float32{acc[0] + acc[4], acc[1] + acc[5], acc[2] + acc[6], acc[3] + acc[7]}
		return (h[0] + h[1]) + (h[2] + h[3])
	}
	return acc[0]
}

// sameQ8 is the index of the first output whose bits differ (any NaN
// matching any NaN: payloads may be quieted at different steps), or −1.
func sameQ8(got, want []float32) int {
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(got[i] != got[i] && want[i] != want[i]) {
			return i
		}
	}
	return -1
}

// checkQ8Block compares the Q8_0 product of rows [lo,hi) at the current
// level with q8RefDot for that level, bit for bit, and checks that outputs
// outside the range stay untouched.
func checkQ8Block(t *testing.T, lv, name string, c q8BlockCase, lo, hi, T int) {
	t.Helper()
	rows, cols := c.blk.Rows, c.blk.Cols
	G := cols / QK
	rb := G * q8BlockBytes
	want := make([]float32, T*rows)
	got := make([]float32, T*rows)
	for i := range got {
		got[i], want[i] = -1, -1
	}
	for tk := range T {
		for r := lo; r < hi; r++ {
			want[tk*rows+r] = q8RefDot(lv, c.blk.B[r*rb:(r+1)*rb], c.xq[tk*cols:(tk+1)*cols], c.xs[tk*G:(tk+1)*G])
		}
	}
	matQ8B(got, c.blk, c.xq, c.xs, lo, hi, T)
	if i := sameQ8(got, want); i >= 0 {
		t.Fatalf("%s %s rows [%d,%d): out[%d] = %g (%#x), reference %g (%#x)", lv, name, lo, hi, i,
			got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
	}
}

// TestQ8BlocksBitwise: at every kernel level this CPU has, the Q8_0
// product is bitwise the level's order written out in scalar code
// (q8RefDot), for row counts that do and do not fill the tiles (1..17),
// column counts in and across the 16-group scale chunks, T = 1..9 and one
// past the token block, row ranges starting and ending inside tiles,
// subnormal, zero, largest and infinite fp16 scales, and extreme quants
// (−128 included). Every output being its own reference's, batched,
// single-token and partial-range products agree bitwise.
func TestQ8BlocksBitwise(t *testing.T) {
	for _, lv := range kernelLevels() {
		t.Run(lv, func(t *testing.T) {
			defer setKernelLevel(lv)()
			r := rand.New(rand.NewPCG(38, 8))
			for _, cols := range []int{32, 64, 96, 480, 512, 544, 768, 1056} {
				for _, rows := range []int{1, 3, 4, 5, 8, 9, 13, 17} {
					for _, T := range []int{1, 2, 3, 4, 5, 7, 9} {
						c := newQ8BlockCase(r, rows, cols, T, (rows+T)%3 == 0)
						name := fmt.Sprintf("%dx%dxT%d", rows, cols, T)
						for _, lr := range [][2]int{{0, rows}, {1, rows}, {rows / 2, rows}, {0, (rows + 1) / 2}, {3, rows}} {
							if lr[0] < lr[1] {
								checkQ8Block(t, lv, name, c, lr[0], lr[1], T)
							}
						}
					}
				}
			}
			// 67 tokens: past the vector levels' 64-token block.
			c := newQ8BlockCase(r, 21, 256, 67, false)
			checkQ8Block(t, lv, "21x256xT67", c, 0, 21, 67)
		})
	}
}

// TestQ8BlocksLevels: every level agrees with the portable loops within
// the Q8_0 tolerance (|Δ| ≤ 1e-6·Σ|w·x| + 1e-7: the integer sums are exact,
// only the float order differs) on odd shapes, weights including −128.
func TestQ8BlocksLevels(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, sh := range []struct{ rows, cols, T int }{
		{1, 32, 1}, {3, 32, 2}, {5, 96, 3}, {7, 288, 1}, {13, 800, 5}, {4, 256, 4}, {17, 2080, 2}, {6, 64, 67},
	} {
		c := newQ8BlockCase(r, sh.rows, sh.cols, sh.T, false)
		for i := range c.xs {
			c.xs[i] = float32(r.NormFloat64()) * 0.01
		}
		G := sh.cols / QK
		want := make([]float32, sh.T*sh.rows)
		matQ8BPortable(want, c.blk, c.xq, c.xs, 0, sh.rows, sh.T)
		dq := make([]float32, sh.cols)
		for _, lv := range kernelLevels() {
			restore := setKernelLevel(lv)
			got := make([]float32, len(want))
			matQ8B(got, c.blk, c.xq, c.xs, 0, sh.rows, sh.T)
			restore()
			for j := range sh.rows {
				c.blk.Row(dq, j)
				for tk := range sh.T {
					var mag float64
					for i, w := range dq {
						mag += math.Abs(float64(w) * float64(c.xq[tk*sh.cols+i]) * float64(c.xs[tk*G+i/QK]))
					}
					o := tk*sh.rows + j
					if d := math.Abs(float64(got[o] - want[o])); d > 1e-6*mag+1e-7 {
						t.Fatalf("%s %v: out[%d][%d] = %g, portable %g (Σ|w·x| %g)", lv, sh, tk, j, got[o], want[o], mag)
					}
				}
			}
		}
	}
}

// TestQ8BlocksMatMul: QuantizeMat makes the bytes QuantizeBlocks writes
// for a GGUF file; the matrix validates, counts its bytes and dequantizes
// rows as quant × scale; and through the pool (rows split between
// threads, the Mat's type choosing the kernel) every level gives bitwise
// the direct product.
func TestQ8BlocksMatMul(t *testing.T) {
	pool := NewPool(2)
	defer pool.Close()
	r := rand.New(rand.NewPCG(7, 38))
	rows, cols, T := 45, 800, 6
	f := &Mat{Type: F32, Rows: rows, Cols: cols, F: randVec(r, rows*cols)}
	w, err := QuantizeMat(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := QuantizeBlocks(Q8_0, f.F, rows, cols)
	if err != nil {
		t.Fatal(err)
	}
	if w.Type != Q8_0 || !slices.Equal(w.B, b) {
		t.Fatalf("QuantizeMat gives %v, bytes differ from QuantizeBlocks(Q8_0)", w.Type)
	}
	h := &Mat{Type: F16, Rows: rows, Cols: cols, H: make([]uint16, rows*cols)}
	for i, v := range f.F {
		h.H[i] = F32ToF16(v)
	}
	hq, err := QuantizeMat(h)
	if err != nil {
		t.Fatal(err)
	}
	if hb, _ := QuantizeBlocks(Q8_0, h.Widened().F, rows, cols); !slices.Equal(hq.B, hb) {
		t.Fatal("QuantizeMat of F16 differs from quantizing its widened values")
	}
	if err := w.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := w.Bytes(); got != int64(rows*cols/QK*34) {
		t.Fatalf("Bytes = %d", got)
	}
	if (&Mat{Type: Q8_0, Rows: rows, Cols: cols, B: b[:len(b)-1]}).Validate() == nil {
		t.Fatal("short Q8_0 matrix validated")
	}
	rb := cols / QK * q8BlockBytes
	for r := range rows {
		a := make([]float32, cols)
		w.Row(a, r)
		for i := range a {
			blk := b[r*rb+i/QK*q8BlockBytes:]
			if e := float32(int8(blk[2+i%QK])) * F16ToF32(binary.LittleEndian.Uint16(blk)); math.Float32bits(a[i]) != math.Float32bits(e) {
				t.Fatalf("row %d value %d = %g, want %g", r, i, a[i], e)
			}
		}
	}
	x := randVec(r, T*cols)
	for _, lv := range kernelLevels() {
		restore := setKernelLevel(lv)
		for _, tt := range []int{1, T} {
			xq, xs := make([]int8, tt*cols), NewScales(tt*cols/QK)
			QuantizeRows(x[:tt*cols], xq, xs)
			got, want := make([]float32, tt*rows), make([]float32, tt*rows)
			pool.MatMul(got, w, x, tt, &Scratch{})
			matQ8B(want, w, xq, xs, 0, rows, tt)
			if i := sameQ8(got, want); i >= 0 {
				restore()
				t.Fatalf("%s T=%d: out[%d] = %g, direct %g", lv, tt, i, got[i], want[i])
			}
		}
		restore()
	}
}

// FuzzQ8Blocks compares one small product whose weight blocks are the
// fuzz bytes (any fp16 scale, NaN and infinity included, any quant) with
// q8RefDot at every level.
func FuzzQ8Blocks(f *testing.F) {
	f.Add([]byte{0x00, 0x3c, 0x80, 0x7f}, uint8(5), uint8(3), uint8(2), uint64(1))
	f.Add([]byte{0xff, 0x7b, 0x01, 0x00, 0x80}, uint8(9), uint8(17), uint8(9), uint64(2))
	f.Fuzz(func(t *testing.T, data []byte, rows, groups, T uint8, seed uint64) {
		if len(data) == 0 {
			return
		}
		nr, ng, nt := int(rows%13)+1, int(groups%40)+1, int(T%9)+1
		cols := ng * QK
		c := newQ8BlockCase(rand.New(rand.NewPCG(seed, 3)), nr, cols, nt, seed%2 == 0)
		for i := range c.blk.B {
			c.blk.B[i] = data[i%len(data)] ^ byte(i/len(data))
		}
		for _, lv := range kernelLevels() {
			restore := setKernelLevel(lv)
			checkQ8Block(t, lv, "fuzz", c, 0, nr, nt)
			restore()
		}
	})
}

// randQ8B is a rows×cols Q8_0 matrix of random quants and small scales in
// memory from alloc.
func randQ8B(r *rand.Rand, rows, cols int, alloc func(int) []byte) *Mat {
	blk := alloc(rows * cols / QK * q8BlockBytes)
	for g := range rows * cols / QK {
		x := blk[q8BlockBytes*g:]
		binary.LittleEndian.PutUint16(x, F32ToF16(r.Float32()*0.01))
		for i := range QK {
			x[2+i] = byte(r.Uint32())
		}
	}
	return &Mat{Type: Q8_0, Rows: rows, Cols: cols, B: blk}
}

// BenchmarkQ8BlocksDecode times one-token products streaming their
// weights from DRAM, as decode does (BenchmarkQ8AsmDecode's set-up):
// eight 16384×768 matrices (106 MB, more than the L3), one product per
// matrix in turn, one thread, at the current level. blk-GB/s is weight
// bytes per CPU second. heap holds the blocks in ordinary heap memory,
// huge in memory advised for huge pages (NewBytes: QuantizeMat's and
// CopyOutOfMapping's), loaded in a read-only file mapping of 4 KiB pages
// (a GGUF file read in place).
func BenchmarkQ8BlocksDecode(b *testing.B) {
	for _, mem := range []string{"heap", "huge", "loaded"} {
		b.Run(mem, func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 1))
			var ms []*Mat
			for range 8 {
				m := randQ8B(r, 16384, 768, func(n int) []byte { return make([]byte, n) })
				switch mem {
				case "huge":
					c := NewBytes(len(m.B))
					copy(c, m.B)
					m.B = c
				case "loaded":
					m.B = mappedCopy(b, m.B)
				}
				ms = append(ms, m)
			}
			benchQ8Blocks(b, ms, 1)
		})
	}
}

// BenchmarkQ8BlocksPrefill is BenchmarkQ8BlocksDecode for T = 16 and 64
// activation rows on a 2048×768 matrix (in cache: prefill is bound by the
// arithmetic, not the memory).
func BenchmarkQ8BlocksPrefill(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	ms := []*Mat{randQ8B(r, 2048, 768, func(n int) []byte { return make([]byte, n) })}
	for _, T := range []int{16, 64} {
		b.Run(fmt.Sprintf("T%d", T), func(b *testing.B) { benchQ8Blocks(b, ms, T) })
	}
}

func benchQ8Blocks(b *testing.B, ms []*Mat, T int) {
	rows, cols := ms[0].Rows, ms[0].Cols
	x := randVec(rand.New(rand.NewPCG(2, 2)), T*cols)
	xq, xs := make([]int8, len(x)), NewScales(len(x)/QK)
	QuantizeRows(x, xq, xs)
	out := make([]float32, T*rows)
	for _, m := range ms { // pages mapped in before the timing
		matQ8B(out, m, xq, xs, 0, rows, T)
	}
	var cblk time.Duration
	i := 0
	for b.Loop() {
		c0 := cpuTime()
		matQ8B(out, ms[i%len(ms)], xq, xs, 0, rows, T)
		cblk += cpuTime() - c0
		i++
	}
	if cblk > 0 {
		b.ReportMetric(float64(ms[0].Bytes())*float64(b.N)/float64(cblk.Nanoseconds()), "blk-GB/s")
	}
}
