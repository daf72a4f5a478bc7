// Package router chooses the worker for each request. It owns the set of
// live workers per model, the in-flight load it has routed to each, and the
// Policy that turns a tokenized request plus that load into a choice.
//
// Policies are small: Pick sees the request's tokens and the candidates'
// load and returns a Decision. Policies that learn from the request
// lifecycle (kv-approx remembering where prefixes went, kv tracking active
// blocks) also implement Observer, and the Router calls them as requests are
// routed, produce their first token, and finish. The router never parses
// wire formats; KV-event-driven policies get their index from kvindex.
package router
