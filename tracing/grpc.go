package tracing

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// The request plane's calls that belong to a request. Background calls
// (Info, Link, TransferKey, the queue watch, health checks) are not
// traced: each would be a root trace of its own, burying requests in
// Jaeger.
var tracedMethods = []string{"/Generate", "/Assess", "/Prefill"}

// methodInfo is what a traced method's span needs, built once per method:
// its name and its rpc.* attributes (no per-call attribute building).
type methodInfo struct {
	name  string
	attrs []attribute.KeyValue
}

var methods = func() map[string]*methodInfo {
	m := map[string]*methodInfo{}
	const svc = "tandem.requestplane.v1.Worker"
	for _, meth := range tracedMethods {
		full := "/" + svc + meth
		m[full] = &methodInfo{name: full[1:], attrs: []attribute.KeyValue{
			attribute.String("rpc.system", "grpc"), attribute.String("rpc.service", svc), attribute.String("rpc.method", meth[1:]),
		}}
	}
	return m
}()

// StartCall starts the worker's server span for a traced request-plane
// call (method is its full gRPC name; any other gets a non-recording
// span) under the caller's trace context: parent, as the request carried
// it (the request plane's TraceContext message), else a W3C traceparent
// (and tracestate) header, which other gRPC clients send
// (OpenTelemetry's instrumentation, grpcurl -H), else a span the context
// already holds. A call with none of these gets a root span, sampled at
// the ratio. The handler ends the span with EndCall when it returns.
//
// The span starts in the handler, not in a stats handler, because only
// the handler sees the request: Tandem's client sends no traceparent
// header (see the TraceContext message in requestplane.proto for what
// one cost). It replaced otelgrpc's stats handlers, which
// BenchmarkTracingCost (serve) showed cost too much for the target
// (docs/benchmarks/tracing.md): they run their filter, propagators and
// metric hooks on every RPC even when nothing is sampled, record an event
// per streamed message (one per token on Generate) and build their
// attributes per call.
func StartCall(ctx context.Context, method string, parent trace.SpanContext) (context.Context, trace.Span) {
	m := methods[method]
	if m == nil {
		return ctx, trace.SpanFromContext(context.Background())
	}
	if !parent.IsValid() {
		parent = headerParent(ctx)
	}
	if !parent.IsValid() {
		parent = trace.SpanContextFromContext(ctx)
	}
	if parent.IsSampled() && parent.IsValid() {
		if lt := leanOf(grpcTracer); lt != nil {
			// What the call below does for a sampled parent, without
			// its option values, the parent's own context value and the
			// second context read, and their allocations
			// (docs/benchmarks/tracing.md).
			ctx, sp, _ := lt.start(ctx, parent, m.name, trace.SpanKindServer, time.Time{}, m.attrs)
			return ctx, sp
		}
	}
	if parent.IsValid() && parent.IsRemote() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
	}
	return grpcTracer.Start(ctx, m.name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(m.attrs...))
}

// headerParent is the span context of a call's traceparent and tracestate
// metadata, invalid when there is none or it does not parse.
// ValueFromIncomingContext, not FromIncomingContext: the latter copies
// the whole metadata map.
func headerParent(ctx context.Context) trace.SpanContext {
	tp := metadata.ValueFromIncomingContext(ctx, "traceparent")
	if len(tp) != 1 {
		return trace.SpanContext{}
	}
	ts := ""
	if v := metadata.ValueFromIncomingContext(ctx, "tracestate"); len(v) == 1 {
		ts = v[0]
	}
	sc, _ := ParseTraceparent(tp[0], ts)
	return sc
}

// EndCall ends a call's server span with the handler's outcome: err is
// the error it returns (a gRPC status error), nil for success.
func EndCall(span trace.Span, err error) {
	if !span.IsRecording() {
		return
	}
	if err != nil {
		st, _ := status.FromError(err)
		SetAttributes(span, attribute.Int64("rpc.grpc.status_code", int64(st.Code())))
		span.SetStatus(codes.Error, st.Message())
	}
	span.End()
}

// grpcTracer is the switching provider's own (not otel.Tracer's: this
// variable is set before the package's init installs the provider, and
// otel's global would put its delegating tracer in front).
var grpcTracer = global.Tracer("github.com/tandemllm/tandem/planes/requestplane")

// Traceparent formats sc as a W3C traceparent header value
// (version 00): https://www.w3.org/TR/trace-context/#traceparent-header.
func Traceparent(sc trace.SpanContext) string {
	const hex = "0123456789abcdef"
	var b [55]byte
	b[0], b[1], b[2] = '0', '0', '-'
	tid, sid := sc.TraceID(), sc.SpanID()
	for i, v := range tid {
		b[3+2*i], b[4+2*i] = hex[v>>4], hex[v&15]
	}
	b[35] = '-'
	for i, v := range sid {
		b[36+2*i], b[37+2*i] = hex[v>>4], hex[v&15]
	}
	b[52] = '-'
	f := byte(sc.TraceFlags() & (trace.FlagsSampled | trace.FlagsRandom))
	b[53], b[54] = hex[f>>4], hex[f&15]
	return string(b[:])
}

// TraceparentLen is the length of a version-00 traceparent.
const TraceparentLen = 55

// ParseTraceparent parses a W3C traceparent (and an optional tracestate,
// dropped if invalid) into a remote span context. It accepts version 00
// exactly and, as the recommendation says, a higher version's first 55
// characters when followed by '-'; anything else, an all-zero id or
// version ff, is refused.
func ParseTraceparent(tp, tracestate string) (trace.SpanContext, bool) {
	if len(tp) < TraceparentLen || tp[2] != '-' || tp[35] != '-' || tp[52] != '-' {
		return trace.SpanContext{}, false
	}
	ver, ok := hexByte(tp[0:2])
	if !ok || ver == 0xff || (ver == 0 && len(tp) != TraceparentLen) || (ver > 0 && len(tp) > TraceparentLen && tp[TraceparentLen] != '-') {
		return trace.SpanContext{}, false
	}
	var tid trace.TraceID
	var sid trace.SpanID
	for i := range tid {
		if tid[i], ok = hexByte(tp[3+2*i : 5+2*i]); !ok {
			return trace.SpanContext{}, false
		}
	}
	for i := range sid {
		if sid[i], ok = hexByte(tp[36+2*i : 38+2*i]); !ok {
			return trace.SpanContext{}, false
		}
	}
	flags, ok := hexByte(tp[53:55])
	if !ok || (ver == 0 && flags > 3) {
		// Version 00 defines two flags (sampled, random); the rest are
		// reserved there, as otel's propagator reads it too.
		return trace.SpanContext{}, false
	}
	return RemoteSpanContext(tid, sid, uint32(flags)&3, tracestate)
}

// RemoteSpanContext is a caller's span context from its parts (a
// traceparent's, or the request plane's binary TraceContext), refused
// when an id is all zero or flags hold more than version 00's two
// (sampled, random); a tracestate that does not parse, or is longer than
// the 512 characters the W3C recommendation bounds it to, is dropped.
func RemoteSpanContext(tid trace.TraceID, sid trace.SpanID, flags uint32, tracestate string) (trace.SpanContext, bool) {
	if !tid.IsValid() || !sid.IsValid() || flags > 3 {
		return trace.SpanContext{}, false
	}
	cfg := trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.TraceFlags(flags), Remote: true}
	if tracestate != "" && len(tracestate) <= 512 {
		if ts, err := trace.ParseTraceState(tracestate); err == nil {
			cfg.TraceState = ts
		}
	}
	return trace.NewSpanContext(cfg), true
}

// hexByte decodes two lowercase hex digits (W3C trace context allows no
// uppercase).
func hexByte(s string) (byte, bool) {
	var v byte
	for i := 0; i < 2; i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | (c - '0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | (c - 'a' + 10)
		default:
			return 0, false
		}
	}
	return v, true
}
