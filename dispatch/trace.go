package dispatch

import (
	"context"
	"math"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/tandemllm/tandem/router"
	"github.com/tandemllm/tandem/tracing"
)

// tracer is the global provider's: no-op until tracing.Start installs
// the SDK (see package tracing).
var tracer = tracing.Tracer("github.com/tandemllm/tandem/dispatch")

func child(ctx context.Context, name string) (context.Context, trace.Span) {
	return tracing.Child(ctx, tracer, name)
}

// endRoute records the router's decision on the route span.
func endRoute(span trace.Span, rt *router.Route, attempt int, err error) {
	if !span.IsRecording() {
		return
	}
	if err != nil {
		tracing.SetAttributes(span, attribute.Int(tracing.AttrAttempt, attempt))
		span.SetStatus(codes.Error, err.Error())
		span.End()
		return
	}
	// Built on the stack: tracing.SetAttributes copies what it keeps.
	d := rt.Decision
	attrs := append(make([]attribute.KeyValue, 0, 9), attribute.Int(tracing.AttrAttempt, attempt),
		attribute.String(tracing.AttrWorker, d.WorkerID),
		attribute.Int(tracing.AttrCandidates, d.Candidates),
		attribute.Int(tracing.AttrPredicted, d.PredictedCachedTokens))
	if d.Reason != "" {
		attrs = append(attrs, attribute.String(tracing.AttrPolicy, d.CostModel), attribute.String(tracing.AttrReason, d.Reason),
			attribute.Float64(tracing.AttrCost, d.Cost), attribute.Int(tracing.AttrTies, d.Ties))
		if !math.IsNaN(d.RunnerUpCost) {
			attrs = append(attrs, attribute.Float64(tracing.AttrRunnerUpCost, d.RunnerUpCost))
		}
	}
	tracing.SetAttributes(span, attrs...)
	span.End()
}
