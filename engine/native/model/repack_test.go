package model

import (
	"encoding/binary"
	"math"
	"testing"
	"time"

	"github.com/tandemllm/tandem/engine/native/kernels"
)

// TestRepackQ8: the parallel repack of Q8_0 blocks gives every quant and
// scale of the file, for sizes below, at and across the goroutine split.
func TestRepackQ8(t *testing.T) {
	for _, groups := range []int{1, 7, 1 << 15, 3<<15 + 5} {
		r := NewRand(uint64(groups))
		data := make([]byte, 34*groups)
		for i := range data {
			data[i] = byte(r.Uint64())
		}
		for g := range groups { // finite fp16 scales
			data[34*g+1] &= 0x3b
		}
		q, s := make([]int8, 32*groups), kernels.NewScales(groups)
		repackQ8(q, s, data)
		for g := range groups {
			if want := kernels.F16ToF32(binary.LittleEndian.Uint16(data[34*g:])); s[g] != want {
				t.Fatalf("%d groups: scale %d is %v, want %v", groups, g, s[g], want)
			}
			for i := range 32 {
				if q[32*g+i] != int8(data[34*g+2+i]) {
					t.Fatalf("%d groups: quant %d of group %d is %d, want %d", groups, i, g, q[32*g+i], int8(data[34*g+2+i]))
				}
			}
		}
	}
}

// TestF16Table: the repack's fp16 table is kernels.F16ToF32 bit for bit,
// NaNs and subnormals included.
func TestF16Table(t *testing.T) {
	tab := f16Table()
	for h := range 1 << 16 {
		if got, want := math.Float32bits(tab[h]), math.Float32bits(kernels.F16ToF32(uint16(h))); got != want {
			t.Fatalf("fp16 %#04x: table %#08x, F16ToF32 %#08x", h, got, want)
		}
	}
}

// TestQ8Slab: tensors taken from the slab do not overlap, keep NewScales's
// zero spare capacity, and a slab too small (or none) falls back to
// separate allocations.
func TestQ8Slab(t *testing.T) {
	sizes := []int{32, 64 * 32, 96}
	sl := &q8Slab{q: make([]int8, 0, 64+64*32+64), s: make([]float32, 0, 1+64+3+3*kernels.ScalePad)}
	var qs [][]int8
	for _, n := range sizes {
		q, s := sl.take(n)
		if len(q) != n || len(s) != n/kernels.QK || cap(s)-len(s) < kernels.ScalePad {
			t.Fatalf("take(%d): %d quants, %d scales (cap %d)", n, len(q), len(s), cap(s))
		}
		for _, x := range s[len(s):cap(s)] {
			if x != 0 {
				t.Fatalf("take(%d): spare scale %v", n, x)
			}
		}
		for i := range q {
			q[i] = int8(len(qs) + 1)
		}
		for i := range s {
			s[i] = float32(len(qs) + 1)
		}
		qs = append(qs, q)
	}
	for i, q := range qs {
		for _, x := range q {
			if x != int8(i+1) {
				t.Fatalf("tensor %d overwritten: %d", i, x)
			}
		}
	}
	if q, s := sl.take(32); len(q) != 32 || len(s) != 1 || cap(s) != 1+kernels.ScalePad {
		t.Fatalf("fallback: %d quants, %d scales (cap %d)", len(q), len(s), cap(s))
	}
	var none *q8Slab
	if q, s := none.take(64); len(q) != 64 || len(s) != 2 {
		t.Fatalf("nil slab: %d quants, %d scales", len(q), len(s))
	}
}

// BenchmarkF16Scales widens a tensor's worth of Q8_0 scales (strided 34
// bytes apart, as in the file) through the repack's table and through
// kernels.F16ToF32, alternately in one run, and reports the table's time
// over the conversion's as table/f16tof32. The scales are a quantizer's
// (a group's largest magnitude over 127, normal fp16 numbers), so the
// conversion's branches predict as well as they do on real files.
func BenchmarkF16Scales(b *testing.B) {
	const groups = 1 << 16
	r := NewRand(1)
	data := make([]byte, 34*groups)
	for g := range groups {
		absmax := 0.01 + 0.5*float32(r.Uint64()>>40)/(1<<24)
		binary.LittleEndian.PutUint16(data[34*g:], kernels.F32ToF16(absmax/127))
	}
	s := make([]float32, groups)
	tab := f16Table()
	var tTab, tConv time.Duration
	for b.Loop() {
		t0 := time.Now()
		for g := range groups {
			s[g] = tab[binary.LittleEndian.Uint16(data[34*g:])]
		}
		t1 := time.Now()
		for g := range groups {
			s[g] = kernels.F16ToF32(binary.LittleEndian.Uint16(data[34*g:]))
		}
		tTab, tConv = tTab+t1.Sub(t0), tConv+time.Since(t1)
	}
	b.ReportMetric(float64(tTab)/float64(tConv), "table/f16tof32")
}
