package kernels

import (
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkVecOps times the element-wise helpers that have a vector form
// at the AVX-512 level (SwiGLU, the Q8_K activation quantizer, fp16
// narrowing and widening for the KV cache) against their portable loops,
// alternating in one run, on a prefill's worth of data: 512 tokens of the
// 110M shape's 2048-wide hidden layer (SwiGLU, the quantizer) and of its
// 768-wide K/V rows (fp16). vec-ratio is portable time ÷ the level's time.
func BenchmarkVecOps(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	hidden := randVec(r, 512*2048)
	kvRow := randVec(r, 512*768)
	g, u := make([]float32, len(hidden)), randVec(r, len(hidden))
	q, d, bs := make([]int8, len(hidden)), make([]float32, len(hidden)/QKK), make([]int16, len(hidden)/bsumsPer)
	h, w := make([]uint16, len(kvRow)), make([]float32, len(kvRow))
	F32ToF16Row(h, kvRow)
	ops := []struct {
		name          string
		level, portab func()
	}{
		{"swiglu", func() { copy(g, hidden); SwiGLU(g, u) }, func() { copy(g, hidden); swigluPortable(g, u) }},
		{"quantize-q8k", func() { quantizeRowsK(hidden, q, d, bs) }, func() { quantizeRowsKPortable(hidden, q, d, bs) }},
		{"f32-to-f16", func() { F32ToF16Row(h, kvRow) }, func() { f32ToF16RowPortable(h, kvRow) }},
		{"f16-to-f32", func() { F16ToF32Rows(w, 768, h, 768, 512, 768) }, func() { f16RowsPortable(w, 768, h, 768, 512, 768) }},
	}
	for _, op := range ops {
		b.Run(op.name, func(b *testing.B) {
			var tl, tp time.Duration
			for b.Loop() {
				t0 := time.Now()
				op.level()
				t1 := time.Now()
				op.portab()
				tl, tp = tl+t1.Sub(t0), tp+time.Since(t1)
			}
			b.ReportMetric(float64(tl.Nanoseconds())/float64(b.N), "level-ns/op")
			b.ReportMetric(float64(tp.Nanoseconds())/float64(b.N), "portable-ns/op")
			b.ReportMetric(float64(tp)/float64(tl), "vec-ratio")
		})
	}
}
