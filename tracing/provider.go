package tracing

import (
	"context"
	"reflect"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// global is the process's tracer provider, installed as OpenTelemetry's
// global one when this package loads. It forwards to the provider Use set
// last, and with none set it is a pass-through: Start returns the caller's
// context and span unchanged. Two reasons for it over otel's own global:
//
//   - otel's global delegates tracers obtained before the first
//     SetTracerProvider to that first provider for good, so tracers held
//     in package variables could never be switched (the tracing benchmark
//     switches off, ratio 0 and ratio 1 in one run);
//   - otel's no-op tracer replaces a remote parent with an empty span,
//     so with tracing off the request plane would stop propagating a client's
//     traceparent to the workers; the pass-through keeps it.
var global = &switchProvider{}

func init() {
	otel.SetTracerProvider(global)
	// W3C trace context whether or not this process exports spans: a
	// client's traceparent always travels on.
	otel.SetTextMapPropagator(Propagator())
}

// Use makes tp the provider of every tracer in the process (nil: none,
// spans pass through); tp's sampler must be parent-based, as NewProvider's
// is. Tests call it; Start calls UseSampled.
func Use(tp trace.TracerProvider) { UseSampled(tp, 1) }

// UseSampled is Use for a provider whose sampler keeps rootRatio of new
// traces. At rootRatio 0 a span with no parent passes through without
// reaching the SDK: at sampling 0 a request that brought no sampled
// traceparent costs what it costs with tracing off (no ids drawn, no span
// allocated, nothing propagated or logged).
func UseSampled(tp trace.TracerProvider, rootRatio float64) {
	if tp == nil {
		global.cur.Store(nil)
		return
	}
	global.cur.Store(&providerBox{tp: tp, noRoots: rootRatio <= 0})
}

type providerBox struct {
	tp      trace.TracerProvider
	noRoots bool // the sampler drops every trace that has no parent
}

type switchProvider struct {
	embedded.TracerProvider
	cur atomic.Pointer[providerBox]
}

func (p *switchProvider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return &switchTracer{p: p, name: name, opts: opts}
}

type tracerBox struct {
	box *providerBox
	t   trace.Tracer
}

type switchTracer struct {
	embedded.Tracer
	p     *switchProvider
	name  string
	opts  []trace.TracerOption
	cache atomic.Pointer[tracerBox]
	made  sync.Map // trace.TracerProvider → trace.Tracer: see tracerOf
}

// tracerOf returns tp's tracer for t, made once per provider: a process
// that switches providers back and forth (BenchmarkTracingCost does,
// request by request, through UseSampled) gets its tracers back instead
// of making new ones, which a process with one provider never does. Only
// providers of pointer type are kept, since a map key must be comparable;
// the map holds every such provider ever installed, a handful in a
// process's life.
func (t *switchTracer) tracerOf(tp trace.TracerProvider) trace.Tracer {
	if reflect.TypeOf(tp).Kind() != reflect.Pointer {
		return tp.Tracer(t.name, t.opts...)
	}
	if v, ok := t.made.Load(tp); ok {
		return v.(trace.Tracer)
	}
	v, _ := t.made.LoadOrStore(tp, tp.Tracer(t.name, t.opts...))
	return v.(trace.Tracer)
}

func (t *switchTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	b := t.p.cur.Load()
	if b == nil {
		return ctx, trace.SpanFromContext(ctx)
	}
	// The sampler is parent-based: under a parent that is not sampled
	// the SDK would return a non-recording span after drawing an id and
	// allocating; passing the parent through is the same trace for a
	// fraction of the cost. Likewise a root at ratio 0.
	if psc := trace.SpanContextFromContext(ctx); psc.IsValid() {
		if !psc.IsSampled() {
			return ctx, trace.SpanFromContext(ctx)
		}
	} else if b.noRoots {
		return ctx, trace.SpanFromContext(ctx)
	}
	return t.current(b).Start(ctx, name, opts...)
}

// current returns t's tracer of b's provider, from t's cache when b is
// the box it last met (always, in a process that installs one provider).
func (t *switchTracer) current(b *providerBox) trace.Tracer {
	c := t.cache.Load()
	if c == nil || c.box != b {
		c = &tracerBox{box: b, t: t.tracerOf(b.tp)}
		t.cache.Store(c)
	}
	return c.t
}

// leanOf returns the lean tracer t starts its spans with now, or nil when
// it starts them with another provider's (or passes them through).
//
// A switching tracer whose cache holds an older box is resolved here, not
// answered nil (as it once was): UseSampled makes a new box on
// every call, and BenchmarkTracingCost calls it before every request, so
// the worker's tracer, which is asked only through leanOf (StartCall),
// never had a fresh cache there and took Start's option-parsing path on
// every sampled call, a cost visible in the request's p50
// (docs/benchmarks/tracing.md). A process
// with one provider took that path on its first call only.
func leanOf(t trace.Tracer) *leanTracer {
	switch t := t.(type) {
	case *leanTracer:
		return t
	case *switchTracer:
		if b := t.p.cur.Load(); b != nil {
			lt, _ := t.current(b).(*leanTracer)
			return lt
		}
	}
	return nil
}
