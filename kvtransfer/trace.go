package kvtransfer

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/tracing"
)

var tracer = tracing.Tracer("github.com/tandemllm/tandem/kvtransfer")

func startSpan(ctx context.Context, name string) (context.Context, trace.Span) {
	return tracing.Child(ctx, tracer, name)
}

// endTransfer puts a transfer's bytes and measured throughput on its span.
func endTransfer(span trace.Span, peer Peer, st Stats, err error) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.String(tracing.AttrPeer, peer.ID), attribute.Int64(tracing.AttrBytes, st.Bytes),
		attribute.Int(tracing.AttrBlocks, st.Blocks), attribute.Int(tracing.AttrWanted, st.Wanted))
	if busy := (st.Duration - st.Waited).Seconds(); busy > 0 && st.Bytes > 0 {
		span.SetAttributes(attribute.Float64(tracing.AttrThroughput, float64(st.Bytes)/busy))
	}
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// endPrefill closes the prefill leg's compute span.
func endPrefill(span trace.Span, req *engine.Request, err error) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.String(tracing.AttrRequestID, req.ID), attribute.Int(tracing.AttrPromptTokens, len(req.Prompt)))
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
