package httpapi

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/tandemllm/tandem/tracing"
)

// tracer is the global provider's: no-op until tracing.Start installs
// the SDK (see package tracing).
var tracer = tracing.Tracer("github.com/tandemllm/tandem/httpapi")

// traced opens a request's server span, continuing the client's trace when
// it sent a W3C traceparent, and gives the handler its context. It sits
// behind the API-key check: a stranger's request starts no trace (a
// sampled traceparent would otherwise let anyone fill the collector).
func traced(route string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		pctx := tracing.FromHTTP(r.Context(), r.Header)
		ctx, span := tracer.Start(pctx, tracing.SpanHTTP, trace.WithSpanKind(trace.SpanKindServer))
		if !span.IsRecording() {
			// Tracing off or not sampled: only a client's trace context
			// travels on (to the workers and into log lines).
			if trace.SpanContextFromContext(ctx).IsValid() {
				r = r.WithContext(ctx)
			} else if trace.SpanContextFromContext(pctx).IsValid() {
				r = r.WithContext(pctx)
			}
			h(w, r)
			return
		}
		tracing.SetAttributes(span, attribute.String("http.request.method", r.Method), attribute.String("http.route", route))
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		h(sw, r.WithContext(ctx))
		tracing.SetAttributes(span, attribute.Int("http.response.status_code", sw.status))
		if sw.status >= 500 {
			span.SetStatus(codes.Error, http.StatusText(sw.status))
		}
		span.End()
	}
}

// statusWriter records the status for the span. It passes Flush and
// Unwrap through, so SSE flushing and http.ResponseController (deadlines)
// still reach the connection.
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (s *statusWriter) WriteHeader(code int) {
	if !s.wrote {
		s.status, s.wrote = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	s.wrote = true
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func child(ctx context.Context, name string) (context.Context, trace.Span) {
	return tracing.Child(ctx, tracer, name)
}
