// Package kvtransfer is the KV transfer plane between workers: it moves the
// KV blocks a prefill worker computed to the decode worker that will use
// them, over plain TCP, so disaggregated prefill works on any network
// without RDMA or NIXL.
//
// It owns five things, each because the seed measurements showed what
// goes wrong without it:
//
//   - Streaming block by block. A 1,500-token Qwen3-0.6B prompt is 164 MiB
//     of KV; nothing ever holds a whole transfer. The sender exports one
//     block into one staging buffer, the receiver imports blocks as they
//     land (batching whatever arrived while the previous import ran).
//   - Overlap with the prefill (SendWhile). Sending only after the prefill
//     leg ends puts the whole transfer on the request's critical path:
//     TTFT pays prefill + bytes ÷ link. Engines with chunked prefill
//     (engine.KVStreamer: the mocker, the native engine) commit a prompt's
//     blocks chunk by chunk, so the sender writes the Begin frame at once
//     and, woken by the prefix cache's commit notification, exports each
//     chunk's blocks while the next chunk is computed. A link that keeps
//     up leaves only the last chunk's bytes after the prefill; a slower
//     one still hides the prefill behind the transfer. The time spent
//     waiting for the engine (Stats.Waited) is left out of the link
//     estimate, which would otherwise read a slow prefill as a slow link.
//     A prefill that fails aborts the transfer without blaming the link.
//     Engines without chunked commits wait for the prefill, then send.
//   - A per-worker memory budget (Budget). Every staging buffer, on either
//     side, is acquired from the worker's budget before it is allocated and
//     released the moment its bytes are written to the socket or imported.
//     A transfer that finds the budget spent waits (TCP back-pressure stops
//     its sender) instead of exceeding it, so concurrent transfers much
//     larger than the budget cost no more memory than it
//     (TestTransferMemoryRSS).
//   - Link throughput per worker pair (Links): an EWMA over real transfers,
//     seeded by a short probe the first time a pair is seen, exported as
//     tandem_kv_link_throughput_bytes_per_second. The disaggregation
//     decider needs it to price "bytes ÷ link" before choosing remote
//     prefill: the seed's 1 GbE deployment was slower exactly by that
//     quotient (docs/benchmarks.md).
//   - Failure handling with codes. A transfer that fails or times out
//     returns an *Error with a diagnostic code (kv_transfer_failed,
//     kv_transfer_timeout, kv_layout_mismatch, kv_transfer_rejected) and
//     raises it on the health board for the link until a transfer on that
//     link succeeds again; callers fall back to local prefill.
//
// The wire format (wire.go) is a sequence of typed, length-prefixed frames;
// its decoder is fuzzed because it reads bytes from the network.
package kvtransfer
