package kvtransfer

import (
	"context"
	"log/slog"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/tracing"
)

// TestTransferJoinsTrace: a sampled request's transfer carries its trace
// context on the wire (a version 3 Begin), and the receiver's kv_receive
// span is the sender's kv_transfer span's child in the same trace, with
// what arrived; an unsampled one starts no span on the receiver.
func TestTransferJoinsTrace(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
	tracing.UseSampled(tp, 1)
	t.Cleanup(func() { tracing.Use(nil); _ = tp.Shutdown(context.Background()) })

	const bs, bpt = 16, 4096
	src, dst := newMocker(t, bpt), newMocker(t, bpt)
	p := prompt(16*4+3, 5)
	prefill(t, src, p)
	board := health.NewBoard(slog.New(slog.DiscardHandler), nil)
	a := newNode(t, "p0", src, 0, board, false)
	b := newNode(t, "d0", dst, 0, board, true)

	ctx, root := tracer.Start(context.Background(), "request")
	xctx, xspan := startSpan(ctx, tracing.SpanKVTransfer)
	st, err := a.Send(xctx, Peer{ID: "d0", Addr: b.Addr()}, p[:4*bs], 0)
	endTransfer(xspan, Peer{ID: "d0"}, st, err)
	root.End()
	if err != nil {
		t.Fatal(err)
	}
	recv := waitSpan(t, rec, tracing.SpanKVReceive)
	if recv.SpanContext().TraceID() != xspan.SpanContext().TraceID() {
		t.Fatalf("kv_receive is in trace %v, the transfer in %v", recv.SpanContext().TraceID(), xspan.SpanContext().TraceID())
	}
	if recv.Parent().SpanID() != xspan.SpanContext().SpanID() || !recv.Parent().IsRemote() {
		t.Errorf("kv_receive's parent %v is not the sender's kv_transfer span %v", recv.Parent().SpanID(), xspan.SpanContext().SpanID())
	}
	attrs := map[string]string{}
	for _, kv := range recv.Attributes() {
		attrs[string(kv.Key)] = kv.Value.Emit()
	}
	if attrs[tracing.AttrBlocks] != "4" || attrs[tracing.AttrPeer] != "p0" || attrs[tracing.AttrBytes] != "262144" {
		t.Errorf("kv_receive attributes %v", attrs)
	}

	// Not sampled: the Begin carries nothing and the receiver starts no
	// span (nor a root trace of its own).
	before := len(rec.Ended())
	p2 := prompt(16*2+3, 9)
	prefill(t, src, p2)
	tracing.UseSampled(tp, 0)
	if _, err := a.Send(context.Background(), Peer{ID: "d0", Addr: b.Addr()}, p2[:2*bs], 0); err != nil {
		t.Fatal(err)
	}
	// The receiver ends its span before it answers, so Send's return
	// orders the count.
	if n := len(rec.Ended()) - before; n != 0 {
		t.Errorf("an unsampled transfer recorded %d spans", n)
	}
}

func waitSpan(t *testing.T, rec *tracetest.SpanRecorder, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, s := range rec.Ended() {
			if s.Name() == name {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s span", name)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
