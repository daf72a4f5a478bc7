package tracing

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// Config is one process's tracing configuration.
type Config struct {
	// Endpoint is the OTLP/gRPC collector (Jaeger, the OpenTelemetry
	// Collector): "host:port" or "https://host:port" for TLS,
	// "http://host:port" for plaintext. Empty: no export (propagation and
	// log correlation still work).
	Endpoint string
	// SampleRatio is the share of new traces kept (0..1). A request whose
	// client sent a traceparent follows the client's sampled flag.
	SampleRatio float64
	// CAFile verifies the collector's certificate (https); empty: the
	// system roots.
	CAFile string
	// Service and Instance name the process (service.name,
	// service.instance.id): "tandem-frontend" and its address,
	// "tandem-worker" and the worker id.
	Service  string
	Instance string
	// Logger hears about dropped spans (nil: nobody).
	Logger *slog.Logger
}

// Validate range-checks the configuration.
func (c Config) Validate() error {
	if c.SampleRatio < 0 || c.SampleRatio > 1 || c.SampleRatio != c.SampleRatio {
		return fmt.Errorf("tracing: --trace-sample-ratio %v is outside [0, 1]", c.SampleRatio)
	}
	if c.Endpoint == "" {
		return nil
	}
	_, _, err := splitEndpoint(c.Endpoint)
	return err
}

// splitEndpoint returns host:port and whether the connection is plaintext.
// A bare host:port is TLS unless the host is a loopback address: a trace
// names workers and request ids, and must not cross a network in clear.
func splitEndpoint(ep string) (hostport string, plaintext bool, err error) {
	schemed := strings.Contains(ep, "://")
	if schemed {
		u, err := url.Parse(ep)
		if err != nil {
			return "", false, fmt.Errorf("tracing: --otlp-endpoint %q: %w", ep, err)
		}
		switch u.Scheme {
		case "http":
			plaintext = true
		case "https":
		default:
			return "", false, fmt.Errorf("tracing: --otlp-endpoint %q: scheme must be http or https", ep)
		}
		ep = u.Host
	}
	host, port, err := net.SplitHostPort(ep)
	if err != nil || port == "" {
		return "", false, fmt.Errorf("tracing: --otlp-endpoint %q: want host:port", ep)
	}
	if !schemed && isLoopback(host) {
		plaintext = true
	}
	return ep, plaintext, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Start installs the W3C propagator and, when cfg.Endpoint is set, an SDK
// tracer provider exporting over OTLP/gRPC in batches. The returned
// shutdown flushes what is buffered (bounded by its context) and is safe
// to call when nothing was started.
func Start(ctx context.Context, cfg Config, log *slog.Logger) (shutdown func(context.Context) error, err error) {
	otel.SetTextMapPropagator(Propagator())
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Endpoint == "" {
		return func(context.Context) error { return nil }, nil
	}
	tp, err := Dial(cfg, log)
	if err != nil {
		return nil, err
	}
	UseSampled(tp, cfg.SampleRatio)
	if log != nil {
		log.Info("tracing", "otlp_endpoint", cfg.Endpoint, "sample_ratio", cfg.SampleRatio, "service", cfg.Service)
	}
	return func(ctx context.Context) error {
		Use(nil)
		return tp.Shutdown(ctx)
	}, nil
}

// Dial returns the Provider Start installs, exporting to cfg.Endpoint over
// OTLP/gRPC, without installing it; its Shutdown also closes the
// connection.
func Dial(cfg Config, log *slog.Logger) (*Provider, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	hostport, plaintext, err := splitEndpoint(cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	var creds credentials.TransportCredentials
	if plaintext {
		creds = insecure.NewCredentials()
		if h, _, _ := net.SplitHostPort(hostport); !isLoopback(h) && log != nil {
			log.Warn("exporting traces in plaintext to a non-loopback collector", "otlp_endpoint", cfg.Endpoint)
		}
	} else {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if cfg.CAFile != "" {
			pem, err := os.ReadFile(cfg.CAFile)
			if err != nil {
				return nil, fmt.Errorf("tracing: --otlp-ca-file: %w", err)
			}
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(pem) {
				return nil, errors.New("tracing: --otlp-ca-file holds no PEM certificate")
			}
		}
		creds = credentials.NewTLS(tc)
	}
	// The client connects lazily: a collector that is down costs dropped
	// spans, never a process that cannot start.
	client, err := newOTLPClient(hostport, creds)
	if err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = log
	}
	tp := NewLeanProvider(client.send, cfg, cfg.Logger)
	tp.closer = client.close
	return tp, nil
}

// NewProvider is an SDK provider configured as Start's Provider is, around
// any exporter: parent-based ratio sampling, batched export (batcher.go),
// the process named by cfg.Service and cfg.Instance. Start installs the
// lean Provider instead (lean.go says why); this one is its baseline in
// BenchmarkTracingCost and TestLeanMatchesSDK.
func NewProvider(exp sdktrace.SpanExporter, cfg Config) *sdktrace.TracerProvider {
	attrs := []attribute.KeyValue{attribute.String("service.name", cfg.Service)}
	if cfg.Instance != "" {
		attrs = append(attrs, attribute.String("service.instance.id", cfg.Instance))
	}
	return sdktrace.NewTracerProvider(
		sdktrace.WithSpanProcessor(newBatcher(exp, time.Second, cfg.Logger)),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SampleRatio))),
		sdktrace.WithResource(resource.NewSchemaless(attrs...)),
	)
}

// Propagator is W3C trace context plus baggage.
func Propagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}

// Tracer is the named tracer of the global provider.
func Tracer(name string) trace.Tracer { return otel.Tracer(name) }

// FromHTTP returns ctx with the span context of a client's traceparent
// header, if it sent a valid one (an invalid one is ignored, as the W3C
// recommendation says: the request starts a new trace).
func FromHTTP(ctx context.Context, h http.Header) context.Context {
	if h.Get("Traceparent") == "" {
		return ctx
	}
	return otel.GetTextMapPropagator().Extract(ctx, propagation.HeaderCarrier(h))
}

// TraceID returns the hex trace id of ctx's span, or "".
func TraceID(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.HasTraceID() {
		return ""
	}
	return sc.TraceID().String()
}

// SetAttributes sets kvs on span as span.SetAttributes does, without
// moving kvs to the heap: through the trace.Span interface the compiler
// cannot see what the callee keeps, so every call's variadic slice is
// allocated (64 bytes an attribute; a sampled request's spans set about
// twenty). A lean span copies the values it keeps; any other span gets a
// copy of its own.
func SetAttributes(span trace.Span, kvs ...attribute.KeyValue) {
	if s, ok := span.(*leanSpan); ok {
		s.SetAttributes(kvs...)
		return
	}
	if span.IsRecording() {
		span.SetAttributes(slices.Clone(kvs)...)
	}
}

// EndWithError ends span, marking it failed when err is set.
func EndWithError(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// Child starts a span of t under ctx's only when ctx's span context is
// sampled: with tracing off, or the request not sampled, it costs a
// context lookup and returns ctx's own span. Under a lean span of the same
// provider the child lives in its root's family (lean.go), which is what
// keeps a sampled request's frontend spans at two allocations (the root
// and its family) and one queued entry.
func Child(ctx context.Context, t trace.Tracer, name string) (context.Context, trace.Span) {
	sp := trace.SpanFromContext(ctx)
	if !sp.SpanContext().IsSampled() {
		return ctx, sp
	}
	if ls, ok := sp.(*leanSpan); ok {
		if lt := leanOf(t); lt != nil && lt.p == ls.t.p {
			if k := ls.kid(ctx, lt, name); k != nil {
				return k, k // the span is its own context
			}
		}
	}
	return t.Start(ctx, name)
}
