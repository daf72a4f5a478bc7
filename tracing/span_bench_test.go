package tracing

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// BenchmarkSpan: one child span started and ended through the switching
// tracer, under a sampled parent (what each of a sampled request's spans
// costs on the request's goroutine) and under an unsampled one, with the
// lean Provider (encoding each batch and discarding it) and with the SDK
// (NewProvider's batcher in front of an exporter that drops nothing).
// Past the root's first kidCap children these are spans of their own, not
// a family's (lean.go): BenchmarkRequestSpans measures a request's family.
func BenchmarkSpan(b *testing.B) {
	sdk := NewProvider(tracetest.NewNoopExporter(), Config{SampleRatio: 1, Service: "bench"})
	lean := NewLeanProvider(func(context.Context, []byte) error { return nil }, Config{SampleRatio: 1, Service: "bench"}, nil)
	defer func() { Use(nil); _ = sdk.Shutdown(context.Background()); _ = lean.Shutdown(context.Background()) }()
	tr := Tracer("bench")
	for _, tc := range []struct {
		name  string
		tp    trace.TracerProvider
		ratio float64
	}{{"lean/sampled", lean, 1}, {"lean/unsampled", lean, 0}, {"sdk/sampled", sdk, 1}, {"sdk/unsampled", sdk, 0}} {
		tp := tc.tp
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
