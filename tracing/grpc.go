package tracing

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
)

// The request plane's calls that belong to a request. Background calls
// (Info, the link probes, health checks) are not traced: each would be a
// root trace of its own, burying requests in Jaeger.
var tracedMethods = []string{"/Generate", "/Assess", "/Prefill", "/TransferToken"}

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

// ServerHandler and ClientHandler carry the trace context over the request
// plane in gRPC metadata (W3C traceparent and tracestate) and record one
// server span per traced call. They are gRPC stats handlers, which see
// streams and unary calls alike, whatever interceptors a caller chains.
//
// They replace otelgrpc's stats handlers, which BenchmarkTracingCost
// (serve) showed cost too much for the target (≤ 20 µs p50 per
// request at sampling 1, nothing measurable at 0; docs/benchmarks/tracing.md
// has the figures): otelgrpc runs its filter, propagators and metric hooks
// on every RPC even when nothing is sampled, records an event per streamed
// message (one per token on Generate) and builds its attributes per call.
// Here an unsampled call costs a map lookup and a context read; a sampled
// one costs the injected header, one span with pre-built attributes and
// its status. The client side starts no span of its own: the frontend's
// first_token and disagg.decide spans already cover the call from the
// caller's side, and the worker's server span holds the rest.
func ServerHandler() stats.Handler { return serverHandler{} }

// ClientHandler: see ServerHandler.
func ClientHandler() stats.Handler { return clientHandler{} }

type clientHandler struct{}

func (clientHandler) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	if methods[info.FullMethodName] == nil {
		return ctx
	}
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ctx
	}
	kv := []string{"traceparent", Traceparent(sc)}
	if ts := sc.TraceState().String(); ts != "" {
		kv = append(kv, "tracestate", ts)
	}
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

func (clientHandler) HandleRPC(context.Context, stats.RPCStats) {}
func (clientHandler) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (clientHandler) HandleConn(context.Context, stats.ConnStats) {}

type serverHandler struct{}

func (serverHandler) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	m := methods[info.FullMethodName]
	if m == nil {
		return ctx
	}
	// ValueFromIncomingContext, not FromIncomingContext: the latter
	// copies the whole metadata map on every call, traced or not.
	if tp := metadata.ValueFromIncomingContext(ctx, "traceparent"); len(tp) == 1 {
		ts := ""
		if v := metadata.ValueFromIncomingContext(ctx, "tracestate"); len(v) == 1 {
			ts = v[0]
		}
		if sc, ok := ParseTraceparent(tp[0], ts); ok {
			if lt := leanOf(grpcTracer); lt != nil && sc.IsSampled() {
				// What the call below does for a sampled parent, without
				// its option values, the parent's own context value and
				// the second context read: about half of this call's
				// allocations.
				ctx, _, _ = lt.start(ctx, sc, m.name, trace.SpanKindServer, time.Time{}, m.attrs)
				return ctx
			}
			ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
		}
	}
	// Not sampled, or tracing off: the context holds the caller's span
	// context or none, neither recording, which HandleRPC leaves alone.
	ctx, _ = grpcTracer.Start(ctx, m.name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(m.attrs...))
	return ctx
}

func (serverHandler) HandleRPC(ctx context.Context, s stats.RPCStats) {
	end, ok := s.(*stats.End)
	if !ok {
		return
	}
	// The server's own span is the context's recording one: TagRPC
	// starts a span for every traced method, and a context it left
	// alone holds a remote parent or nothing, neither recording.
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	if end.Error != nil {
		st, _ := status.FromError(end.Error)
		span.SetAttributes(attribute.Int64("rpc.grpc.status_code", int64(st.Code())))
		span.SetStatus(codes.Error, st.Message())
	}
	span.End()
}

func (serverHandler) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (serverHandler) HandleConn(context.Context, stats.ConnStats) {}

// grpcTracer is the switching provider's own (not otel.Tracer's: this
// variable is set before the package's init installs the provider, and
// otel's global would put its delegating tracer in front).
var grpcTracer = global.Tracer("github.com/tandemllm/tandem/requestplane")

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
	if !ok || !tid.IsValid() || !sid.IsValid() || (ver == 0 && flags > 3) {
		// Version 00 defines two flags (sampled, random); the rest are
		// reserved there, as otel's propagator reads it too.
		return trace.SpanContext{}, false
	}
	cfg := trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.TraceFlags(flags) & (trace.FlagsSampled | trace.FlagsRandom), Remote: true}
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
