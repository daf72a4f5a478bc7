//go:build goexperiment.simd && amd64

package kernels

import (
	"simd/archsimd"
	"testing"
	"time"
)

// BenchmarkVectorWidth measures what 512-bit vectors would buy the
// k-quant kernels, which run 256-bit code at the AVX-512 level: the
// integer dot step they are built from (VPMADDUBSW, then VPMADDWD against
// the sub-block scales, then an add), in four independent chains over 64
// activation loads, at 256 bits, at 512 bits, and at 512 bits with each
// vector joined from two 256-bit halves (what a two-token tile has to
// load: two tokens' activations side by side, as the two halves' lanes
// would keep each token's sums bitwise what the 256-bit kernel gives).
// Reports multiply-adds per ns for each and the 512-bit ones' ratios to
// 256 bits, timed in turn in the same run.
func BenchmarkVectorWidth(b *testing.B) {
	if supported() != levelAVX512 {
		b.Skip("no AVX-512")
	}
	var w32 [32]uint8
	var w64 [64]uint8
	var act [64][64]int8
	for i := range w64 {
		w64[i] = uint8(i % 16)
		if i < 32 {
			w32[i] = w64[i]
		}
	}
	for i := range act {
		for j := range act[i] {
			act[i][j] = int8(i*7 + j - 100)
		}
	}
	var t256, t512, tJoin time.Duration
	var s8 archsimd.Int32x8
	var s16 archsimd.Int32x16
	const reps = 256 // calls per clock reading (one call is too short to time alone)
	for b.Loop() {
		s := time.Now()
		for range reps {
			s8 = s8.Add(width256(&w32, &act))
		}
		m := time.Now()
		for range reps {
			s16 = s16.Add(width512(&w64, &act))
		}
		j := time.Now()
		for range reps {
			s16 = s16.Add(width512Join(&w64, &act))
		}
		e := time.Now()
		t256, t512, tJoin = t256+m.Sub(s), t512+j.Sub(m), tJoin+e.Sub(j)
	}
	archsimd.ClearAVXUpperBits()
	var sink [16]int32
	s16.Store(&sink)
	archsimd.ClearAVXUpperBits()
	if sink[0] == 42 {
		b.Log(sink)
	}
	n := float64(b.N) * reps
	macs := func(bytes float64, d time.Duration) float64 { return bytes * n / float64(d.Nanoseconds()) }
	b.ReportMetric(macs(64*32, t256), "mac/ns-256")
	b.ReportMetric(macs(64*64, t512), "mac/ns-512")
	b.ReportMetric(macs(64*64, tJoin), "mac/ns-512-joined")
	b.ReportMetric(macs(64*64, t512)/macs(64*32, t256), "ratio-512")
	b.ReportMetric(macs(64*64, tJoin)/macs(64*32, t256), "ratio-512-joined")
}

func width256(w *[32]uint8, act *[64][64]int8) archsimd.Int32x8 {
	x := archsimd.LoadUint8x32(w)
	c := archsimd.BroadcastInt16x16(3)
	var s0, s1, s2, s3 archsimd.Int32x8
	for i := 0; i < 64; i += 4 {
		s0 = s0.Add(x.DotProductPairsSaturated(archsimd.LoadInt8x32((*[32]int8)(act[i][:32]))).DotProductPairs(c))
		s1 = s1.Add(x.DotProductPairsSaturated(archsimd.LoadInt8x32((*[32]int8)(act[i+1][:32]))).DotProductPairs(c))
		s2 = s2.Add(x.DotProductPairsSaturated(archsimd.LoadInt8x32((*[32]int8)(act[i+2][:32]))).DotProductPairs(c))
		s3 = s3.Add(x.DotProductPairsSaturated(archsimd.LoadInt8x32((*[32]int8)(act[i+3][:32]))).DotProductPairs(c))
	}
	return s0.Add(s1).Add(s2).Add(s3)
}

func width512(w *[64]uint8, act *[64][64]int8) archsimd.Int32x16 {
	x := archsimd.LoadUint8x64(w)
	c := archsimd.BroadcastInt16x32(3)
	var s0, s1, s2, s3 archsimd.Int32x16
	for i := 0; i < 64; i += 4 {
		s0 = s0.Add(x.DotProductPairsSaturated(archsimd.LoadInt8x64(&act[i])).DotProductPairs(c))
		s1 = s1.Add(x.DotProductPairsSaturated(archsimd.LoadInt8x64(&act[i+1])).DotProductPairs(c))
		s2 = s2.Add(x.DotProductPairsSaturated(archsimd.LoadInt8x64(&act[i+2])).DotProductPairs(c))
		s3 = s3.Add(x.DotProductPairsSaturated(archsimd.LoadInt8x64(&act[i+3])).DotProductPairs(c))
	}
	return s0.Add(s1).Add(s2).Add(s3)
}

func width512Join(w *[64]uint8, act *[64][64]int8) archsimd.Int32x16 {
	x := archsimd.LoadUint8x64(w)
	c := archsimd.BroadcastInt16x32(3)
	join := func(i, j int) archsimd.Int8x64 {
		var z archsimd.Int8x64
		return z.SetLo(archsimd.LoadInt8x32((*[32]int8)(act[i][:32]))).SetHi(archsimd.LoadInt8x32((*[32]int8)(act[j][:32])))
	}
	var s0, s1, s2, s3 archsimd.Int32x16
	for i := 0; i < 64; i += 4 {
		s0 = s0.Add(x.DotProductPairsSaturated(join(i, (i+32)%64)).DotProductPairs(c))
		s1 = s1.Add(x.DotProductPairsSaturated(join(i+1, (i+33)%64)).DotProductPairs(c))
		s2 = s2.Add(x.DotProductPairsSaturated(join(i+2, (i+34)%64)).DotProductPairs(c))
		s3 = s3.Add(x.DotProductPairsSaturated(join(i+3, (i+35)%64)).DotProductPairs(c))
	}
	return s0.Add(s1).Add(s2).Add(s3)
}
