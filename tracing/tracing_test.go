package tracing

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg       Config
		ok        bool
		plaintext bool
	}{
		{Config{SampleRatio: 1}, true, false},
		{Config{SampleRatio: -0.1}, false, false},
		{Config{SampleRatio: 1.5}, false, false},
		{Config{Endpoint: "127.0.0.1:4317", SampleRatio: 1}, true, true},
		{Config{Endpoint: "localhost:4317", SampleRatio: 1}, true, true},
		{Config{Endpoint: "collector:4317", SampleRatio: 1}, true, false},
		{Config{Endpoint: "http://collector:4317", SampleRatio: 1}, true, true},
		{Config{Endpoint: "https://127.0.0.1:4317", SampleRatio: 1}, true, false},
		{Config{Endpoint: "ftp://collector:4317", SampleRatio: 1}, false, false},
		{Config{Endpoint: "collector", SampleRatio: 1}, false, false},
	} {
		err := tc.cfg.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("%+v: err %v, want ok %v", tc.cfg, err, tc.ok)
		}
		if tc.ok && tc.cfg.Endpoint != "" {
			if _, pt, _ := splitEndpoint(tc.cfg.Endpoint); pt != tc.plaintext {
				t.Errorf("%s: plaintext %v, want %v", tc.cfg.Endpoint, pt, tc.plaintext)
			}
		}
	}
}

// With no provider, a client's traceparent passes through spans and
// reaches log lines.
func TestPassThroughAndLogs(t *testing.T) {
	Use(nil)
	h := http.Header{"Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
	ctx := FromHTTP(context.Background(), h)
	ctx, span := Tracer("t").Start(ctx, "x")
	defer span.End()
	if got := TraceID(ctx); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("trace id %q after a pass-through span", got)
	}
	var buf bytes.Buffer
	log := slog.New(LogHandler(slog.NewTextHandler(&buf, nil)))
	log.InfoContext(ctx, "hello", "request_id", "r1")
	log.Info("no context")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if !strings.Contains(lines[0], "trace_id=4bf92f3577b34da6a3ce929d0e0e4736") || !strings.Contains(lines[0], "span_id=00f067aa0ba902b7") {
		t.Errorf("log line without the trace: %s", lines[0])
	}
	if strings.Contains(lines[1], "trace_id") {
		t.Errorf("a line without a request context got a trace id: %s", lines[1])
	}
}

// TestSwitchKeepsTracers: switching back to a provider (through Use, as
// BenchmarkTracingCost does) finds the tracer made for it before, not a
// new one.
func TestSwitchKeepsTracers(t *testing.T) {
	a := NewLeanProvider(func(context.Context, []byte) error { return nil }, Config{SampleRatio: 1}, nil)
	b := NewLeanProvider(func(context.Context, []byte) error { return nil }, Config{SampleRatio: 1}, nil)
	defer func() { Use(nil); _ = a.Shutdown(context.Background()); _ = b.Shutdown(context.Background()) }()
	tr := global.Tracer("switch").(*switchTracer)
	made := func(tp trace.TracerProvider) trace.Tracer {
		Use(tp)
		_, s := tr.Start(context.Background(), "x")
		s.End()
		return tr.cache.Load().t
	}
	first := made(a)
	if made(b) == first {
		t.Fatal("the tracer of provider a served provider b")
	}
	if made(a) != first {
		t.Error("switching back to provider a made a new tracer")
	}
}

// TestSetAttributes: tracing.SetAttributes reaches a lean span with no
// allocation, an SDK span as its own SetAttributes does, and leaves a
// span that does not record alone.
func TestSetAttributes(t *testing.T) {
	kvs := []attribute.KeyValue{attribute.String("a", "x"), attribute.Int("b", 2)}
	lean := NewLeanProvider(func(context.Context, []byte) error { return nil }, Config{SampleRatio: 1}, nil)
	defer lean.Shutdown(context.Background())
	_, ls := lean.Tracer("t").Start(context.Background(), "lean")
	exp := tracetest.NewInMemoryExporter()
	sdk := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer sdk.Shutdown(context.Background())
	_, ss := sdk.Tracer("t").Start(context.Background(), "sdk")
	SetAttributes(ls, kvs...)
	SetAttributes(ss, kvs...)
	SetAttributes(trace.SpanFromContext(context.Background()), kvs...)
	if got := ls.(*leanSpan).attrs; !slices.Equal(got, kvs) {
		t.Errorf("lean span holds %v, want %v", got, kvs)
	}
	ss.End()
	if got := exp.GetSpans(); len(got) != 1 || !slices.Equal(got[0].Attributes, kvs) {
		t.Errorf("SDK span exported %v, want its attributes %v", got, kvs)
	}
	if a := testing.AllocsPerRun(100, func() {
		SetAttributes(ls, attribute.String("a", "y"), attribute.Int("b", 3))
	}); a != 0 {
		t.Errorf("setting two attributes on a lean span allocates %.0f times, want 0", a)
	}
}

// TestSwitchResolvesTracers: a switching tracer finds its tracer of the
// installed provider by itself, whether or not it started a span since
// that provider was installed (the worker's StartCall asks leanOf first,
// and must take its fast path right after every UseSampled), including a
// tracer made after the provider was installed.
func TestSwitchResolvesTracers(t *testing.T) {
	lean := NewLeanProvider(func(context.Context, []byte) error { return nil }, Config{SampleRatio: 1}, nil)
	defer func() { Use(nil); _ = lean.Shutdown(context.Background()) }()
	before := global.Tracer("resolve-before")
	UseSampled(lean, 1)
	after := global.Tracer("resolve-after")
	for _, tc := range []struct {
		name string
		tr   trace.Tracer
	}{{"made before install", before}, {"made after install", after}, {"the request plane's", grpcTracer}} {
		if lt := leanOf(tc.tr); lt == nil || lt.p != lean {
			t.Errorf("%s: leanOf = %v, want a tracer of the installed lean provider", tc.name, lt)
		}
	}
	var tid trace.TraceID
	tid[0] = 1
	var sid trace.SpanID
	sid[0] = 2
	parent, _ := RemoteSpanContext(tid, sid, uint32(trace.FlagsSampled), "")
	const method = "/tandem.requestplane.v1.Worker/Generate"
	// A new box before each call, as BenchmarkTracingCost installs one per
	// request: the box, the tracer's cache entry and the server span (the
	// option-parsing path of Start, which this used to take, makes 8).
	allocs := testing.AllocsPerRun(100, func() {
		UseSampled(lean, 1)
		_, sp := StartCall(context.Background(), method, parent)
		EndCall(sp, nil)
	})
	if allocs > 3 {
		t.Errorf("UseSampled + StartCall + EndCall: %v allocations, want at most 3 (the box, the cache entry, the span)", allocs)
	}
	Use(nil)
	UseSampled(lean, 0)
	_, sp := StartCall(context.Background(), method, trace.SpanContext{})
	if sp.IsRecording() {
		t.Error("at sampling 0 a call without a parent recorded a span")
	}
}
