package tracing

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"
	"unsafe"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/tandemllm/tandem/internal/otlptest"
)

// recordSpans makes the same spans through any provider: a server span
// under a client's remote parent with every attribute type, children with
// an error status and RecordError, an event, a renamed span, a replaced
// attribute, a Ok status that an Error cannot undo, a second tracer.
func recordSpans(tp trace.TracerProvider) {
	h := http.Header{"Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
	ctx := FromHTTP(context.Background(), h)
	tr := tp.Tracer("tandem/a", trace.WithInstrumentationVersion("v1"))
	ctx, root := tr.Start(ctx, "root", trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attribute.String("s", "x")))
	root.SetAttributes(attribute.Bool("b", true), attribute.Int("i", -7), attribute.Float64("f", 2.5),
		attribute.StringSlice("ss", []string{"p", "q"}), attribute.Int64Slice("is", []int64{1, 2}),
		attribute.BoolSlice("bs", []bool{true, false}), attribute.Float64Slice("fs", []float64{0.5}),
		attribute.String("s", "replaced"))
	_, c1 := tr.Start(ctx, "child-error")
	c1.RecordError(errors.New("boom"))
	c1.SetStatus(codes.Error, "it failed")
	c1.End()
	_, c2 := tr.Start(ctx, "before-rename", trace.WithSpanKind(trace.SpanKindClient))
	c2.SetName("child-ok")
	c2.AddEvent("tick", trace.WithAttributes(attribute.Int("n", 3)))
	c2.SetStatus(codes.Ok, "ignored")
	c2.SetStatus(codes.Error, "too late")
	c2.End()
	_, c3 := tp.Tracer("tandem/b").Start(ctx, "other-scope")
	c3.End()
	// Children through Child, which the lean provider keeps in the root's
	// family (lean.go): with attributes, an event, an error, a child of
	// another scope under a child, more than a family holds, one that
	// ends after the root and one that never ends (never exported).
	kctx, k1 := Child(ctx, tr, "kid")
	k1.SetAttributes(attribute.Int("k", 1), attribute.Int("k", 2))
	k1.AddEvent("kid-event", trace.WithAttributes(attribute.String("e", "v")))
	_, k2 := Child(kctx, tp.Tracer("tandem/b"), "kid-of-kid")
	k2.RecordError(errors.New("kid boom"))
	k2.SetStatus(codes.Error, "kid failed")
	k2.SetName("kid-of-kid-renamed")
	k2.End()
	k1.SetStatus(codes.Ok, "")
	k1.End()
	k1.End()
	for i := range kidCap + 2 {
		_, k := Child(ctx, tr, fmt.Sprintf("kid-%02d", i))
		k.End()
	}
	_, late := Child(ctx, tr, "late-kid")
	_, _ = Child(ctx, tr, "never-ended")
	root.SetStatus(codes.Unset, "")
	root.End()
	root.End() // a second End does nothing
	late.SetAttributes(attribute.Bool("late", true))
	late.End()
}

// normalize makes two exports comparable: ids become the names of the
// spans they point at, times are checked for order and zeroed, and
// spans, scopes and attributes are sorted.
func normalize(t *testing.T, reqs []*collectortrace.ExportTraceServiceRequest) *tracepb.ResourceSpans {
	out := &tracepb.ResourceSpans{}
	scopes := map[string]*tracepb.ScopeSpans{}
	names := map[string]string{}
	for _, req := range reqs {
		for _, rs := range req.GetResourceSpans() {
			out.Resource = rs.GetResource()
			for _, ss := range rs.GetScopeSpans() {
				key := ss.GetScope().GetName()
				if scopes[key] == nil {
					scopes[key] = &tracepb.ScopeSpans{Scope: ss.GetScope(), SchemaUrl: ss.GetSchemaUrl()}
				}
				scopes[key].Spans = append(scopes[key].Spans, ss.GetSpans()...)
				for _, s := range ss.GetSpans() {
					names[string(s.GetSpanId())] = s.GetName()
				}
			}
		}
	}
	sortKV := func(kvs []*commonpb.KeyValue) {
		slices.SortFunc(kvs, func(a, b *commonpb.KeyValue) int { return cmp.Compare(a.GetKey(), b.GetKey()) })
	}
	for _, ss := range scopes {
		for _, s := range ss.Spans {
			if len(s.TraceId) != 16 || len(s.SpanId) != 8 {
				t.Errorf("%s: trace id %x, span id %x", s.Name, s.TraceId, s.SpanId)
			}
			if s.StartTimeUnixNano == 0 || s.EndTimeUnixNano < s.StartTimeUnixNano {
				t.Errorf("%s: start %d end %d", s.Name, s.StartTimeUnixNano, s.EndTimeUnixNano)
			}
			if p, ok := names[string(s.ParentSpanId)]; ok {
				s.ParentSpanId = []byte(p)
			}
			s.TraceId, s.SpanId, s.StartTimeUnixNano, s.EndTimeUnixNano = []byte{1}, []byte{2}, 1, 2
			for _, e := range s.Events {
				if e.TimeUnixNano == 0 {
					t.Errorf("%s: event %s without a time", s.Name, e.Name)
				}
				e.TimeUnixNano = 1
			}
			sortKV(s.Attributes)
		}
		slices.SortFunc(ss.Spans, func(a, b *tracepb.Span) int { return cmp.Compare(a.Name, b.Name) })
		out.ScopeSpans = append(out.ScopeSpans, ss)
	}
	slices.SortFunc(out.ScopeSpans, func(a, b *tracepb.ScopeSpans) int { return cmp.Compare(a.Scope.GetName(), b.Scope.GetName()) })
	return out
}

// TestLeanMatchesSDK: the same spans through the SDK with its own OTLP
// exporter and through the lean Provider reach a collector as the same
// OTLP messages, ids and times aside.
func TestLeanMatchesSDK(t *testing.T) {
	cfg := Config{SampleRatio: 1, Service: "tandem-test", Instance: "w1"}
	sdkCol, sdkAddr := otlptest.Start(t)
	exp, err := otlptracegrpc.New(context.Background(), otlptracegrpc.WithEndpoint(sdkAddr), otlptracegrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	sdk := NewProvider(exp, cfg)
	recordSpans(sdk)
	if err := sdk.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	leanCol, leanAddr := otlptest.Start(t)
	client, err := newOTLPClient(leanAddr, insecure.NewCredentials())
	if err != nil {
		t.Fatal(err)
	}
	defer client.close()
	lean := NewLeanProvider(client.send, cfg, nil)
	recordSpans(lean)
	if err := lean.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	want, got := normalize(t, sdkCol.Requests(t)), normalize(t, leanCol.Requests(t))
	if n := len(got.GetScopeSpans()); n != 2 {
		t.Fatalf("lean export has %d scopes, want 2: %v", n, got)
	}
	if !proto.Equal(want, got) {
		t.Errorf("lean export differs from the SDK's:\nsdk:  %v\nlean: %v", want, got)
	}
}

// TestLeanFamily: a sampled request's children through Child share one
// family: the queue holds the root alone until a child ends after it, and
// a request of a root and six children costs a handful of allocations,
// each no larger than its size class says.
func TestLeanFamily(t *testing.T) {
	// What a request allocates is what it costs inside a real one
	// (docs/benchmarks/tracing.md): a field added here must come with a
	// reason to move a size class.
	for _, c := range []struct {
		what      string
		size, max uintptr
	}{{"leanSpan", unsafe.Sizeof(leanSpan{}), 184}, {"family", unsafe.Sizeof(family{}), 2304}, {"rootSpan", unsafe.Sizeof(rootSpan{}), 640}} {
		if c.size > c.max {
			t.Errorf("%s is %d bytes, over %d", c.what, c.size, c.max)
		}
	}
	p := NewLeanProvider(func(context.Context, []byte) error { return nil }, Config{SampleRatio: 1}, nil)
	defer p.Shutdown(context.Background())
	tr := p.Tracer("t")
	queued := func() int {
		p.q.mu.Lock()
		defer p.q.mu.Unlock()
		return len(p.q.spans)
	}
	ctx, root := tr.Start(context.Background(), "root")
	kctx, k := Child(ctx, tr, "a")
	_, kk := Child(kctx, tr, "b")
	_, late := Child(ctx, tr, "late")
	if ls := k.(*leanSpan); &ls.root.leanSpan != root.(*leanSpan) || kk.(*leanSpan).root != ls.root || ls.isRoot() {
		t.Fatal("children are not in the root's family")
	}
	if k.SpanContext().TraceID() != root.SpanContext().TraceID() || k.SpanContext().SpanID() == root.SpanContext().SpanID() {
		t.Fatal("a child's ids are not its own in the root's trace")
	}
	kk.End()
	k.End()
	root.End()
	if n := queued(); n != 1 {
		t.Fatalf("after the root ended %d entries are queued, want 1", n)
	}
	late.End()
	if n := queued(); n != 2 {
		t.Fatalf("after a child ended late %d entries are queued, want 2", n)
	}
	if _, c := Child(ctx, tr, "after"); !c.(*leanSpan).isRoot() {
		t.Error("a child started after its root ended is in the family")
	}
	if err := p.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		ctx, root := tr.Start(context.Background(), "root")
		for range 6 {
			_, s := Child(ctx, tr, "child")
			s.End()
		}
		root.End()
	})
	// The root and the family: each span is its own context.
	if allocs > 2 {
		t.Errorf("a root and six children cost %.0f allocations, want ≤ 2", allocs)
	}
}

// TestLeanSpanIsContext: the context a lean span returns is the one it
// was started in with the span current: its values, deadline and
// cancellation pass through, and a child's context holds the child.
func TestLeanSpanIsContext(t *testing.T) {
	p := NewLeanProvider(func(context.Context, []byte) error { return nil }, Config{SampleRatio: 1}, nil)
	defer p.Shutdown(context.Background())
	tr := p.Tracer("t")
	type key struct{}
	deadline := time.Now().Add(time.Hour)
	base, cancel := context.WithDeadline(context.WithValue(context.Background(), key{}, "v"), deadline)
	ctx, root := tr.Start(base, "root")
	kctx, kid := Child(ctx, tr, "kid")
	for _, c := range []struct {
		name string
		ctx  context.Context
		span trace.Span
	}{{"root", ctx, root}, {"kid", kctx, kid}} {
		if got := trace.SpanFromContext(c.ctx); got != c.span {
			t.Errorf("%s: the context's span is %v, want its own", c.name, got)
		}
		if c.ctx.Value(key{}) != "v" {
			t.Errorf("%s: the parent context's value is lost", c.name)
		}
		if d, ok := c.ctx.Deadline(); !ok || !d.Equal(deadline) {
			t.Errorf("%s: deadline %v %v, want the parent's", c.name, d, ok)
		}
	}
	if sc := trace.SpanContextFromContext(kctx); !sc.Equal(kid.SpanContext()) {
		t.Errorf("the kid's context carries %v, want %v", sc, kid.SpanContext())
	}
	kid.End()
	root.End()
	cancel()
	select {
	case <-kctx.Done():
		if !errors.Is(kctx.Err(), context.Canceled) {
			t.Errorf("err %v after cancel", kctx.Err())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("cancelling the parent did not reach the kid's context")
	}
}

// TestLeanSampling: ratio 0.5 keeps about half of new traces, by the
// SDK's rule on the trace id; an unsampled root still gets ids that
// travel on; a sampled parent's children are all kept.
func TestLeanSampling(t *testing.T) {
	var mu sync.Mutex
	batches := 0
	p := NewLeanProvider(func(context.Context, []byte) error { mu.Lock(); batches++; mu.Unlock(); return nil }, Config{SampleRatio: 0.5}, nil)
	defer p.Shutdown(context.Background())
	tr := p.Tracer("t")
	kept := 0
	const n = 4000
	for range n {
		ctx, s := tr.Start(context.Background(), "root")
		sc := s.SpanContext()
		if !sc.IsValid() || !trace.SpanContextFromContext(ctx).Equal(sc) {
			t.Fatal("a root span without ids in its context")
		}
		if s.IsRecording() != sc.IsSampled() {
			t.Fatal("recording and sampled disagree")
		}
		if sc.IsSampled() {
			kept++
			_, c := tr.Start(ctx, "child")
			if !c.IsRecording() || c.SpanContext().TraceID() != sc.TraceID() {
				t.Fatal("a sampled parent's child is not kept in its trace")
			}
			c.End()
		}
		s.End()
	}
	if kept < n*45/100 || kept > n*55/100 {
		t.Errorf("ratio 0.5 kept %d of %d", kept, n)
	}
	if err := p.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if batches == 0 {
		t.Error("nothing exported")
	}
}

// TestLeanExportFailure: a collector that is down costs the batch and a
// log line, and the next batch goes out again.
func TestLeanExportFailure(t *testing.T) {
	client, err := newOTLPClient("127.0.0.1:1", insecure.NewCredentials())
	if err != nil {
		t.Fatal(err)
	}
	defer client.close()
	p := NewLeanProvider(client.send, Config{SampleRatio: 1}, nil)
	_, s := p.Tracer("t").Start(context.Background(), "x")
	s.End()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.ForceFlush(ctx); err == nil {
		t.Error("an export to a closed port succeeded")
	}
	_ = p.Shutdown(ctx)
}

func TestPartialSuccess(t *testing.T) {
	resp, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{PartialSuccess: &collectortrace.ExportTracePartialSuccess{RejectedSpans: 3, ErrorMessage: "too big"}})
	if n, msg := partialSuccess(resp); n != 3 || msg != "too big" {
		t.Errorf("partialSuccess = %d, %q", n, msg)
	}
	if n, msg := partialSuccess(nil); n != 0 || msg != "" {
		t.Errorf("empty response: %d, %q", n, msg)
	}
	if n, _ := partialSuccess([]byte{0x0a, 0xff}); n != 0 {
		t.Errorf("truncated response: %d", n)
	}
}

// FuzzPartialSuccess: whatever a collector replies, the reply parser
// returns without panicking, and on a reply the protobuf library decodes
// it reads the same rejected count and message.
func FuzzPartialSuccess(f *testing.F) {
	ok, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{PartialSuccess: &collectortrace.ExportTracePartialSuccess{RejectedSpans: 3, ErrorMessage: "too big"}})
	f.Add(ok)
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		n, msg := partialSuccess(b)
		var want collectortrace.ExportTraceServiceResponse
		if proto.Unmarshal(b, &want) != nil {
			return
		}
		if ps := want.GetPartialSuccess(); n != ps.GetRejectedSpans() || msg != ps.GetErrorMessage() {
			t.Errorf("partialSuccess = %d, %q; protobuf reads %d, %q", n, msg, ps.GetRejectedSpans(), ps.GetErrorMessage())
		}
	})
}
