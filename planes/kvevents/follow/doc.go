// Package follow follows workers' KV event streams for a consumer that
// indexes them (the router's kv policy): one ZMQ SUB subscription per worker
// with gap replay (kvevents.Subscriber), or one topic on a bound socket that
// publishers dial into (--kv-events-bind, kvevents.ListenAllow), with the
// subscribers' metrics and the bound socket's.
//
// It knows nothing of routing. A worker's stream feeds the event.Handler
// the consumer hands to Follow: its batches in sequence order, and every
// stream transition (connecting, synced, live, loss, reset) through
// HandleState, which is how the consumer learns a stream's health. What the
// consumer does with an untrustworthy stream (route by approximation,
// raise kv_events_lost or kv_events_missing) is its own business.
//
// Streams that are not per-worker sockets (the NATS event plane) are a
// Source: it calls an IngestFunc for every worker of a model.
//
// The package sits beside kvevents, so that the router links no transport:
// it declares the interface this Follower satisfies and is handed one.
package follow
