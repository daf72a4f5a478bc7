package tracing

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"math"
	"math/rand/v2"
	"reflect"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	"google.golang.org/protobuf/encoding/protowire"
)

// Provider is the tracer provider Start installs: OpenTelemetry's API
// (trace.Tracer, trace.Span) over spans that are plain structs, encoded
// straight into OTLP protobuf bytes when their batch is exported.
//
// Why not the SDK (go.opentelemetry.io/otel/sdk/trace with the
// otlptracegrpc exporter), which NewProvider still builds: at sampling 1.0
// it cost more per request than the target on the two-core CI
// machine (BenchmarkTracingCost, which runs both in the same run;
// docs/benchmarks/tracing.md has the figures). A CPU profile put half of it
// on the request's goroutine (the SDK's span start, sampler, id generator
// and snapshot at End, several allocations per span and eight to nine
// spans per request) and half in the exporter (each span turned into a
// tree of generated protobuf structs, then marshalled), which on two cores
// competes with the requests. Here a span
// is one allocation plus its context, and export appends wire bytes to a
// reused buffer.
//
// What it keeps of the SDK's behaviour: parent-based sampling with the
// SDK's trace-id ratio rule (so a ratio keeps the same traces either way),
// its attribute and event limits (128 each, the rest counted as dropped),
// status precedence (Ok over Error over Unset), RecordError as an
// "exception" event, and the OTLP mapping of the SDK's exporter (span
// kinds, status codes, the parent-is-remote flags). Links are counted as
// dropped: no Tandem span has one. TestLeanMatchesSDK checks what a
// collector receives against what the SDK's exporter sends for the same
// spans; TestJaegerTrace (e2e) has a real Jaeger read it back.
type Provider struct {
	embedded.TracerProvider
	// bound is the SDK's TraceIDRatioBased threshold: a root is sampled
	// when the trace id's low 63 bits are below it (at ratio 1 it is
	// 1<<63, above every 63-bit value).
	bound    uint64
	resource []byte // the encoded Resource message
	q        *queue[*leanSpan]
	send     func(context.Context, []byte) error
	closer   func() error // the OTLP connection (Dial); nil otherwise
	closed   sync.Once
	buf      []byte // export buffers, used under q.export
	flat     []*leanSpan
	scratch  []byte
	inner    []byte
}

// maxSpanAttrs and maxSpanEvents are the SDK's default span limits.
const (
	maxSpanAttrs  = 128
	maxSpanEvents = 128
)

// NewLeanProvider returns a Provider that hands each batch, encoded as an
// OTLP ExportTraceServiceRequest, to send (an OTLP/gRPC client, or a test's
// decoder), at most every second or every 512 queued entries (a root and
// the family that ended with it count as one: a batch holds at most
// 512 × (1 + kidCap) spans, about 0.7 MB of OTLP for Tandem's spans, under the 4 MiB
// a gRPC collector accepts by default).
func NewLeanProvider(send func(context.Context, []byte) error, cfg Config, log *slog.Logger) *Provider {
	// As sdktrace.TraceIDRatioBased computes it (Validate keeps the
	// ratio in [0, 1]).
	p := &Provider{send: send, bound: uint64(min(max(cfg.SampleRatio, 0), 1) * (1 << 63))}
	// In key order, as the SDK's resource (an attribute.Set) holds them.
	var res []byte
	if cfg.Instance != "" {
		res = appendKV(res, 1, attribute.String("service.instance.id", cfg.Instance))
	}
	res = appendKV(res, 1, attribute.String("service.name", cfg.Service))
	p.resource = res
	p.q = newQueue(p.export, time.Second, 512, 8192, log)
	return p
}

// Tracer implements trace.TracerProvider.
func (p *Provider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	c := trace.NewTracerConfig(opts...)
	return &leanTracer{p: p, name: name, version: c.InstrumentationVersion(), schema: c.SchemaURL()}
}

// ForceFlush exports every ended span now.
func (p *Provider) ForceFlush(ctx context.Context) error { return p.q.flush(ctx) }

// Shutdown exports what is left and stops the export loop.
func (p *Provider) Shutdown(ctx context.Context) error {
	err := p.q.shutdown(ctx)
	if p.closer != nil {
		p.closed.Do(func() { err = errors.Join(err, p.closer()) })
	}
	return err
}

type leanTracer struct {
	embedded.Tracer
	p                     *Provider
	name, version, schema string
}

// Start implements trace.Tracer.
func (t *leanTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	cfg := trace.NewSpanStartConfig(opts...)
	parent := trace.SpanContextFromContext(ctx)
	if cfg.NewRoot() {
		parent = trace.SpanContext{}
	}
	ctx, sp, s := t.start(ctx, parent, name, cfg.SpanKind(), cfg.Timestamp(), cfg.Attributes())
	if n := len(cfg.Links()); s != nil && n > 0 {
		s.more().droppedLinks = n
	}
	return ctx, sp
}

// start is Start with its options read: a span under parent (invalid: a
// new root, sampled by the ratio), its context in ctx. s is the span when
// it records, nil when it does not.
func (t *leanTracer) start(ctx context.Context, parent trace.SpanContext, name string, kind trace.SpanKind, at time.Time, attrs []attribute.KeyValue) (_ context.Context, _ trace.Span, s *leanSpan) {
	var tid trace.TraceID
	sampled := false
	if parent.IsValid() {
		tid = parent.TraceID()
		sampled = parent.IsSampled()
	} else {
		binary.BigEndian.PutUint64(tid[:8], rand.Uint64())
		binary.BigEndian.PutUint64(tid[8:], rand.Uint64())
		sampled = binary.BigEndian.Uint64(tid[8:16])>>1 < t.p.bound
	}
	flags := parent.TraceFlags().WithSampled(sampled)
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: newSpanID(), TraceFlags: flags, TraceState: parent.TraceState()})
	if !sampled {
		// Not recording, but the new ids travel on (as the SDK's
		// non-recording span does), so the trace stays one trace downstream.
		ctx = trace.ContextWithSpanContext(ctx, sc)
		return ctx, trace.SpanFromContext(ctx), nil
	}
	if at.IsZero() {
		at = time.Now()
	}
	r := &rootSpan{base: at, parentID: parent.SpanID(), parentRemote: parent.IsRemote()}
	s = &r.leanSpan
	s.root = r
	s.init(ctx, t, sc, name, kind, at.UnixNano())
	s.attrs = r.attrBuf[:0]
	s.addAttrs(attrs)
	return s, s, s
}

func newSpanID() trace.SpanID {
	var sid trace.SpanID
	for !sid.IsValid() {
		binary.BigEndian.PutUint64(sid[:], rand.Uint64())
	}
	return sid
}

// init sets a new span's fields, before anyone else can see it: ctx is
// the context it is started in, which the span, as a context, extends.
func (s *leanSpan) init(ctx context.Context, t *leanTracer, sc trace.SpanContext, name string, kind trace.SpanKind, at int64) {
	s.Context, s.t, s.sc, s.name, s.start = ctx, t, sc, name, at
	if kind == trace.SpanKindUnspecified {
		kind = trace.SpanKindInternal // as the SDK does
	}
	s.kind = uint8(otlpKind(kind))
}

// kidCap is how many descendants a span holds inline: a sampled request's
// frontend spans (under http.request: template, tokenize, queue, route,
// disagg.decide, first_token and stream) fit in one family.
const kidCap = 7

// family is a root span's inline descendants: one allocation for all of
// them where each span of its own would be one per span, with its own trip
// through the export queue. A descendant records exactly as a span of its
// own does (the same fields, methods and OTLP message); only where it
// lives differs. One that ends before its root is exported with the root;
// one that ends later goes through the queue alone.
//
// Its size is held under a malloc size class (2304 bytes; the test
// TestLeanFamily checks it): what a sampled request allocates is what it
// costs inside a real request, where every new cache line is a miss
// (docs/benchmarks/tracing.md).
type family struct {
	kids [kidCap]leanSpan
	// The kids' attributes, handed out in slices as they are set
	// (guarded by the root's mu): a sampled request's children set 15
	// (route 9, stream 3, first_token 2, tokenize 1; the disaggregated
	// path's 7 more go to the heap) where a fixed buffer per kid would
	// hold far more.
	pool    [15]attribute.KeyValue
	n, used int32 // kids and pool entries in use, guarded by the root's mu
}

// rootSpan is how every span that is not a family's kid is allocated:
// with the lock of its whole family, the clock reading its family's
// times count from, its family, its parent, and room for its own first
// attributes (six: a sampled request's http.request sets six, a worker's
// server span five).
type rootSpan struct {
	leanSpan
	// mu guards the mutable fields of every span in the family (one
	// lock: a family's spans are a request's, rarely used at once, and
	// a kid's End then takes one lock, not its own and its root's).
	mu           sync.Mutex
	base         time.Time // the start, with its monotonic reading
	fam          *family   // guarded by mu
	parentID     trace.SpanID
	parentRemote bool
	attrBuf      [6]attribute.KeyValue
}

// isRoot says whether s starts a family (it is its rootSpan's own).
func (s *leanSpan) isRoot() bool { return &s.root.leanSpan == s }

// parentID is the parent span's id, zero for a trace's first span (the
// caller holds root.mu: a kid's parent is read from the family).
func (s *leanSpan) parentID() trace.SpanID {
	r := s.root
	switch {
	case s.isRoot():
		return r.parentID
	case s.parent == 0:
		return r.sc.SpanID()
	}
	return r.fam.kids[s.parent-1].sc.SpanID()
}

// now is the time for a span's start or end, in Unix nanoseconds: its
// root's start plus the monotonic clock since (one clock read where
// time.Now makes two), so a family's times keep their order whatever the
// wall clock does meanwhile.
func (s *leanSpan) now() int64 {
	r := s.root
	return r.start + int64(time.Since(r.base))
}

// moreAttrs returns attrs with room for extra more, from the family's
// pool of root r while it lasts (the caller holds r.mu).
func (r *rootSpan) moreAttrs(attrs []attribute.KeyValue, extra int) []attribute.KeyValue {
	need := min(len(attrs)+extra, maxSpanAttrs)
	f := r.fam
	if int(f.used)+need > len(f.pool) {
		return attrs // append grows it on the heap
	}
	buf := f.pool[f.used : int(f.used)+len(attrs) : int(f.used)+need]
	f.used += int32(need)
	copy(buf, attrs)
	return buf
}

// kid starts a span of t named name under p, held in the family of p's
// root, or returns nil when the family is full or its root has ended
// (the caller then starts a span of its own).
func (p *leanSpan) kid(ctx context.Context, t *leanTracer, name string) *leanSpan {
	r := p.root
	r.mu.Lock()
	if r.ended || (r.fam != nil && r.fam.n == kidCap) {
		r.mu.Unlock()
		return nil
	}
	if r.fam == nil {
		r.fam = new(family)
	}
	f := r.fam
	k := &f.kids[f.n]
	for i := range f.n {
		if &f.kids[i] == p {
			k.parent = uint8(i + 1)
		}
	}
	f.n++
	r.mu.Unlock()
	// As start would make it under p: p's trace, flags and trace state.
	k.root = r
	k.init(ctx, t, p.sc.WithSpanID(newSpanID()), name, trace.SpanKindInternal, k.now())
	return k
}

// spanKey is the context key trace.ContextWithSpan stores a span under,
// as trace.SpanFromContext asks for it (the key's type is the API's
// own, unexported).
var spanKey = func() any {
	spy := &keySpy{Context: context.Background()}
	trace.SpanFromContext(spy)
	return spy.key
}()

type keySpy struct {
	context.Context
	key any
}

func (c *keySpy) Value(k any) any { c.key = k; return nil }

// Value makes a span the context it was started in with the span added
// (what trace.ContextWithSpan would allocate a context for).
func (s *leanSpan) Value(k any) any {
	if k == spanKey {
		return s
	}
	return s.Context.Value(k)
}

// leanSpan is one recording span. Its methods may be called from any
// goroutine (the trace.Span contract); after End it is read only by the
// export loop. It is also a context.Context: the one it was started in,
// with itself as the current span. (So an ended span waiting in the
// export queue, at most a second or a batch, keeps its parent context
// alive too: a request's context chain, a few hundred bytes.)
//
// Only what every span sets lives here (184 bytes, 16 of them the
// embedded interface the API requires, 16 the parent context); the rest
// is in spanExtra, allocated by the few spans that need it.
type leanSpan struct {
	embedded.Span
	context.Context // the context it was started in
	t               *leanTracer
	sc              trace.SpanContext
	// root is the rootSpan whose family holds this span, or the span's
	// own rootSpan (isRoot).
	root       *rootSpan
	start, end int64 // Unix nanoseconds
	kind       uint8 // OTLP's SpanKind
	// parent is a kid's parent in its family: 0 the root, i the kid
	// i-1 (a root's parent is in its rootSpan).
	parent uint8

	// Guarded by root.mu.
	inline bool // a kid that ended before its root, exported with it
	ended  bool
	status uint8 // codes.Code
	name   string
	attrs  []attribute.KeyValue
	x      *spanExtra
}

// spanExtra is what few spans record: events, an error's description,
// and the counts of what the limits dropped.
type spanExtra struct {
	events                                    []leanEvent
	desc                                      string
	droppedAttrs, droppedEvents, droppedLinks int
}

// more returns s's spanExtra, allocating it (the caller holds root.mu,
// or has s to itself).
func (s *leanSpan) more() *spanExtra {
	if s.x == nil {
		s.x = new(spanExtra)
	}
	return s.x
}

type leanEvent struct {
	name    string
	at      time.Time
	attrs   []attribute.KeyValue
	dropped int
}

func (s *leanSpan) addAttrs(kvs []attribute.KeyValue) {
	if r := s.root; !s.isRoot() && cap(s.attrs)-len(s.attrs) < len(kvs) {
		s.attrs = r.moreAttrs(s.attrs, len(kvs))
	}
	for _, kv := range kvs {
		if !kv.Valid() {
			continue
		}
		// A key set again replaces its value (the SDK's rule).
		replaced := false
		for i := range s.attrs {
			if s.attrs[i].Key == kv.Key {
				s.attrs[i] = kv
				replaced = true
				break
			}
		}
		switch {
		case replaced:
		case len(s.attrs) < maxSpanAttrs:
			s.attrs = append(s.attrs, kv)
		default:
			s.more().droppedAttrs++
		}
	}
}

// End implements trace.Span.
func (s *leanSpan) End(opts ...trace.SpanEndOption) {
	at := s.now()
	if len(opts) > 0 {
		c := trace.NewSpanEndConfig(opts...)
		if ts := c.Timestamp(); !ts.IsZero() {
			at = ts.UnixNano()
		}
	}
	r := s.root
	r.mu.Lock()
	if s.ended {
		r.mu.Unlock()
		return
	}
	s.ended, s.end = true, at
	// A kid that ends before its root goes out with it; a root, or a kid
	// that outlived it, on its own.
	s.inline = !s.isRoot() && !r.ended
	r.mu.Unlock()
	if !s.inline {
		s.t.p.q.add(s)
	}
}

// AddEvent implements trace.Span.
func (s *leanSpan) AddEvent(name string, opts ...trace.EventOption) {
	c := trace.NewEventConfig(opts...)
	s.addEvent(name, c.Timestamp(), c.Attributes())
}

func (s *leanSpan) addEvent(name string, at time.Time, attrs []attribute.KeyValue) {
	if at.IsZero() {
		at = time.Now()
	}
	s.root.mu.Lock()
	defer s.root.mu.Unlock()
	if s.ended {
		return
	}
	x := s.more()
	if len(x.events) >= maxSpanEvents {
		x.droppedEvents++
		return
	}
	ev := leanEvent{name: name, at: at}
	if len(attrs) > maxSpanAttrs {
		ev.dropped = len(attrs) - maxSpanAttrs
		attrs = attrs[:maxSpanAttrs]
	}
	ev.attrs = append([]attribute.KeyValue(nil), attrs...)
	x.events = append(x.events, ev)
}

// AddLink implements trace.Span: counted as dropped.
func (s *leanSpan) AddLink(trace.Link) {
	s.root.mu.Lock()
	s.more().droppedLinks++
	s.root.mu.Unlock()
}

// IsRecording implements trace.Span: until End.
func (s *leanSpan) IsRecording() bool {
	s.root.mu.Lock()
	defer s.root.mu.Unlock()
	return !s.ended
}

// RecordError implements trace.Span as the SDK does: an "exception"
// event with the error's type and message.
func (s *leanSpan) RecordError(err error, opts ...trace.EventOption) {
	if err == nil {
		return
	}
	c := trace.NewEventConfig(opts...)
	attrs := append([]attribute.KeyValue{
		attribute.String("exception.type", typeName(err)),
		attribute.String("exception.message", err.Error()),
	}, c.Attributes()...)
	s.addEvent("exception", c.Timestamp(), attrs)
}

func typeName(v any) string {
	// The SDK's rule: the package path and the type's name, or the
	// type's own string for an unnamed one ("*errors.errorString").
	t := reflect.TypeOf(v)
	if t.PkgPath() == "" && t.Name() == "" {
		return t.String()
	}
	return t.PkgPath() + "." + t.Name()
}

// SpanContext implements trace.Span.
func (s *leanSpan) SpanContext() trace.SpanContext { return s.sc }

// SetStatus implements trace.Span: Ok is final, Error replaces Unset, and
// only Error keeps its description (the SDK's rules).
func (s *leanSpan) SetStatus(code codes.Code, desc string) {
	s.root.mu.Lock()
	defer s.root.mu.Unlock()
	if s.ended || code == codes.Unset || codes.Code(s.status) == codes.Ok {
		return
	}
	s.status = uint8(code)
	if s.x != nil {
		s.x.desc = ""
	}
	if code == codes.Error && desc != "" {
		s.more().desc = desc
	}
}

// SetName implements trace.Span.
func (s *leanSpan) SetName(name string) {
	s.root.mu.Lock()
	defer s.root.mu.Unlock()
	if !s.ended {
		s.name = name
	}
}

// SetAttributes implements trace.Span.
func (s *leanSpan) SetAttributes(kvs ...attribute.KeyValue) {
	s.root.mu.Lock()
	defer s.root.mu.Unlock()
	if !s.ended {
		s.addAttrs(kvs)
	}
}

// TracerProvider implements trace.Span.
func (s *leanSpan) TracerProvider() trace.TracerProvider { return s.t.p }

// export encodes one batch as an ExportTraceServiceRequest (one
// ResourceSpans, one ScopeSpans per tracer in order of first appearance)
// and sends it. It runs under the queue's export lock, which guards the
// reused buffers.
func (p *Provider) export(ctx context.Context, spans []*leanSpan) error {
	spans = p.expand(spans)
	defer clear(p.flat) // no span kept alive by the reused slice
	rs := p.inner[:0]
	rs = protowire.AppendTag(rs, 1, protowire.BytesType) // ResourceSpans.resource
	rs = protowire.AppendBytes(rs, p.resource)
	done := 0
	for done < len(spans) {
		t := spans[done].t
		ss := p.scratch[:0]
		scope := appendString(nil, 1, t.name)
		if t.version != "" {
			scope = appendString(scope, 2, t.version)
		}
		ss = protowire.AppendTag(ss, 1, protowire.BytesType) // ScopeSpans.scope
		ss = protowire.AppendBytes(ss, scope)
		var span []byte
		for i := done; i < len(spans); i++ {
			s := spans[i]
			if s.t.name != t.name || s.t.version != t.version {
				continue
			}
			if i == done {
				done++
			} else {
				// Out of order: swap it forward so this scope's spans are
				// contiguous and every span is encoded once.
				spans[done], spans[i] = spans[i], spans[done]
				done++
			}
			span = s.appendOTLP(span[:0])
			ss = protowire.AppendTag(ss, 2, protowire.BytesType) // ScopeSpans.spans
			ss = protowire.AppendBytes(ss, span)
		}
		if t.schema != "" {
			ss = appendString(ss, 3, t.schema)
		}
		rs = protowire.AppendTag(rs, 2, protowire.BytesType) // ResourceSpans.scope_spans
		rs = protowire.AppendBytes(rs, ss)
		p.scratch = ss
	}
	p.inner = rs
	req := p.buf[:0]
	req = protowire.AppendTag(req, 1, protowire.BytesType) // ExportTraceServiceRequest.resource_spans
	req = protowire.AppendBytes(req, rs)
	p.buf = req
	return p.send(ctx, req)
}

// expand returns the batch with each root's inline descendants that ended
// before it (family) after the root, in p.flat.
func (p *Provider) expand(spans []*leanSpan) []*leanSpan {
	flat := p.flat[:0]
	for _, s := range spans {
		flat = append(flat, s)
		s.root.mu.Lock()
		if f := s.root.fam; f != nil && s.isRoot() {
			for i := range f.n {
				if k := &f.kids[i]; k.inline {
					flat = append(flat, k)
				}
			}
		}
		s.root.mu.Unlock()
	}
	p.flat = flat
	return flat
}

// appendOTLP appends the span as an OTLP Span message's fields
// (opentelemetry/proto/trace/v1/trace.proto).
func (s *leanSpan) appendOTLP(b []byte) []byte {
	s.root.mu.Lock()
	defer s.root.mu.Unlock()
	tid, sid := s.sc.TraceID(), s.sc.SpanID()
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendBytes(b, tid[:])
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendBytes(b, sid[:])
	if ts := s.sc.TraceState().String(); ts != "" {
		b = appendString(b, 3, ts)
	}
	if psid := s.parentID(); psid.IsValid() {
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendBytes(b, psid[:])
	}
	b = appendString(b, 5, s.name)
	if s.kind != 0 {
		b = protowire.AppendTag(b, 6, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(s.kind))
	}
	b = protowire.AppendTag(b, 7, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, uint64(max(0, s.start)))
	b = protowire.AppendTag(b, 8, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, uint64(max(0, s.end)))
	for _, kv := range s.attrs {
		b = appendKV(b, 9, kv)
	}
	x := s.x
	if x == nil {
		x = &spanExtra{} // on the stack: nothing holds it
	}
	b = appendCount(b, 10, x.droppedAttrs)
	for _, ev := range x.events {
		var e []byte
		e = protowire.AppendTag(e, 1, protowire.Fixed64Type)
		e = protowire.AppendFixed64(e, unixNano(ev.at))
		e = appendString(e, 2, ev.name)
		for _, kv := range ev.attrs {
			e = appendKV(e, 3, kv)
		}
		e = appendCount(e, 4, ev.dropped)
		b = protowire.AppendTag(b, 11, protowire.BytesType)
		b = protowire.AppendBytes(b, e)
	}
	b = appendCount(b, 12, x.droppedEvents)
	b = appendCount(b, 14, x.droppedLinks)
	// Status: the SDK's exporter always writes one, Unset included.
	code := otlpStatus(codes.Code(s.status))
	n := 0
	if x.desc != "" {
		n += protowire.SizeTag(2) + protowire.SizeBytes(len(x.desc))
	}
	if code != 0 {
		n += protowire.SizeTag(3) + protowire.SizeVarint(code)
	}
	b = protowire.AppendTag(b, 15, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	if x.desc != "" {
		b = appendString(b, 2, x.desc)
	}
	if code != 0 {
		b = protowire.AppendTag(b, 3, protowire.VarintType)
		b = protowire.AppendVarint(b, code)
	}
	// Flags: the W3C trace flags, and that the parent's remoteness is known
	// (SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK, 0x100) and whether it is
	// (SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK, 0x200), as the SDK's exporter
	// writes them.
	flags := uint32(s.sc.TraceFlags()) | 0x100
	if s.isRoot() && s.root.parentRemote {
		flags |= 0x200
	}
	b = protowire.AppendTag(b, 16, protowire.Fixed32Type)
	return protowire.AppendFixed32(b, flags)
}

func unixNano(t time.Time) uint64 { return uint64(max(0, t.UnixNano())) }

// otlpKind maps trace.SpanKind to OTLP's Span.SpanKind (the same numbers,
// 0 for anything unknown).
func otlpKind(k trace.SpanKind) uint64 {
	if k >= trace.SpanKindInternal && k <= trace.SpanKindConsumer {
		return uint64(k)
	}
	return 0
}

// otlpStatus maps codes.Code (Unset 0, Error 1, Ok 2) to OTLP's
// Status.StatusCode (UNSET 0, OK 1, ERROR 2).
func otlpStatus(c codes.Code) uint64 {
	switch c {
	case codes.Ok:
		return 1
	case codes.Error:
		return 2
	}
	return 0
}

func appendString(b []byte, field protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, field, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendCount(b []byte, field protowire.Number, n int) []byte {
	if n <= 0 {
		return b
	}
	b = protowire.AppendTag(b, field, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(min(n, math.MaxUint32)))
}

// appendKV appends kv as a KeyValue message in field. A scalar value's
// message sizes are computed up front, so it is written in place with no
// allocation (the attributes of Tandem's spans are all scalars); slices
// and maps are built in a scratch buffer first.
func appendKV(b []byte, field protowire.Number, kv attribute.KeyValue) []byte {
	var value []byte
	n, scalar := scalarSize(kv.Value)
	if !scalar {
		value = appendAnyValue(nil, kv.Value)
		n = len(value)
	}
	inner := protowire.SizeTag(1) + protowire.SizeBytes(len(kv.Key)) + protowire.SizeTag(2) + protowire.SizeBytes(n)
	b = protowire.AppendTag(b, field, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(inner))
	b = appendString(b, 1, string(kv.Key))
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	if !scalar {
		return protowire.AppendBytes(b, value)
	}
	b = protowire.AppendVarint(b, uint64(n))
	return appendAnyValue(b, kv.Value)
}

// scalarSize is the encoded size of a scalar value's AnyValue message.
func scalarSize(v attribute.Value) (int, bool) {
	switch v.Type() {
	case attribute.STRING:
		return protowire.SizeTag(1) + protowire.SizeBytes(len(v.AsString())), true
	case attribute.BOOL:
		return protowire.SizeTag(2) + 1, true
	case attribute.INT64:
		return protowire.SizeTag(3) + protowire.SizeVarint(uint64(v.AsInt64())), true
	case attribute.FLOAT64:
		return protowire.SizeTag(4) + protowire.SizeFixed64(), true
	case attribute.EMPTY:
		return 0, true
	}
	return 0, false
}

// appendAnyValue appends v as an AnyValue message's fields, mapped as the
// SDK's exporter maps them (slices to an ArrayValue, a map to a
// KeyValueList, an empty value to an empty AnyValue).
func appendAnyValue(b []byte, v attribute.Value) []byte {
	array := func(n int, each func(i int, b []byte) []byte) []byte {
		var arr []byte
		for i := range n {
			arr = protowire.AppendTag(arr, 1, protowire.BytesType)
			arr = protowire.AppendBytes(arr, each(i, nil))
		}
		b = protowire.AppendTag(b, 5, protowire.BytesType)
		return protowire.AppendBytes(b, arr)
	}
	switch v.Type() {
	case attribute.STRING:
		return appendString(b, 1, v.AsString())
	case attribute.BOOL:
		b = protowire.AppendTag(b, 2, protowire.VarintType)
		return protowire.AppendVarint(b, protowire.EncodeBool(v.AsBool()))
	case attribute.INT64:
		b = protowire.AppendTag(b, 3, protowire.VarintType)
		return protowire.AppendVarint(b, uint64(v.AsInt64()))
	case attribute.FLOAT64:
		b = protowire.AppendTag(b, 4, protowire.Fixed64Type)
		return protowire.AppendFixed64(b, math.Float64bits(v.AsFloat64()))
	case attribute.BYTESLICE:
		b = protowire.AppendTag(b, 7, protowire.BytesType)
		return protowire.AppendBytes(b, v.AsByteSlice())
	case attribute.BOOLSLICE:
		s := v.AsBoolSlice()
		return array(len(s), func(i int, b []byte) []byte { return appendAnyValue(b, attribute.BoolValue(s[i])) })
	case attribute.INT64SLICE:
		s := v.AsInt64Slice()
		return array(len(s), func(i int, b []byte) []byte { return appendAnyValue(b, attribute.Int64Value(s[i])) })
	case attribute.FLOAT64SLICE:
		s := v.AsFloat64Slice()
		return array(len(s), func(i int, b []byte) []byte { return appendAnyValue(b, attribute.Float64Value(s[i])) })
	case attribute.STRINGSLICE:
		s := v.AsStringSlice()
		return array(len(s), func(i int, b []byte) []byte { return appendAnyValue(b, attribute.StringValue(s[i])) })
	case attribute.SLICE:
		s := v.AsSlice()
		return array(len(s), func(i int, b []byte) []byte { return appendAnyValue(b, s[i]) })
	case attribute.MAP:
		var list []byte
		for _, kv := range v.AsMap() {
			list = appendKV(list, 1, kv)
		}
		b = protowire.AppendTag(b, 6, protowire.BytesType)
		return protowire.AppendBytes(b, list)
	case attribute.EMPTY:
		return b
	}
	return appendString(b, 1, "INVALID")
}
