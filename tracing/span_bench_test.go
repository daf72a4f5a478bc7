package tracing

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// BenchmarkSpan: one child span started and ended through the switching
// tracer, under a sampled parent (what each of a sampled request's spans
// costs on the request's goroutine) and under an unsampled one, with
// NewProvider's batcher in front of an exporter that drops nothing.
func BenchmarkSpan(b *testing.B) {
	tp := NewProvider(tracetest.NewNoopExporter(), Config{SampleRatio: 1, Service: "bench"})
	defer func() { Use(nil); _ = tp.Shutdown(context.Background()) }()
	tr := Tracer("bench")
	for _, tc := range []struct {
		name  string
		ratio float64
	}{{"sampled", 1}, {"unsampled", 0}} {
		b.Run(tc.name, func(b *testing.B) {
			UseSampled(tp, tc.ratio)
			ctx, root := tr.Start(context.Background(), "root")
			if tc.ratio == 0 {
				ctx = context.Background()
			}
			b.ReportAllocs()
			for b.Loop() {
				_, s := Child(ctx, tr, "child")
				s.End()
			}
			root.End()
		})
	}
}
