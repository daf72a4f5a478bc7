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
// it cost about 30 µs per request against tracing off on the two-core CI
// machine (BenchmarkTracingCost, which runs both in the same run), against
// the 20 µs. A CPU profile put half of it on the request's
// goroutine (the SDK's span start, sampler, id generator and snapshot at
// End: 1.5 µs and about 10 allocations per span, eight to nine spans per
// request) and half in the exporter (each span turned into a tree of
// generated protobuf structs, about 100 allocations per request, then
// marshalled), which on two cores competes with the requests. Here a span
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
// spans; TestJaegerTrace (cmd/tandem) has a real Jaeger read it back.
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
// 512 × 9 spans, about 0.8 MB of OTLP for Tandem's spans, under the 4 MiB
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
	if s != nil {
		s.droppedLinks = len(cfg.Links())
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
	r := &rootSpan{}
	s = &r.leanSpan
	s.init(t, sc, parent, name, kind, at)
	s.attrs = r.attrBuf[:0]
	s.addAttrs(attrs)
	return trace.ContextWithSpan(ctx, s), s, s
}

func newSpanID() trace.SpanID {
	var sid trace.SpanID
	for !sid.IsValid() {
		binary.BigEndian.PutUint64(sid[:], rand.Uint64())
	}
	return sid
}

// init sets a new span's fields, before anyone else can see it.
func (s *leanSpan) init(t *leanTracer, sc, parent trace.SpanContext, name string, kind trace.SpanKind, at time.Time) {
	s.t, s.sc, s.parent, s.name, s.kind, s.start = t, sc, parent, name, kind, at
	if s.start.IsZero() {
		s.start = time.Now()
	}
	if s.kind == trace.SpanKindUnspecified {
		s.kind = trace.SpanKindInternal // as the SDK does
	}
}

// kidCap is how many descendants a span holds inline: a sampled request's
// frontend spans (http.request and its template, tokenize, queue, route,
// disagg.decide, first_token and stream) fit in one family.
const kidCap = 8

// family is a root span's inline descendants: one allocation for all of
// them where each span of its own would be one per span, with its own trip
// through the export queue. A descendant records exactly as a span of its
// own does (the same fields, methods and OTLP message); only where it
// lives differs. One that ends before its root is exported with the root;
// one that ends later goes through the queue alone.
type family struct {
	n    int // kids in use, guarded by the root's mu
	kids [kidCap]leanSpan
	// The kids' attributes, handed out in slices as they are set
	// (guarded by the root's mu): a sampled request's children set about
	// 13 (the route span 9, the disaggregated path 7 more) where a fixed
	// buffer per kid would hold 64.
	pool [24]attribute.KeyValue
	used int
}

// rootSpan is how a span that starts a family is allocated: with room
// for its own first attributes.
type rootSpan struct {
	leanSpan
	attrBuf [8]attribute.KeyValue
}

// now is the time for a span's start or end. A kid reads it off its
// root's start and the monotonic clock alone (one clock read where
// time.Now makes two), so a family's times keep their order whatever the
// wall clock does meanwhile.
func (s *leanSpan) now() time.Time {
	if r := s.root; r != nil {
		return r.start.Add(time.Since(r.start))
	}
	return time.Now()
}

// moreAttrs returns attrs with room for extra more, from the family's
// pool of root r while it lasts (the caller holds the kid's mu, never
// r's: a root's lock is not held while a kid's is taken).
func (r *leanSpan) moreAttrs(attrs []attribute.KeyValue, extra int) []attribute.KeyValue {
	need := min(len(attrs)+extra, maxSpanAttrs)
	r.mu.Lock()
	f := r.fam
	if f.used+need > len(f.pool) {
		r.mu.Unlock()
		return attrs // append grows it on the heap
	}
	buf := f.pool[f.used : f.used+len(attrs) : f.used+need]
	f.used += need
	r.mu.Unlock()
	copy(buf, attrs)
	return buf
}

// kid starts a span of t named name under p, held in the family of p's
// root, or returns nil when the family is full or its root has ended
// (the caller then starts a span of its own).
func (p *leanSpan) kid(t *leanTracer, name string) *leanSpan {
	r := p
	if p.root != nil {
		r = p.root
	}
	r.mu.Lock()
	if r.ended || (r.fam != nil && r.fam.n == kidCap) {
		r.mu.Unlock()
		return nil
	}
	if r.fam == nil {
		r.fam = new(family)
	}
	k := &r.fam.kids[r.fam.n]
	r.fam.n++
	r.mu.Unlock()
	// As start would make it under p: p's trace, flags and trace state.
	k.root = r
	k.init(t, p.sc.WithSpanID(newSpanID()), p.sc, name, trace.SpanKindInternal, k.now())
	return k
}

// leanSpan is one recording span. Its methods may be called from any
// goroutine (the trace.Span contract); after End it is read only by the
// export loop.
type leanSpan struct {
	embedded.Span
	t      *leanTracer
	sc     trace.SpanContext
	parent trace.SpanContext
	start  time.Time

	mu                                        sync.Mutex
	name                                      string
	kind                                      trace.SpanKind
	end                                       time.Time
	attrs                                     []attribute.KeyValue
	events                                    []leanEvent
	status                                    codes.Code
	desc                                      string
	droppedAttrs, droppedEvents, droppedLinks int
	ended                                     bool

	// A span in a family (see family): root is the span whose family
	// holds it, and inline, guarded by root.mu, says that it ended before
	// the root and goes out with it. fam, guarded by mu, is a root's.
	root   *leanSpan
	inline bool
	fam    *family
}

type leanEvent struct {
	name    string
	at      time.Time
	attrs   []attribute.KeyValue
	dropped int
}

func (s *leanSpan) addAttrs(kvs []attribute.KeyValue) {
	if r := s.root; r != nil && cap(s.attrs)-len(s.attrs) < len(kvs) {
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
			s.droppedAttrs++
		}
	}
}

// End implements trace.Span.
func (s *leanSpan) End(opts ...trace.SpanEndOption) {
	at := s.now()
	if len(opts) > 0 {
		c := trace.NewSpanEndConfig(opts...)
		if ts := c.Timestamp(); !ts.IsZero() {
			at = ts
		}
	}
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.ended, s.end = true, at
	r := s.root
	s.mu.Unlock()
	if r != nil {
		r.mu.Lock()
		if !r.ended {
			s.inline = true
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
	}
	s.t.p.q.add(s)
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
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return
	}
	if len(s.events) >= maxSpanEvents {
		s.droppedEvents++
		return
	}
	ev := leanEvent{name: name, at: at}
	if len(attrs) > maxSpanAttrs {
		ev.dropped = len(attrs) - maxSpanAttrs
		attrs = attrs[:maxSpanAttrs]
	}
	ev.attrs = append([]attribute.KeyValue(nil), attrs...)
	s.events = append(s.events, ev)
}

// AddLink implements trace.Span: counted as dropped.
func (s *leanSpan) AddLink(trace.Link) {
	s.mu.Lock()
	s.droppedLinks++
	s.mu.Unlock()
}

// IsRecording implements trace.Span: until End.
func (s *leanSpan) IsRecording() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
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
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended || code == codes.Unset || s.status == codes.Ok {
		return
	}
	s.status = code
	s.desc = ""
	if code == codes.Error {
		s.desc = desc
	}
}

// SetName implements trace.Span.
func (s *leanSpan) SetName(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.name = name
	}
}

// SetAttributes implements trace.Span.
func (s *leanSpan) SetAttributes(kvs ...attribute.KeyValue) {
	s.mu.Lock()
	defer s.mu.Unlock()
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
		s.mu.Lock()
		if f := s.fam; f != nil {
			for i := range f.n {
				if k := &f.kids[i]; k.inline {
					flat = append(flat, k)
				}
			}
		}
		s.mu.Unlock()
	}
	p.flat = flat
	return flat
}

// appendOTLP appends the span as an OTLP Span message's fields
// (opentelemetry/proto/trace/v1/trace.proto).
func (s *leanSpan) appendOTLP(b []byte) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	tid, sid := s.sc.TraceID(), s.sc.SpanID()
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendBytes(b, tid[:])
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendBytes(b, sid[:])
	if ts := s.sc.TraceState().String(); ts != "" {
		b = appendString(b, 3, ts)
	}
	if psid := s.parent.SpanID(); psid.IsValid() {
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendBytes(b, psid[:])
	}
	b = appendString(b, 5, s.name)
	if k := otlpKind(s.kind); k != 0 {
		b = protowire.AppendTag(b, 6, protowire.VarintType)
		b = protowire.AppendVarint(b, k)
	}
	b = protowire.AppendTag(b, 7, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, unixNano(s.start))
	b = protowire.AppendTag(b, 8, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, unixNano(s.end))
	for _, kv := range s.attrs {
		b = appendKV(b, 9, kv)
	}
	b = appendCount(b, 10, s.droppedAttrs)
	for _, ev := range s.events {
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
	b = appendCount(b, 12, s.droppedEvents)
	b = appendCount(b, 14, s.droppedLinks)
	// Status: the SDK's exporter always writes one, Unset included.
	code := otlpStatus(s.status)
	n := 0
	if s.desc != "" {
		n += protowire.SizeTag(2) + protowire.SizeBytes(len(s.desc))
	}
	if code != 0 {
		n += protowire.SizeTag(3) + protowire.SizeVarint(code)
	}
	b = protowire.AppendTag(b, 15, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	if s.desc != "" {
		b = appendString(b, 2, s.desc)
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
	if s.parent.IsRemote() {
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
