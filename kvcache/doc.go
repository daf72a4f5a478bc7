// Package kvcache is the paged KV-cache block manager shared by every Tandem
// engine: the mocker drives it to simulate vLLM's memory behaviour, and the
// native engine uses the same block indexes to address its K/V tensors. It
// owns block bookkeeping only (which physical block holds which tokens, who
// references it, what may be evicted) and never touches tensor memory, so one
// implementation serves a simulator and a real engine alike.
//
// # Model
//
// The cache is a fixed pool of NumBlocks physical blocks of BlockSize token
// slots each, identified by a dense BlockID in [0, NumBlocks). An engine can
// therefore store K/V for block b at offset b*blockBytes of a preallocated
// pool. A block is in exactly one of these states:
//
//   - free: unreferenced, holds nothing reusable;
//   - in use: referenced by one or more sequences (refcount > 0);
//   - cached: unreferenced but full and hashed, kept for prefix reuse and
//     evicted least-recently-used first when a new block is needed.
//
// Full blocks are keyed by a chained hash: the hash of block i covers its own
// tokens and the hash of block i-1, so equal hashes mean equal prefixes. The
// hash function is pluggable (Hasher). The default is package blockhash's
// Dynamo-style XXH3-64 chain, the router index's own hash; the mocker plugs in vLLM's sha256_cbor chain
// (kvevents.VLLMHasher) so the hashes it publishes equal a real vLLM's.
//
// # Sequence lifecycle
//
// A Seq is one request's block table. The owner drives it through:
//
//	n := c.Acquire(s, tokens[:len(tokens)-1]) // longest cached prefix, referenced
//	err := c.Allocate(s, n+chunk)             // slots for the next chunk; ErrNoSpace → preempt someone
//	// ... compute K/V for the chunk into s.Blocks() ...
//	c.Commit(s, tokens[:n+chunk])             // full blocks become shareable; BlockStored emitted
//	c.Free(s)                                 // on finish or preemption
//
// Acquire is meant for an empty Seq (first admission or re-admission after
// preemption). Passing all but the last prompt token mirrors vLLM, which
// always recomputes at least one token to produce logits.
//
// Commit deduplicates: if another block already holds the same hash, the Seq
// switches to that block and its own copy returns to the free list. Block
// IDs in s.Blocks() may therefore change across Commit; re-read the table
// after each call. (vLLM keeps both copies and publishes BlockStored twice;
// deduplicating keeps the published stream one-stored-per-removed.)
//
// KV transfer uses the same path: Import appends full blocks with known
// tokens to a Seq and reports which of them are fresh, so the caller copies
// the received K/V into exactly those.
//
// # Events
//
// An EventSink, if configured, sees BlocksStored when blocks become cached
// (one call per contiguous run committed for one Seq, as vLLM's
// cache_full_blocks does), BlocksRemoved when cached blocks are evicted, and
// AllBlocksCleared on Reset. Slices passed to the sink are only valid during
// the call.
//
// # Concurrency
//
// A Cache is not safe for concurrent use. It is owned by one scheduler
// goroutine; that is what lets every operation run without locks. The one
// exception is Changed, a commit notification other goroutines may wait on
// (a KV transfer streaming a prompt while its prefill is still running): a
// channel that Commit and Import close when they publish new blocks,
// costing the scheduler one atomic load per commit when nobody waits.
//
// # Memory
//
// Per-block state is allocated lazily as blocks are first used, so an idle
// cache with a large capacity costs a few hundred bytes.
package kvcache
