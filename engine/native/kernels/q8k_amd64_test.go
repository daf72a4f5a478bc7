//go:build goexperiment.simd && amd64

package kernels

import (
	"fmt"
	"math/rand/v2"
	"simd/archsimd"
	"testing"
	"time"
	"unsafe"
)

// stepLanes runs the AVX2 step of typ on one super-block x against the
// 256 activations y (bsums computed from y), one row and two rows (y
// twice), and returns the lanes each stored.
func stepLanes(typ DType, x []byte, y *[QKK]int8) (one, two, two2 kLanes) {
	var bs [16]int16
	for k := range bs {
		for _, v := range y[16*k : 16*k+16] {
			bs[k] += int16(v)
		}
	}
	px, py, pb := unsafe.Pointer(&x[0]), unsafe.Pointer(&y[0]), unsafe.Pointer(&bs[0])
	var z archsimd.Float32x8
	var acc [4]archsimd.Float32x8
	switch typ {
	case Q4_K:
		q4kStep(px, py, pb, z, z, z, &one)
		q4kStep2(px, py, pb, py, pb, z, z, &acc, &two, &two2)
	case Q5_K:
		q5kStep(px, py, pb, z, z, z, &one)
		q5kStep2(px, py, pb, py, pb, z, z, &acc, &two, &two2)
	case Q6_K:
		q6kStep(px, py, pb, z, z, &one)
		q6kStep2(px, py, pb, py, pb, z, z, &acc, &two, &two2)
	}
	archsimd.ClearAVXUpperBits()
	return one, two, two2
}

func laneSums(l kLanes) (s, m int64) {
	for k := range 8 {
		s += int64(l[0][k])
		m += int64(l[1][k])
	}
	return s, m
}

// checkSuper: the vector steps' integer sums equal the portable ones
// exactly, and the two-row step gives the one-row lanes for both rows.
func checkSuper(t *testing.T, typ DType, x []byte, y *[QKK]int8) {
	t.Helper()
	var bs [16]int16
	for k := range bs {
		for _, v := range y[16*k : 16*k+16] {
			bs[k] += int16(v)
		}
	}
	var ws, wm int32
	switch typ {
	case Q4_K:
		ws, wm = q4kSums(x, y[:], bs[:])
	case Q5_K:
		ws, wm = q5kSums(x, y[:], bs[:])
	case Q6_K:
		ws = q6kSums(x, y[:], bs[:])
	}
	one, two, two2 := stepLanes(typ, x, y)
	if gs, gm := laneSums(one); gs != int64(ws) || gm != int64(wm) {
		t.Fatalf("%v: vector sums (%d, %d), portable (%d, %d)", typ, gs, gm, ws, wm)
	}
	if one != two || one != two2 {
		t.Fatalf("%v: two-row step's lanes differ from the one-row step's", typ)
	}
}

var kTypes = []DType{Q4_K, Q5_K, Q6_K}

// TestKQuantSumsExact: extreme blocks (every weight value and scale at
// its largest, activations at ±127) and random bytes, every type.
func TestKQuantSumsExact(t *testing.T) {
	if level < levelAVX2 {
		t.Skip("no AVX2")
	}
	fill := func(v int8) (y [QKK]int8) {
		for i := range y {
			y[i] = v
		}
		return
	}
	r := rand.New(rand.NewPCG(21, 22))
	for _, typ := range kTypes {
		_, size := blockGeom(typ)
		ones, zeros := make([]byte, size), make([]byte, size)
		for i := range ones {
			ones[i] = 0xFF
		}
		neg := make([]byte, size) // Q6_K: scales −128, values 0
		for i := range neg {
			neg[i] = 0x80
		}
		for _, c := range []struct {
			name string
			x    []byte
			y    [QKK]int8
		}{
			{"max-max", ones, fill(127)},
			{"max-min", ones, fill(-127)},
			{"zero-weights", zeros, fill(-127)},
			{"high-bits", neg, fill(127)},
			{"high-bits-neg", neg, fill(-127)},
		} {
			t.Run(fmt.Sprintf("%v/%s", typ, c.name), func(t *testing.T) { checkSuper(t, typ, c.x, &c.y) })
		}
		for range 500 {
			x := make([]byte, size)
			var y [QKK]int8
			for i := range x {
				x[i] = byte(r.IntN(256))
			}
			for i := range y {
				y[i] = int8(r.IntN(255) - 127)
			}
			checkSuper(t, typ, x, &y)
		}
	}
}

// FuzzKQuantSums: any weight block bytes (the first byte picks the type),
// any activations quantizeSuperK can write ([−127, 127]).
func FuzzKQuantSums(f *testing.F) {
	if level < levelAVX2 {
		f.Skip("no AVX2")
	}
	f.Add(make([]byte, 1+210+QKK))
	seed := make([]byte, 1+210+QKK)
	for i := range seed {
		seed[i] = 0xFF
	}
	f.Add(seed)
	f.Add([]byte("\x02\x7f\x81\x80\x01\xff\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 {
			return
		}
		typ := kTypes[int(b[0])%len(kTypes)]
		_, size := blockGeom(typ)
		b = b[1:]
		x := make([]byte, size)
		copy(x, b)
		var y [QKK]int8
		for i := range y {
			if size+i < len(b) {
				y[i] = max(-127, int8(b[size+i]))
			}
		}
		checkSuper(t, typ, x, &y)
	})
}

// BenchmarkKQuantKernels times the Q8_K-activation k-quant kernels
// against the Q8_0-activation ones they replaced (kquantold_amd64_test.go),
// alternating in the same run, one thread, on a 110M Llama's up
// projection (2048×768). Only the products are timed; each kernel's
// activations are quantized once, outside the loop. ratio is old/new
// wall time, cpu-ratio old/new process CPU time (above 1: the new kernel
// is faster); on a shared machine the CPU times move far less. On an
// AVX-512 CPU, avx512-ratio is the AVX2 level's time over the AVX-512
// level's for the same kernel (the 512-bit four-token steps, prefill).
func BenchmarkKQuantKernels(b *testing.B) {
	if level < levelAVX2 {
		b.Skip("no AVX2")
	}
	r := rand.New(rand.NewPCG(1, 1))
	rows, cols := 2048, 768
	wf := randVec(r, rows*cols)
	for _, typ := range []DType{Q4_K, Q6_K} {
		blk, err := QuantizeBlocks(typ, wf, rows, cols)
		if err != nil {
			b.Fatal(err)
		}
		w := &Mat{Type: typ, Rows: rows, Cols: cols, B: blk}
		for _, T := range []int{1, 64} {
			x := randVec(r, T*cols)
			G := T * cols / QK
			xq, xs := make([]int8, len(x)), NewScales(G)
			QuantizeRows(x, xq, xs)
			xsum, xm := make([]int32, G), make([]float32, G)
			GroupSums(xq, xsum)
			for g := range xm {
				xm[g] = xs[g] * float32(xsum[g])
			}
			var sc Scratch
			a := sc.prepareK(x, T, cols)
			out := make([]float32, T*rows)
			b.Run(fmt.Sprintf("%v/T%d", typ, T), func(b *testing.B) {
				var told, tnew, cold, cnew, t256 time.Duration
				has512 := level == levelAVX512
				for b.Loop() {
					c0, s := cpuTime(), time.Now()
					matKQuantOldAVX2(out, w, xq, xs, xm, 0, rows, T)
					c1, m := cpuTime(), time.Now()
					matKQuantAVX2(out, w, a, 0, rows, T)
					c2, e := cpuTime(), time.Now()
					told += m.Sub(s)
					tnew += e.Sub(m)
					cold += c1 - c0
					cnew += c2 - c1
					if has512 {
						// The same kernel at the AVX2 level: 256-bit
						// four-token steps (q4kStep4, q6kStep4) where the
						// AVX-512 level runs the 512-bit ones.
						restore := setKernelLevel("avx2")
						s = time.Now()
						matKQuantAVX2(out, w, a, 0, rows, T)
						t256 += time.Since(s)
						restore()
					}
				}
				n := float64(b.N)
				if has512 {
					b.ReportMetric(float64(t256.Nanoseconds())/n, "avx2-level-ns/op")
					b.ReportMetric(float64(t256)/float64(tnew), "avx512-ratio")
				}
				b.ReportMetric(float64(told.Nanoseconds())/n, "old-ns/op")
				b.ReportMetric(float64(tnew.Nanoseconds())/n, "new-ns/op")
				b.ReportMetric(float64(cold.Nanoseconds())/n, "old-cpu-ns/op")
				b.ReportMetric(float64(cnew.Nanoseconds())/n, "new-cpu-ns/op")
				b.ReportMetric(float64(told)/float64(tnew), "ratio")
				if cnew > 0 {
					b.ReportMetric(float64(cold)/float64(cnew), "cpu-ratio")
				}
			})
		}
	}
}
