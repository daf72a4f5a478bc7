// Package discovery lets the parts of a multi-process Tandem find each
// other. A worker publishes a Record (who it is, where its request plane and
// KV events are, the shape of its KV cache) through a Registry and keeps it
// alive with a Lease; a frontend watches the Registry and keeps its router's
// worker set equal to the live records.
//
// Backends share one contract, so the frontend never knows which one runs:
//
//   - mem: one process (tests, `tandem serve`-style setups).
//   - file: a directory shared by the processes of one host (or a shared
//     file system). Each record is one JSON file refreshed by its owner; a
//     file whose owner stopped refreshing it for a TTL, or whose owning
//     process is gone (same host), is dead. Polling, not inotify: a killed
//     worker changes no file, so liveness has to be checked on a clock
//     anyway, and a poll of a few small files costs nothing.
//   - etcd: a key per worker under a prefix, attached to a lease with
//     keepalive, so a dead worker disappears within its TTL; a prefix watch
//     that re-lists after every interruption.
//   - kube: workers are pods selected by label with the record in an
//     annotation; readiness comes from EndpointSlices; client-go informers.
//
// Watchers always converge on the backend's current set: after a
// reconnect, a compaction or a poll error the backend re-lists and reports
// only the difference, so consumers apply Put and Delete events without
// caring how the backend got them. While a backend cannot reach its store it
// raises discovery_unavailable on the health board and keeps reporting the
// last set it knew; dropping every worker because etcd blinked would turn a
// control-plane hiccup into an outage.
//
// The package knows records, not engines: it never dials a worker.
package discovery
