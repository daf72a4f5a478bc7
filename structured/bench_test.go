package structured

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"
)

// BenchmarkMask reports per-token mask times over random walks of the
// walk schemas, p50 and p99, wall clock and the thread's CPU time (the
// figure that holds on a loaded machine):
//   - fresh: each schema's first request in a process that has seen no
//     other (its vocabulary's shape cache emptied first);
//   - cold: each schema's first request after the ones before it (the
//     shape cache holds what earlier schemas left);
//   - warm: the same schema again (masks cached per state);
//
// and compile time.
func BenchmarkMask(b *testing.B) {
	for _, vname := range []string{"qwen3", "o200k"} {
		b.Run(vname, func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			// The clock's own cost, taken off each CPU figure.
			var cal []time.Duration
			for range 1000 {
				c0 := threadCPU()
				cal = append(cal, threadCPU()-c0)
			}
			slices.Sort(cal)
			overhead := cal[len(cal)/2]
			var v *Vocab
			if vname == "o200k" {
				v = testO200k(b)
			} else {
				v = testQwen3(b)
			}
			var compile []time.Duration
			var wall, cpu [3][]time.Duration // fresh, cold, warm
			walk := func(c *Compiled, k int) {
				rng := rand.New(rand.NewPCG(7, 8))
				m := c.NewMatcher()
				for range 300 {
					c0 := threadCPU()
					t0 := time.Now()
					_, err := m.Mask()
					d := time.Since(t0)
					c1 := threadCPU()
					if err != nil {
						b.Fatal(err)
					}
					wall[k] = append(wall[k], d)
					cpu[k] = append(cpu[k], max(0, c1-c0-overhead))
					id, _ := m.Pick(rng.Uint64())
					if m.Accept(id) != nil || m.Done() {
						break
					}
				}
			}
			bind := func(s string) *Compiled {
				t0 := time.Now()
				g, err := CompileJSONSchema([]byte(s))
				if err != nil {
					b.Fatal(err)
				}
				compile = append(compile, time.Since(t0))
				return Bind(g, v)
			}
			for range b.N {
				v.shapes.reset()
				v.composed.reset()
				var cs []*Compiled
				for _, s := range walkSchemas {
					c := bind(s)
					walk(c, 1)
					cs = append(cs, c)
				}
				for _, c := range cs {
					walk(c, 2)
				}
				for _, s := range walkSchemas {
					v.shapes.reset()
					v.composed.reset()
					walk(bind(s), 0)
				}
			}
			q := func(d []time.Duration, p float64) float64 {
				slices.Sort(d)
				return float64(d[int(float64(len(d)-1)*p)].Nanoseconds()) / 1000
			}
			for k, name := range []string{"fresh", "cold", "warm"} {
				b.ReportMetric(q(wall[k], 0.5), name+"-p50-µs")
				b.ReportMetric(q(wall[k], 0.99), name+"-p99-µs")
				b.ReportMetric(q(cpu[k], 0.5), name+"-cpu-p50-µs")
				b.ReportMetric(q(cpu[k], 0.99), name+"-cpu-p99-µs")
			}
			b.ReportMetric(q(compile, 0.5), "compile-p50-µs")
		})
	}
}
