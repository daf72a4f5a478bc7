package tracing

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// BenchmarkRequestSpans: the spans of one sampled request as the frontend
// and a worker make them (httpapi's http.request and its six children with
// their attributes, the request plane's trace context out and in, the
// worker's server span), set as httpapi sets them (SetAttributes),
// through the switching tracer to the lean
// Provider, with the batches encoded every 64 requests (a discarding
// sender): the tracing work of a request in isolation, which
// BenchmarkTracingCost (serve) measures inside real requests.
func BenchmarkRequestSpans(b *testing.B) {
	lean := NewLeanProvider(func(context.Context, []byte) error { return nil }, Config{SampleRatio: 1, Service: "bench"}, nil)
	defer func() { Use(nil); _ = lean.Shutdown(context.Background()) }()
	UseSampled(lean, 1)
	tr := Tracer("github.com/tandemllm/tandem/httpapi")
	const method = "/tandem.requestplane.v1.Worker/Generate"
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		ctx, root := tr.Start(context.Background(), SpanHTTP, trace.WithSpanKind(trace.SpanKindServer))
		SetAttributes(root, attribute.String("http.request.method", "POST"), attribute.String("http.route", "/v1/completions"))
		_, s := Child(ctx, tr, SpanTemplate)
		s.End()
		_, s = Child(ctx, tr, SpanTokenize)
		SetAttributes(s, attribute.Int(AttrPromptTokens, 128))
		s.End()
		SetAttributes(root, attribute.String(AttrRequestID, "req-0123456789"), attribute.String(AttrModel, "m"), attribute.Int(AttrPromptTokens, 128))
		_, s = Child(ctx, tr, SpanQueue)
		s.End()
		_, s = Child(ctx, tr, SpanRoute)
		SetAttributes(s, attribute.Int(AttrAttempt, 0), attribute.String(AttrWorker, "w1"), attribute.Int(AttrCandidates, 2),
			attribute.Int(AttrPredicted, 64), attribute.String(AttrPolicy, "kv"), attribute.String(AttrReason, "overlap"),
			attribute.Float64(AttrCost, 1.5), attribute.Int(AttrTies, 0), attribute.Float64(AttrRunnerUpCost, 2.5))
		s.End()
		fctx, fs := Child(ctx, tr, SpanFirstToken)
		// The request's TraceContext, as requestplane converts it.
		sc := trace.SpanContextFromContext(fctx)
		psc, _ := RemoteSpanContext(sc.TraceID(), sc.SpanID(), uint32(sc.TraceFlags()), sc.TraceState().String())
		_, ws := StartCall(context.Background(), method, psc)
		EndCall(ws, nil)
		fs.End()
		_, s = Child(ctx, tr, SpanStream)
		SetAttributes(s, attribute.Int(AttrOutputTokens, 16), attribute.String(AttrFinish, "length"), attribute.Int(AttrCachedTokens, 64))
		s.End()
		SetAttributes(root, attribute.Int("http.response.status_code", 200))
		root.End()
		if n++; n%64 == 0 {
			_ = lean.ForceFlush(context.Background())
		}
	}
}
