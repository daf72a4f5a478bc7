// Package requestplane carries generation requests from a frontend to a
// remote worker: token ids and sampling parameters in, a stream of Deltas
// out, with cancellation and deadlines propagated.
//
// It is gRPC (HTTP/2: one multiplexed connection per worker, flow control,
// deadlines and cancellation for free) with a hand-written service
// descriptor and a small binary codec instead of protobuf-generated code.
// The messages are two flat structs; a codec of a hundred lines keeps the
// build free of protoc and generated files, and is fuzzed like any parser.
// In `tandem serve` the frontend calls the engine in-process through the
// same engine.Generator interface and this package is not involved.
package requestplane
