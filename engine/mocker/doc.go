// Package mocker is a simulated vLLM-class engine: real continuous-batching
// scheduling, a real paged KV cache with prefix caching (package kvcache),
// and real vLLM KV events on the wire (package kvevents); only the model's
// compute is replaced by a timing model. It lets the whole serving system,
// and the KV-aware router in particular, run and be measured on CPUs alone,
// from one worker to a thousand in one process.
//
// # Scheduling
//
// Each Engine owns one scheduler goroutine that sleeps on a channel while
// idle (no tickers, no polling) and otherwise loops over steps the way
// vLLM's v1 scheduler does:
//
//   - running sequences first, each taking up to the step's token budget
//     (MaxNumBatchedTokens): one token for a decode, a chunk for an
//     unfinished prefill (chunked prefill);
//   - when KV blocks run out, the newest running sequence is preempted: its
//     blocks are freed (full ones stay in the prefix cache) and it is
//     recomputed later from the front of the waiting queue;
//   - then, if nothing was preempted, waiting sequences are admitted FIFO up
//     to MaxNumSeqs, each starting from its longest cached prefix (at most
//     prompt-1 tokens: the last token is always recomputed for its logits).
//
// The step then sleeps for the timing model's duration (divided by Speedup;
// zero when Instant), commits newly full blocks (emitting BlockStored),
// emits one token to every sequence whose known tokens are all computed, and
// publishes the step's KV events as one batch.
//
// # Timing
//
// TimingModel is Dynamo's polynomial by default (DynamoTiming): prefill time
// grows with the uncached tokens of the step, decode time with KV occupancy.
// Qwen3_0_6BTiming reproduces the seed report's GPU worker (≈80 ms TTFT on a
// 1,500-token miss, ≈15 ms on a hit). A VirtualClock makes simulated time
// exact for tests and offline experiments.
//
// # Outputs
//
// Tokens are drawn cyclically from Config.Vocabulary (typically tokenized
// English text) starting at an offset derived from Config.Seed and the
// request (its sampling seed, else its prompt): deterministic, and readable
// when detokenized. Sequences end at max_tokens or the context length; with
// MaxNaturalTokens set they also end "naturally" (EOS) at a seed-derived
// length, unless IgnoreEOS. StopTokens and EOS tokens in the vocabulary stop
// a sequence once MinTokens have been produced.
//
// # KV events and metrics
//
// With KVEvents.Enabled the cache hashes blocks with vLLM's sha256_cbor
// chain and publishes BlockStored / BlockRemoved / AllBlocksCleared exactly
// as vLLM does, in the map or the legacy array format, on a ZMQ PUB socket
// with an optional replay socket. Disabled, the worker publishes nothing and
// uses a cheaper hash. Collector exposes the vllm: Prometheus metrics; Load
// reports running/waiting/KV usage for routing.
//
// Deviations from vLLM worth knowing: identical blocks computed concurrently
// are deduplicated (vLLM publishes BlockStored twice); the step time of a
// mixed batch is prefill + decode time; there is no watermark.
package mocker
