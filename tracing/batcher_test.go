package tracing

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// TestBatcher: ended spans reach the exporter on flush, on a full batch
// and at shutdown; beyond the queue's bound they are dropped, counted and
// logged.
func TestBatcher(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	b := newBatcherSized(exp, time.Hour, 4, 6, log)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(b))
	tr := tp.Tracer("t")
	span := func(tr interface {
		Start(context.Context, string, ...trace.SpanStartOption) (context.Context, trace.Span)
	}, n int) {
		for range n {
			_, s := tr.Start(context.Background(), "s")
			s.End()
		}
	}
	span(tr, 2)
	if err := tp.ForceFlush(context.Background()); err != nil || len(exp.GetSpans()) != 2 {
		t.Fatalf("after ForceFlush: %d spans, err %v", len(exp.GetSpans()), err)
	}
	span(tr, 4) // a full batch wakes the export loop
	deadline := time.Now().Add(10 * time.Second)
	for len(exp.GetSpans()) != 6 {
		if time.Now().After(deadline) {
			t.Fatalf("a full batch was not exported: %d spans", len(exp.GetSpans()))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A batch larger than the queue: nothing wakes the loop, the queue
	// fills and the rest is dropped.
	exp2 := tracetest.NewInMemoryExporter()
	b2 := newBatcherSized(exp2, time.Hour, 100, 6, log)
	tp2 := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(b2))
	span(tp2.Tracer("t"), 9)
	if got := b2.dropped.Load(); got != 3 {
		t.Errorf("dropped %d, want 3", got)
	}
	if err := tp2.ForceFlush(context.Background()); err != nil || len(exp2.GetSpans()) != 6 {
		t.Errorf("after the drops: %d spans exported, err %v", len(exp2.GetSpans()), err)
	}
	_ = tp2.Shutdown(context.Background())
	if !strings.Contains(logs.String(), "dropped spans") || !strings.Contains(logs.String(), "spans=3") {
		t.Errorf("no log of the dropped spans: %s", logs.String())
	}
}
