// Package otlptest is an OTLP/gRPC trace collector on loopback for tests
// and benchmarks: a real gRPC server that accepts the trace service's
// Export calls and keeps each request's bytes undecoded, decoding them
// only when asked. Undecoded, because a collector is another process
// (Jaeger), usually on another host: decoding inside the process being
// measured charged its CPU to the tracing it measures. Only test binaries
// import this package.
package otlptest
