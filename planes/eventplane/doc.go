// Package eventplane carries KV cache events from workers to routers
// through NATS, the brokered alternative to per-worker ZMQ subscriptions.
//
// With ZMQ every router dials every worker's PUB socket, which is cheap and
// brokerless but makes each router replica its own subscriber set. With
// NATS each worker relays its batches to one subject per model and every
// router subscribes to that subject: replicas share one stream, a worker
// needs no address reachable from the routers, and adding a replica costs
// the workers nothing.
//
// The relay runs in the worker process: it follows the engine's own ZMQ
// stream on loopback (with replay, so nothing is lost at startup), and
// republishes each batch, unchanged in meaning, with the worker id and the
// engine's sequence number in NATS headers. The router side hands each
// batch to the KV policy's Ingest, which turns sequence gaps into
// kv_events_lost and restarts into resets exactly as on ZMQ; so a NATS
// outage or a slow consumer costs index accuracy, visibly, never
// correctness.
//
// Connections reconnect forever; while one is down event_plane_disconnected
// is raised on the health board (and /health shows it). StartServer runs an
// in-process nats-server for single-host setups (--nats embedded) and tests.
//
// Router replicas also share the load they route (load.go): each publishes
// its routing lifecycle (routed, first token, finished) on the model's load
// subject, and each feeds its peers' requests into its own KV policy as if
// it had routed them, so every replica sees the fleet's whole load.
package eventplane
