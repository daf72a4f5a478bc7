package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestBlockVectors decodes hand-built blocks whose values follow from
// ggml-common.h's layouts by hand: a wrong nibble order, scale packing or
// sign shows up as a wrong value.
func TestBlockVectors(t *testing.T) {
	le := binary.LittleEndian
	// Q4_0: d = 2, byte l = (l&15) | 15-(l&15)<<4 → values 0..15 are
	// 2*(l-8), values 16..31 are 2*(7-l).
	q40 := make([]byte, 18)
	le.PutUint16(q40, F32ToF16(2))
	for l := range 16 {
		q40[2+l] = uint8(l) | uint8(15-l)<<4
	}
	// Q4_K: d = 1, dmin = 0.5; sub-block 1 has scale 3, min 2; sub-block
	// 5 (j >= 4: packed) scale 33 (0b100001), min 17 (0b010001).
	q4k := make([]byte, 144)
	le.PutUint16(q4k, F32ToF16(1))
	le.PutUint16(q4k[2:], F32ToF16(0.5))
	sc := q4k[4:16]
	sc[1], sc[5] = 3, 2
	sc[9] = 33&0xF | (17&0xF)<<4 // j=5: sc[j+4]
	sc[1] |= (33 >> 4) << 6      // sc[j-4]
	sc[5] |= (17 >> 4) << 6      // sc[j]
	for l := range 32 {
		q4k[16+l] = 0x70          // chunk 0: sub-block 0 low = 0, sub-block 1 high = 7
		q4k[16+64+l] = 0x0 | 9<<4 // chunk 2: sub-block 5 high = 9
	}
	// Q6_K: d = 0.25, scale[3] = -2; value 48..63 (sub-block 3) come from
	// ql[l+32] low nibble (l = 16..31) and qh[l] bits 2..3: q = 5 + 16*2 - 32 = 5.
	q6k := make([]byte, 210)
	le.PutUint16(q6k[208:], F32ToF16(0.25))
	q6k[192+3] = uint8(0xFE) // int8 -2
	for l := 16; l < 32; l++ {
		q6k[l+32] = 5
		q6k[128+l] = 2 << 2
	}
	for _, c := range []struct {
		typ  DType
		blk  []byte
		want map[int]float32
	}{
		{Q4_0, q40, map[int]float32{0: -16, 15: 14, 16: 14, 31: -16}},
		{Q4_K, q4k, map[int]float32{0: 0, 32: 3*7 - 0.5*2, 63: 3*7 - 0.5*2, 160: 33*9 - 0.5*17, 191: 33*9 - 0.5*17}},
		{Q6_K, q6k, map[int]float32{48: 0.25 * -2 * 5, 63: 0.25 * -2 * 5, 0: 0, 64: 0}},
	} {
		vals, _ := blockGeom(c.typ)
		got := make([]float32, vals)
		DequantizeRow(c.typ, c.blk, got)
		for i, w := range c.want {
			if got[i] != w {
				t.Errorf("%v value %d = %g, want %g", c.typ, i, got[i], w)
			}
		}
	}
}

// TestBlockRoundTripAndDot quantizes random matrices to every block type
// and checks (1) the decoded values are near the originals, (2) the
// quantized product equals the fp32 product of the decoded weights and the
// int8-rounded activations (Q8_0 layout for Q4_0, Q8_K for the k-quants)
// to float rounding, for every T.
// Every kernel level this CPU has is checked (the AVX2 block kernels at
// the AVX2 and AVX-512 levels, the portable loops at the portable one).
func TestBlockRoundTripAndDot(t *testing.T) {
	for _, lv := range kernelLevels() {
		t.Run(lv, func(t *testing.T) {
			defer setKernelLevel(lv)()
			testBlockRoundTripAndDot(t)
		})
	}
}

func testBlockRoundTripAndDot(t *testing.T) {
	pool := NewPool(2)
	defer pool.Close()
	r := rand.New(rand.NewPCG(3, 4))
	for _, c := range []struct {
		typ    DType
		relRMS float64 // bound on rms(decoded - x) / rms(x)
	}{{Q4_0, 0.12}, {Q4_K, 0.12}, {Q5_K, 0.06}, {Q6_K, 0.03}} {
		rows, cols, T := 37, 512, 3
		x := randVec(r, rows*cols)
		b, err := QuantizeBlocks(c.typ, x, rows, cols)
		if err != nil {
			t.Fatal(err)
		}
		w := &Mat{Type: c.typ, Rows: rows, Cols: cols, B: b}
		if err := w.Validate(); err != nil {
			t.Fatal(err)
		}
		dec := make([]float32, rows*cols)
		var se, sx float64
		for i := range rows {
			w.Row(dec[i*cols:(i+1)*cols], i)
		}
		for i := range x {
			se += float64((dec[i] - x[i]) * (dec[i] - x[i]))
			sx += float64(x[i] * x[i])
		}
		if rel := math.Sqrt(se / sx); rel > c.relRMS {
			t.Errorf("%v: relative rms error %.4f > %.4f", c.typ, rel, c.relRMS)
		}
		act := randVec(r, T*cols)
		ar := activationsAsSeen(c.typ, act)
		for _, tt := range []int{1, T} {
			got := make([]float32, tt*rows)
			pool.MatMul(got, w, act, tt, &Scratch{})
			for k := range tt {
				for j := range rows {
					var want, mag float64
					for i := range cols {
						p := float64(dec[j*cols+i]) * float64(ar[k*cols+i])
						want += p
						mag += math.Abs(p)
					}
					if d := math.Abs(float64(got[k*rows+j]) - want); d > 1e-4*mag+1e-6 {
						t.Fatalf("%v T=%d: out[%d][%d] = %g, want %g", c.typ, tt, k, j, got[k*rows+j], want)
					}
				}
			}
			if tt == T { // batched rows equal the single-token pass bitwise
				one := make([]float32, rows)
				pool.MatMul(one, w, act[cols:2*cols], 1, &Scratch{})
				for j := range rows {
					if one[j] != got[rows+j] {
						t.Fatalf("%v: batched row differs from single-token pass", c.typ)
					}
				}
			}
		}
	}
}

// activationsAsSeen is x as a product of weight type typ sees it: int8
// per 32 values (Q8_0 layout) for Q4_0, per 256 (Q8_K) for the k-quants.
func activationsAsSeen(typ DType, x []float32) []float32 {
	ar := make([]float32, len(x))
	if isKQuant(typ) {
		var sc Scratch
		a := sc.prepareK(x, 1, len(x))
		for i := range ar {
			ar[i] = float32(a.q[i]) * a.d[i/QKK]
		}
		return ar
	}
	aq, as := make([]int8, len(x)), NewScales(len(x)/QK)
	QuantizeRows(x, aq, as)
	for i := range ar {
		ar[i] = float32(aq[i]) * as[i/QK]
	}
	return ar
}

func TestBlockRowBytesRefusesPartialBlocks(t *testing.T) {
	if _, err := BlockRowBytes(Q4_K, 64); err == nil {
		t.Fatal("Q4_K row of 64 accepted")
	}
	if n, err := BlockRowBytes(Q6_K, 512); err != nil || n != 420 {
		t.Fatalf("Q6_K 512 = %d, %v", n, err)
	}
	w := &Mat{Type: Q4_K, Rows: 2, Cols: 256, B: make([]byte, 143)}
	if w.Validate() == nil {
		t.Fatal("short Q4_K matrix validated")
	}
}

// BenchmarkBlockDecode is a decode-shaped (T=1) and a prefill-shaped
// (T=64) product per weight type on one thread, 2048×768 (a 110M Llama's
// up projection). cpu-ns/op is the process CPU time per product: on a
// shared, overloaded machine it moves far less than the wall time.
func BenchmarkBlockDecode(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	rows, cols := 2048, 768
	x := randVec(r, rows*cols)
	f := &Mat{Type: F32, Rows: rows, Cols: cols, F: x}
	q8, _ := QuantizeMat(f)
	mats := []*Mat{f, q8}
	for _, typ := range []DType{Q4_0, Q4_K, Q5_K, Q6_K} {
		blk, _ := QuantizeBlocks(typ, x, rows, cols)
		mats = append(mats, &Mat{Type: typ, Rows: rows, Cols: cols, B: blk})
	}
	pool := NewPool(1)
	defer pool.Close()
	for _, T := range []int{1, 64} {
		act := randVec(r, T*cols)
		out := make([]float32, T*rows)
		for _, w := range mats {
			b.Run(fmt.Sprintf("%v/T%d", w.Type, T), func(b *testing.B) {
				sc := &Scratch{}
				b.SetBytes(w.Bytes())
				c0 := cpuTime()
				for b.Loop() {
					pool.MatMul(out, w, act, T, sc)
				}
				if c := cpuTime() - c0; c > 0 {
					b.ReportMetric(float64(c.Nanoseconds())/float64(b.N), "cpu-ns/op")
				}
			})
		}
	}
}
