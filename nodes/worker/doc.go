// Package worker hosts one engine as a process of a multi-process Tandem:
// it serves the engine on the gRPC request plane, publishes the worker's
// discovery record (request-plane address, KV event endpoint, KV layout,
// capacity) and keeps it alive, exposes the engine's metrics, and drains.
//
// Draining is ordered for a fleet, not for a single server: the record is
// revoked first, so frontends stop routing here while the worker can still
// answer; then the request plane stops taking new streams (a request that
// raced the revocation is refused as unavailable, which the frontend retries
// elsewhere before any token was sent) and the in-flight ones finish; only
// then does the engine close.
//
// The package neither simulates nor computes; the engine comes from the
// caller.
package worker
