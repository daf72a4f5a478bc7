// Package requestplane carries generation requests from a frontend to a
// remote worker: token ids and sampling parameters in, a stream of Deltas
// out, with cancellation and deadlines propagated; and the worker's part
// in disaggregated prefill (Assess, Link, Prefill).
//
// It is gRPC (HTTP/2: one multiplexed connection per worker, flow control,
// deadlines and cancellation for free). The schema is
// proto/tandem/requestplane/v1/requestplane.proto; the server and client
// are protoc's generated code (scripts/gen-proto.sh; committed, checked
// fresh in CI), so interceptors given to NewServer or Dial run on every
// call. This package converts the engine's types to the wire's and back
// (convert.go; token lists are handed over without a copy) and maps
// engine errors to gRPC statuses. The same server serves grpc.health.v1,
// NOT_SERVING until the worker is ready and from the start of its drain.
//
// Earlier releases used a hand-written service descriptor and binary
// codec. BenchmarkCodec and BenchmarkRoundTrip price both in one run:
// protobuf costs somewhat more CPU per round trip and the frontend's
// added TTFT over the request plane is the same, which is
// small beside what serving those requests costs an engine, so no
// hand-written fast path is kept; docs/benchmarks/requestplane.md has the
// figures. Peers of those releases are refused with statuses that
// name the schema (see "Rolling upgrades" in docs/ARCHITECTURE.md).
//
// In `tandem serve` the frontend calls the engine in-process through the
// same engine.Generator interface and this package is not involved.
package requestplane
