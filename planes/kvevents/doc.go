// Package kvevents speaks the KV-cache event protocol of vLLM (and SGLang,
// which copied it): the event model, a msgpack codec that is byte-exact with
// vLLM's msgspec output, vLLM's block hashing, and the ZMQ publisher with its
// replay socket. Engines publish through it; the router decodes with it. One
// package owns the wire so both sides cannot drift apart.
//
// # Wire format
//
// A batch is published as three ZMQ frames: topic, an 8-byte big-endian
// sequence number (0, 1, 2, … one per batch) and the msgpack payload
// [ts, events, data_parallel_rank?]. Events come in two encodings:
//
//   - FormatArray: positional arrays, tag first
//     (["BlockStored", hashes, parent, tokens, block_size, lora_id, medium,
//     lora_name, …]); vLLM before PR #42892 and older SGLang.
//   - FormatMap: tagged maps ({"type": "BlockStored", "block_hashes": …});
//     current vLLM (v0.26+) and SGLang.
//
// The encoder follows msgspec's rules exactly (smallest integer forms, float64
// timestamps, trailing defaults dropped in arrays, default-valued optional
// keys dropped in maps), so its output equals vLLM's byte for byte; the tests
// check test vectors produced with vLLM's own msgspec encoder
// (vllm/distributed/kv_events.py).
//
// The decoder is deliberately liberal: batch and events as arrays or maps,
// hashes as uint64, int64 or bytes (normalized to vLLM's integer form, the
// digest's last 8 bytes big-endian), unknown keys, extra trailing elements
// and unknown event tags are skipped, SGLang's [tok, tok] token pairs are
// accepted. Corrupt input yields an error, never a panic. It reads msgpack
// directly from the byte slice, without reflection, because the router
// decodes every worker's block events on one core (the target and the
// figures are in docs/benchmarks.md).
//
// # Hashing
//
// VLLMHasher reproduces vLLM's sha256_cbor prefix-caching hash (canonical
// CBOR of (parent, tokens, extra_keys), SHA-256, root NONE_HASH derived from
// a seed) and plugs into kvcache, so a mocker's published hashes equal those
// of a vLLM started with --prefix-caching-hash-algo sha256_cbor and the same
// PYTHONHASHSEED. SGLangBlockHash covers SGLang's scheme.
//
// # Publisher
//
// Publisher binds a PUB socket (and optionally a ROUTER replay socket that
// serves recent batches from a bounded ring) and sends from its own
// goroutine. Publish never blocks: a full queue drops the batch and counts
// it, because stalling an engine's scheduler on a slow subscriber would be
// far worse than a lost event (routers resynchronize through replay or by
// age). The pure-Go ZMQ library is used with automatic reconnection off
// (github.com/go-zeromq/zmq4 has a reconnect race
// in its automatic redial); the publisher only binds, so
// reconnection is the subscribers' business.
package kvevents
