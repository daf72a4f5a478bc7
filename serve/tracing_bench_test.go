package serve

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tandemllm/tandem/tracing"
)

// BenchmarkTracingCost: one streaming request through the frontend and the
// gRPC request plane (instant engine), with tracing off, at sampling 0 and
// at sampling 1 (an in-memory exporter behind the SDK's batcher, as
// production has an OTLP one), interleaved request by request in one run.
// Reports each mode's p50 TTFT and the differences from off.
func BenchmarkTracingCost(b *testing.B) {
	sys, _, _ := startBench(b, "grpc", 1)
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	mk := func(r float64) *sdktrace.TracerProvider {
		return sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewInMemoryExporter()),
			sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(r))))
	}
	modes := []struct {
		name string
		tp   *sdktrace.TracerProvider
	}{{"off", nil}, {"ratio0", mk(0)}, {"ratio1", mk(1)}}
	b.Cleanup(func() {
		tracing.Use(nil)
		for _, m := range modes[1:] {
			_ = m.tp.Shutdown(context.Background())
		}
	})
	lat := make([][]time.Duration, len(modes))
	for b.Loop() {
		for i, m := range modes {
			if m.tp == nil {
				tracing.Use(nil)
			} else {
				tracing.Use(m.tp)
			}
			d, err := ttftHTTP(c, sys.URL())
			if err != nil {
				b.Fatal(err)
			}
			lat[i] = append(lat[i], d)
		}
	}
	tracing.Use(nil)
	p50 := func(ds []time.Duration) float64 {
		s := slices.Clone(ds)
		slices.Sort(s)
		return float64(s[len(s)/2].Microseconds())
	}
	off := p50(lat[0])
	b.ReportMetric(off, "off-p50-µs")
	b.ReportMetric(p50(lat[1]), "ratio0-p50-µs")
	b.ReportMetric(p50(lat[2]), "ratio1-p50-µs")
	b.ReportMetric(p50(lat[1])-off, "ratio0-added-µs")
	b.ReportMetric(p50(lat[2])-off, "ratio1-added-µs")
}
