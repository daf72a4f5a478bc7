// Package tracing is Tandem's OpenTelemetry setup: the OTLP/gRPC exporter
// and sampler behind --otlp-endpoint and --trace-sample-ratio, W3C
// traceparent propagation (HTTP headers from clients, gRPC metadata on the
// request plane through lean gRPC stats handlers, grpc.go; the KV transfer
// wire in kvtransfer), the span names and
// attribute keys every process uses, and a slog handler that stamps every
// log line written with a request's context with its trace and span ids.
//
// Instrumented packages take their tracer from the global provider
// (otel.Tracer), as OpenTelemetry's instrumentation libraries do: with
// tracing off the global provider is the no-op one, whose spans cost a
// context lookup and carry the caller's span context through unchanged, so
// a client's traceparent still reaches every process and every log line.
// Start installs the lean Provider (lean.go: OpenTelemetry's API over
// spans encoded straight to OTLP) once per process.
//
// Spans carry token counts, worker ids, costs and byte counts, never prompt
// or completion text: traces leave the process for the collector, and
// prompts never leave it except to authenticated peers.
package tracing
