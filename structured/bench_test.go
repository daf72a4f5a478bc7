package structured

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// BenchmarkMask reports per-token mask times over random walks of the
// walk schemas: cold (first request of a schema: states computed as met)
// and warm (the same schema again, its compiled grammar cached), p50 and
// p99, and compile time.
func BenchmarkMask(b *testing.B) {
	for _, vname := range []string{"qwen3", "o200k"} {
		b.Run(vname, func(b *testing.B) {
			var v *Vocab
			if vname == "o200k" {
				v = testO200k(b)
			} else {
				v = testQwen3(b)
			}
			var cold, warm, compile []time.Duration
			for range b.N {
				for _, s := range walkSchemas {
					t0 := time.Now()
					g, err := CompileJSONSchema([]byte(s))
					if err != nil {
						b.Fatal(err)
					}
					compile = append(compile, time.Since(t0))
					c := Bind(g, v)
					for pass := range 2 {
						rng := rand.New(rand.NewPCG(7, 8))
						m := c.NewMatcher()
						for range 300 {
							t0 := time.Now()
							mask, err := m.Mask()
							d := time.Since(t0)
							if err != nil {
								b.Fatal(err)
							}
							_ = mask
							if pass == 0 {
								cold = append(cold, d)
							} else {
								warm = append(warm, d)
							}
							id, _ := m.Pick(rng.Uint64())
							if m.Accept(id) != nil || m.Done() {
								break
							}
						}
					}
				}
			}
			q := func(d []time.Duration, p float64) float64 {
				slices.Sort(d)
				return float64(d[int(float64(len(d)-1)*p)].Nanoseconds()) / 1000
			}
			b.ReportMetric(q(cold, 0.5), "cold-p50-µs")
			b.ReportMetric(q(cold, 0.99), "cold-p99-µs")
			b.ReportMetric(q(warm, 0.5), "warm-p50-µs")
			b.ReportMetric(q(warm, 0.99), "warm-p99-µs")
			b.ReportMetric(q(compile, 0.5), "compile-p50-µs")
		})
	}
}
