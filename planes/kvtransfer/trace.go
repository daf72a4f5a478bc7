package kvtransfer

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/tracing"
)

var tracer = tracing.Tracer("github.com/tandemllm/tandem/planes/kvtransfer")

func startSpan(ctx context.Context, name string) (context.Context, trace.Span) {
	return tracing.Child(ctx, tracer, name)
}

// endTransfer puts a transfer's bytes and measured throughput on its span.
func endTransfer(span trace.Span, peer Peer, st Stats, err error) {
	if !span.IsRecording() {
		return
	}
	tracing.SetAttributes(span, attribute.String(tracing.AttrPeer, peer.ID), attribute.Int64(tracing.AttrBytes, st.Bytes),
		attribute.Int(tracing.AttrBlocks, st.Blocks), attribute.Int(tracing.AttrWanted, st.Wanted))
	if busy := (st.Duration - st.Waited).Seconds(); busy > 0 && st.Bytes > 0 {
		tracing.SetAttributes(span, attribute.Float64(tracing.AttrThroughput, float64(st.Bytes)/busy))
	}
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// wireTrace is the traceparent a transfer's Begin carries: the sending
// span's when the request is sampled, else none (version 2 on the wire,
// which receivers of every release read).
func wireTrace(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() || !sc.IsSampled() {
		return ""
	}
	return tracing.Traceparent(sc)
}

// receiveSpan starts the receiver's kv_receive span as a child of the
// sender's kv_transfer span when the Begin carried its trace context. A
// transfer without one starts no span: it would be a root trace of its
// own, cut off from the request's.
func receiveSpan(ctx context.Context, h *begin) (context.Context, trace.Span) {
	if h.Trace == "" {
		return ctx, trace.SpanFromContext(ctx)
	}
	sc, ok := tracing.ParseTraceparent(h.Trace, "")
	if !ok {
		return ctx, trace.SpanFromContext(ctx)
	}
	return tracer.Start(trace.ContextWithRemoteSpanContext(ctx, sc), tracing.SpanKVReceive, trace.WithSpanKind(trace.SpanKindServer))
}

// endReceive puts what arrived on the kv_receive span.
func endReceive(span trace.Span, h *begin, res *result) {
	if !span.IsRecording() {
		return
	}
	tracing.SetAttributes(span, attribute.String(tracing.AttrPeer, h.Sender), attribute.Int(tracing.AttrBlocks, res.Imported),
		attribute.Int64(tracing.AttrBytes, int64(res.Imported)*int64(h.BlockBytes)),
		attribute.Int(tracing.AttrWanted, len(h.Tokens)/h.BlockSize-h.From))
	if res.Code != "" {
		span.SetStatus(codes.Error, res.Code+": "+res.Message)
	}
	span.End()
}

// endPrefill closes the prefill leg's compute span.
func endPrefill(span trace.Span, req *engine.Request, err error) {
	if !span.IsRecording() {
		return
	}
	tracing.SetAttributes(span, attribute.String(tracing.AttrRequestID, req.ID), attribute.Int(tracing.AttrPromptTokens, len(req.Prompt)))
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
