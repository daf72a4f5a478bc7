package serve

import (
	"context"
	"math/rand/v2"
	"net/http"
	"runtime/metrics"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/trace"

	"github.com/tandemllm/tandem/internal/otlptest"
	"github.com/tandemllm/tandem/tracing"
)

// BenchmarkTracingCost: one streaming request (16 tokens, one SSE chunk
// each) through the real HTTP frontend and the gRPC request plane to an
// instant engine, with tracing off, at sampling 0 and at sampling 1 (the
// production provider, tracing.Dial's, exporting over OTLP/gRPC to a
// collector stub on loopback), and at sampling 1 through the OpenTelemetry
// SDK and its own OTLP exporter (tracing.NewProvider, the baseline), and
// at sampling 1 with the production provider's batches encoded but sent
// nowhere ("discard": what the OTLP client and the collector stub, which
// shares this process, add), interleaved request by request in one run.
// Reports off's p50 of the whole request (first byte sent to the stream's
// end) and of TTFT, and each mode's difference from off; the same for the
// whole request's p90 and mean.
func BenchmarkTracingCost(b *testing.B) {
	sys, _, _ := startBenchWith(b, "grpc", 1, true)
	// One collector per provider, so each one's spans and bytes are
	// counted apart.
	stub, addr := otlptest.Start(b)
	sdkStub, sdkAddr := otlptest.Start(b)
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	// The production provider (tracing.Dial, what tracing.Start installs)
	// at ratios 0 and 1, and the OpenTelemetry SDK with its own OTLP
	// exporter at ratio 1 (tracing.NewProvider), the baseline the lean
	// provider has to beat to be worth its code.
	lean := func(r float64) *tracing.Provider {
		tp, err := tracing.Dial(tracing.Config{Endpoint: "http://" + addr, SampleRatio: r, Service: "bench"}, nil)
		if err != nil {
			b.Fatal(err)
		}
		return tp
	}
	exp, err := otlptracegrpc.New(context.Background(), otlptracegrpc.WithEndpoint(sdkAddr), otlptracegrpc.WithInsecure())
	if err != nil {
		b.Fatal(err)
	}
	type provider interface {
		trace.TracerProvider
		ForceFlush(context.Context) error
		Shutdown(context.Context) error
	}
	modes := []struct {
		name  string
		tp    provider
		ratio float64
	}{{"off", nil, 0}, {"ratio0", lean(0), 0}, {"ratio1", lean(1), 1},
		{"sdk-ratio1", tracing.NewProvider(exp, tracing.Config{SampleRatio: 1, Service: "bench"}), 1},
		{"discard", tracing.NewLeanProvider(func(context.Context, []byte) error { return nil }, tracing.Config{SampleRatio: 1, Service: "bench"}, nil), 1}}
	use := func(i int) {
		if modes[i].tp == nil {
			tracing.Use(nil)
		} else {
			useSampled(modes[i].tp, modes[i].ratio)
		}
	}
	b.Cleanup(func() {
		tracing.Use(nil)
		for _, m := range modes[1:] {
			_ = m.tp.Shutdown(context.Background())
		}
	})
	// Warm every mode (connections, the exporter's channel, pools).
	for i := range modes {
		use(i)
		for range 20 {
			if _, err := ttftHTTP(c, sys.URL()); err != nil {
				b.Fatal(err)
			}
		}
	}
	total := make([][]time.Duration, len(modes))
	ttft := make([][]time.Duration, len(modes))
	// The modes take turns in a new random order each iteration. In a
	// fixed order (or a rotated one, which keeps who follows whom) the
	// mode after the SDK's paid for its garbage and wake-ups: off, first,
	// came out slower than a second copy of itself, run after run, which
	// hid that much of every mode's cost (docs/benchmarks.md, "Figures
	// behind tests' bounds"). A fixed seed keeps runs comparable.
	order := rand.New(rand.NewPCG(1, 2))
	for b.Loop() {
		for _, i := range order.Perm(len(modes)) {
			use(i)
			start := time.Now()
			d, err := ttftHTTP(c, sys.URL())
			if err != nil {
				b.Fatal(err)
			}
			total[i] = append(total[i], time.Since(start))
			ttft[i] = append(ttft[i], d)
		}
	}
	// Heap allocations per request, in blocks of one mode (interleaved,
	// the sampled mode's spans flushed to the collector inside its
	// block): unlike latency, a count that a loaded machine does not blur.
	// (Process CPU time per block was tried too: on 16 cores the
	// scheduler's spinning threads swamp it.)
	allocs := make([]uint64, len(modes))
	const block, blocks = 50, 6
	for range blocks {
		for _, i := range order.Perm(len(modes)) {
			m := modes[i]
			use(i)
			a0 := heapObjects()
			for range block {
				if _, err := ttftHTTP(c, sys.URL()); err != nil {
					b.Fatal(err)
				}
			}
			if m.tp != nil {
				_ = m.tp.ForceFlush(context.Background())
			}
			allocs[i] += heapObjects() - a0
		}
	}
	perReq := func(i int) float64 { return (float64(allocs[i]) - float64(allocs[0])) / (block * blocks) }
	b.ReportMetric(float64(allocs[0])/(block*blocks), "off-allocs/req")
	for i, m := range modes[1:] {
		b.ReportMetric(perReq(i+1), m.name+"-allocs-added/req")
	}
	tracing.Use(nil)
	pct := func(ds []time.Duration, q float64) float64 {
		s := slices.Clone(ds)
		slices.Sort(s)
		return float64(s[int(q*float64(len(s)-1))].Nanoseconds()) / 1e3
	}
	p50 := func(ds []time.Duration) float64 { return pct(ds, 0.5) }
	mean := func(ds []time.Duration) float64 {
		var t time.Duration
		for _, d := range ds {
			t += d
		}
		return float64(t.Nanoseconds()) / 1e3 / float64(len(ds))
	}
	// Each mode against off: p50 of the whole request and of TTFT, and
	// the tail and the mean, where a loaded machine shows what the median
	// hides (wake-ups, GC of the spans' garbage).
	p90 := func(ds []time.Duration) float64 { return pct(ds, 0.9) }
	for _, st := range []struct {
		off, added string // metric names: off-<off>-µs, <mode><added>-added-µs
		of         func([]time.Duration) float64
		ds         [][]time.Duration
	}{{"p50", "", p50, total}, {"ttft-p50", "-ttft", p50, ttft}, {"p90", "-p90", p90, total}, {"mean", "-mean", mean, total}} {
		base := st.of(st.ds[0])
		b.ReportMetric(base, "off-"+st.off+"-µs")
		for i, m := range modes[1:] {
			b.ReportMetric(st.of(st.ds[i+1])-base, m.name+st.added+"-added-µs")
		}
	}
	_ = modes[2].tp.ForceFlush(context.Background())
	_ = modes[3].tp.ForceFlush(context.Background())
	sampled := float64(len(total[2]) + 20 + block*blocks) // each sampled mode's requests
	b.ReportMetric(float64(stub.Spans(b))/sampled, "spans/sampled-req")
	b.ReportMetric(float64(stub.Bytes())/sampled, "otlp-bytes/sampled-req")
	b.ReportMetric(float64(sdkStub.Spans(b))/sampled, "sdk-spans/sampled-req")
	b.ReportMetric(float64(sdkStub.Bytes())/sampled, "sdk-otlp-bytes/sampled-req")
}

// heapObjects is the count of heap objects allocated so far (all
// goroutines).
func heapObjects() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:objects"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
