// Package kvrouting is the end-to-end proof of Tandem's KV-aware routing: it
// reproduces the router experiment of a hands-on report on NVIDIA Dynamo
// (two workers, repeated long prefixes, 60 re-requests) in
// one process, with real mocker engines, their real ZMQ KV-event publishers
// on 127.0.0.1, the router's real subscribers, and router.Router driving the
// engines' Generate directly (no HTTP).
//
// The workload is the report's: two workers of 14,816 tokens of KV each, 12
// synthetic prefixes of 1,500 tokens sent in 6 shuffled rounds with the
// trailing 24 tokens changed every time (72 requests, 60 re-requests). A
// re-request is a hit when the engine reports its whole prefix as cached
// (cached_tokens), the exact form of the report's TTFT criterion. Twelve
// prefixes do not fit one worker, so a router that does not keep each
// prefix on one worker also thrashes the caches.
//
// Run reports one scenario; the test runs every policy several times, the
// events-off failure the report found silent, and prints the hit table.
// docs/benchmarks/router.md has the figures and the command.
package kvrouting
