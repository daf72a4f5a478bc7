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

// q8BlockCase is one Q8_0B product and its reference: the weights as a
// file holds them (blk) and repacked into split quants and fp32 scales
// widened from the fp16 (rep, what the loader used to make), with
// quantized activations.
type q8BlockCase struct {
	blk, rep *Mat
	xq       []int8
	xs       []float32
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
	c := q8BlockCase{blk: &Mat{Type: Q8_0B, Rows: rows, Cols: cols, B: b},
		rep: repackBlocks(b, rows, cols, (rows+T)%2 == 0),
		xq:  make([]int8, T*cols), xs: make([]float32, T*G)}
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

// repackBlocks is the old loader's repack: quants in one run, each fp16
// scale widened to fp32 (padded as NewScales pads, or not).
func repackBlocks(b []byte, rows, cols int, pad bool) *Mat {
	G := rows * cols / QK
	m := &Mat{Type: Q8_0, Rows: rows, Cols: cols, Q: make([]int8, rows*cols), S: make([]float32, G)}
	if pad {
		m.S = NewScales(G)
	}
	for g := range G {
		x := b[q8BlockBytes*g:]
		m.S[g] = F16ToF32(binary.LittleEndian.Uint16(x))
		for i := range QK {
			m.Q[g*QK+i] = int8(x[2+i])
		}
	}
	return m
}

// firstBitDiff is the index of the first value whose bits differ, or −1.
func firstBitDiff(a, b []float32) int {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

// checkQ8Block compares the Q8_0B product of rows [lo,hi) with the Q8_0
// product of the repacked weights at the current level, bit for bit, and
// checks that outputs outside the range stay untouched.
func checkQ8Block(t *testing.T, name string, c q8BlockCase, lo, hi, T int) {
	t.Helper()
	rows, cols := c.blk.Rows, c.blk.Cols
	want := make([]float32, T*rows)
	got := make([]float32, T*rows)
	for i := range got {
		got[i], want[i] = -1, -1
	}
	matQ8(want, c.rep.Q, c.rep.S, c.xq, c.xs, lo, hi, rows, cols, T)
	matQ8B(got, c.blk, c.xq, c.xs, lo, hi, T)
	if i := firstBitDiff(got, want); i >= 0 {
		t.Fatalf("%s rows [%d,%d): out[%d] = %g (%#x), repacked %g (%#x)", name, lo, hi, i,
			got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
	}
}

// TestQ8BlocksBitwise: at every kernel level this CPU has, the Q8_0B
// product is bitwise the Q8_0 product of the same weights repacked, for
// row counts that do and do not fill the tiles (1..17), column counts in
// and across the 16-group scale chunks, T = 1..9 and one past the token
// block, row ranges starting and ending inside tiles, scales with and
// without padding, subnormal, zero, largest and infinite fp16 scales, and
// extreme quants (−128 included).
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
								checkQ8Block(t, name, c, lr[0], lr[1], T)
							}
						}
					}
				}
			}
			// 67 tokens: past the vector levels' 64-token block.
			c := newQ8BlockCase(r, 21, 256, 67, false)
			checkQ8Block(t, "21x256xT67", c, 0, 21, 67)
		})
	}
}

// TestQ8BlocksMatMul: through the pool (rows split between threads, the
// Mat's type choosing the kernel), a Q8_0B matrix gives bitwise the Q8_0
// outputs, and its Row, Bytes and Validate agree with the layout.
func TestQ8BlocksMatMul(t *testing.T) {
	pool := NewPool(2)
	defer pool.Close()
	r := rand.New(rand.NewPCG(7, 38))
	rows, cols, T := 45, 800, 6
	f := &Mat{Type: F32, Rows: rows, Cols: cols, F: randVec(r, rows*cols)}
	q, err := QuantizeMat(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := QuantizeBlocks(Q8_0B, f.F, rows, cols)
	if err != nil {
		t.Fatal(err)
	}
	if b2, err := Q8Blocks(q); err != nil || !slices.Equal(b, b2) {
		t.Fatalf("QuantizeBlocks(Q8_0B) and Q8Blocks(QuantizeMat) differ (%v)", err)
	}
	w := &Mat{Type: Q8_0B, Rows: rows, Cols: cols, B: b}
	if err := w.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := w.Bytes(); got != int64(rows*cols/QK*34) {
		t.Fatalf("Bytes = %d", got)
	}
	if (&Mat{Type: Q8_0B, Rows: rows, Cols: cols, B: b[:len(b)-1]}).Validate() == nil {
		t.Fatal("short Q8_0B matrix validated")
	}
	for r := range rows {
		a, e := make([]float32, cols), make([]float32, cols)
		w.Row(a, r)
		q.Row(e, r)
		if i := firstBitDiff(a, e); i >= 0 {
			t.Fatalf("row %d value %d = %g, Q8_0 %g", r, i, a[i], e[i])
		}
	}
	x := randVec(r, T*cols)
	for _, lv := range kernelLevels() {
		restore := setKernelLevel(lv)
		for _, tt := range []int{1, T} {
			got, want := make([]float32, tt*rows), make([]float32, tt*rows)
			pool.MatMul(got, w, x, tt, &Scratch{})
			pool.MatMul(want, q, x, tt, &Scratch{})
			if i := firstBitDiff(got, want); i >= 0 {
				restore()
				t.Fatalf("%s T=%d: out[%d] = %g, Q8_0 %g", lv, tt, i, got[i], want[i])
			}
		}
		restore()
	}
}

// FuzzQ8Blocks compares one small product whose weight blocks are the
// fuzz bytes (any fp16 scale, any quant) at every level.
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
		c.rep = repackBlocks(c.blk.B, nr, cols, seed%3 == 0)
		for _, lv := range kernelLevels() {
			restore := setKernelLevel(lv)
			rows, cols := c.blk.Rows, c.blk.Cols
			want, got := make([]float32, nt*rows), make([]float32, nt*rows)
			matQ8(want, c.rep.Q, c.rep.S, c.xq, c.xs, 0, rows, rows, cols, nt)
			matQ8B(got, c.blk, c.xq, c.xs, 0, rows, nt)
			restore()
			for i := range got {
				// Any NaN is the same NaN here: a NaN scale's payload may
				// be quieted at different steps.
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(got[i] != got[i] && want[i] != want[i]) {
					t.Fatalf("%s: out[%d] = %g, repacked %g", lv, i, got[i], want[i])
				}
			}
		}
	})
}

// q8BenchPair is one weight matrix in both layouts.
type q8BenchPair struct{ rep, blk *Mat }

// newQ8BenchPair makes a matrix in both layouts. With asLoaded each is
// held as the loaders hold it: the repacked one in memory advised for
// huge pages (NewI8, NewF32: the old loader's slab), the blocks in a
// read-only file mapping (the GGUF file's pages).
func newQ8BenchPair(b *testing.B, r *rand.Rand, rows, cols int, asLoaded bool) q8BenchPair {
	blk := make([]byte, rows*cols/QK*q8BlockBytes)
	for g := range rows * cols / QK {
		x := blk[q8BlockBytes*g:]
		binary.LittleEndian.PutUint16(x, F32ToF16(r.Float32()*0.01))
		for i := range QK {
			x[2+i] = byte(r.Uint32())
		}
	}
	rep := repackBlocks(blk, rows, cols, true)
	if asLoaded {
		q, s := NewI8(len(rep.Q)), NewF32(len(rep.S)+ScalePad)
		copy(q, rep.Q)
		copy(s, rep.S)
		rep.Q, rep.S = q, s[:len(rep.S)]
		blk = mappedCopy(b, blk)
	}
	return q8BenchPair{rep, &Mat{Type: Q8_0B, Rows: rows, Cols: cols, B: blk}}
}

// BenchmarkQ8BlocksDecode times one-token products streaming their
// weights from DRAM, as decode does (BenchmarkQ8AsmDecode's set-up):
// eight 16384×768 matrices in each layout (200 MB, more than the L3), the
// repacked and the block kernel of the current level alternating on
// different matrices, one thread. block-cpu-ratio is the block kernel's
// CPU time over the repacked one's (above 1: blocks slower); GB/s are
// each layout's own bytes per CPU second. heap holds both layouts in
// ordinary heap memory; loaded holds each as its loader did (repacked in
// huge pages, blocks in a file mapping of 4 KiB pages).
func BenchmarkQ8BlocksDecode(b *testing.B) {
	for _, loaded := range []bool{false, true} {
		name := map[bool]string{false: "heap", true: "loaded"}[loaded]
		b.Run(name, func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 1))
			var ms []q8BenchPair
			for range 8 {
				ms = append(ms, newQ8BenchPair(b, r, 16384, 768, loaded))
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
	ms := []q8BenchPair{newQ8BenchPair(b, r, 2048, 768, false)}
	for _, T := range []int{16, 64} {
		b.Run(fmt.Sprintf("T%d", T), func(b *testing.B) { benchQ8Blocks(b, ms, T) })
	}
}

func benchQ8Blocks(b *testing.B, ms []q8BenchPair, T int) {
	rows, cols := ms[0].rep.Rows, ms[0].rep.Cols
	x := randVec(rand.New(rand.NewPCG(2, 2)), T*cols)
	xq, xs := make([]int8, len(x)), NewScales(len(x)/QK)
	QuantizeRows(x, xq, xs)
	out := make([]float32, T*rows)
	for _, m := range ms { // pages mapped in before the timing
		matQ8(out, m.rep.Q, m.rep.S, xq, xs, 0, rows, rows, cols, T)
		matQ8B(out, m.blk, xq, xs, 0, rows, T)
	}
	var crep, cblk, trep, tblk time.Duration
	i := 0
	for b.Loop() {
		w := ms[i%len(ms)].rep
		c0, s := cpuTime(), time.Now()
		matQ8(out, w.Q, w.S, xq, xs, 0, rows, rows, cols, T)
		c1, m := cpuTime(), time.Now()
		matQ8B(out, ms[(i+1)%len(ms)].blk, xq, xs, 0, rows, T)
		c2, e := cpuTime(), time.Now()
		i += 3 // with eight matrices, each layout visits every one
		crep += c1 - c0
		cblk += c2 - c1
		trep += m.Sub(s)
		tblk += e.Sub(m)
	}
	b.ReportMetric(float64(tblk)/float64(trep), "block-ratio")
	if crep > 0 && cblk > 0 {
		n := float64(b.N)
		b.ReportMetric(float64(cblk)/float64(crep), "block-cpu-ratio")
		b.ReportMetric(float64(ms[0].rep.Bytes())*n/float64(crep.Nanoseconds()), "rep-GB/s")
		b.ReportMetric(float64(ms[0].blk.Bytes())*n/float64(cblk.Nanoseconds()), "blk-GB/s")
	}
}
