// Package router chooses the worker for each request. It owns the set of
// live workers per model, the in-flight load it has routed to each, and the
// Policy that turns a tokenized request plus that load into a choice.
//
// Policies are small: Pick sees the request's tokens and the candidates'
// load and returns a Decision. Policies that learn from the request
// lifecycle (kv-approx remembering where prefixes went, kv tracking active
// blocks) also implement Observer, and the Router calls them as requests are
// routed, produce their first token, and finish. The router never parses
// wire formats and links no transport; KV-event-driven policies get their
// index from kvindex.
//
// # The kv policy in three parts
//
//   - The index side (kv.go, kv_health.go, kv_metrics.go): the event and
//     approximate indexes, the worker registry, and each worker's stream
//     state. Each worker is an event.Handler: the streams are followed by a
//     Streams (planes/kvevents/follow.Follower, which the assembly hands over in
//     KVConfig.Streams) or fed in process through Ingest, and the handler
//     applies batches and turns stream transitions into the worker's health
//     (kv_events_missing, kv_events_lost).
//   - The scheduler (kv_pick.go, kv_active.go, cost.go, ttft.go,
//     kv_external.go): a decision hashes the prompt, looks it up in both
//     indexes, prices every candidate with the cost (--router-cost) from
//     its overlap, active blocks and queue, and picks; the Observer calls
//     keep the active tracking and the TTFT models up to date.
//   - Prediction accuracy (package router/accuracy, reported by
//     kv_accuracy.go and ttft.go's gradeTTFT): kv_prediction_drift and
//     ttft_model_drift, each check per worker under its own lock.
package router
