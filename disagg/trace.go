package disagg

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/tandemllm/tandem/tracing"
)

var tracer = tracing.Tracer("github.com/tandemllm/tandem/disagg")

func startSpan(ctx context.Context, name string) (context.Context, trace.Span) {
	return tracing.Child(ctx, tracer, name)
}

// endDecision puts the decider's reckoning on its span: the choice and
// why, both estimates, and what moved.
func endDecision(span trace.Span, d *Decision) {
	if !span.IsRecording() {
		return
	}
	tracing.SetAttributes(span,
		attribute.String(tracing.AttrChoice, d.Choice),
		attribute.String(tracing.AttrDisaggReason, d.Reason),
		attribute.String(tracing.AttrWorker, d.DecodeWorker),
		attribute.String(tracing.AttrPrefillWorker, d.PrefillWorker),
		attribute.Float64(tracing.AttrLocalSeconds, d.LocalSeconds),
		attribute.Float64(tracing.AttrRemoteSeconds, d.RemoteSeconds),
		attribute.Float64(tracing.AttrEstXferSeconds, d.EstTransferSeconds),
		attribute.Int64(tracing.AttrBytes, d.TransferBytes),
		attribute.Float64(tracing.AttrLinkBps, d.LinkBytesPerSec),
		attribute.Int(tracing.AttrBlocks, d.MissingBlocks),
	)
	if d.Fallback != "" {
		tracing.SetAttributes(span, attribute.String(tracing.AttrFallback, d.Fallback))
		span.SetStatus(codes.Error, "remote prefill failed: "+d.Fallback)
	}
	span.End()
}
