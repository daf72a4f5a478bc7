// Package kvindex is the KV-aware router's index: which worker holds which
// block of KV cache, answered per request as "how many leading blocks of this
// prompt does each worker hold".
//
// # Hashes
//
// Blocks are keyed by Tandem's own hashes, package blockhash's (Dynamo's
// scheme: XXH3-64 with seed 1337 over the block's token ids, full blocks
// only, each chained with its parent's hash), the same hashes Tandem's
// engines compute (kvcache.XXH3Hasher). A chained hash names a whole prefix,
// so the index is a flat map from hash to holders, not a tree. Engines' own block hashes are opaque: each BlockStored event's
// token_ids are re-hashed, and a per-worker map from engine hash to index
// block lets BlockRemoved (which carries engine hashes only) be applied. The
// engine's hash algorithm and PYTHONHASHSEED therefore never matter.
//
// An engine block may span several index blocks (engine block size a
// multiple of the index's): it is cut into them, and removed as a unit. Any
// other ratio is refused (ErrBlockSize), never guessed: a silent mismatch is
// how routing degrades to random without a word (Dynamo PR #1233).
//
// # Cost
//
// Each residence (worker, block) is a 32-byte node in a chunked slab
// addressed by uint32, and its tier a byte beside it; nodes of one hash
// form a chain headed in an open-addressing table, whose entry also
// carries the chain's length, a 15-bit fingerprint of its worker set and
// whether a residence on it is below the pool. A lookup probes the table once per
// prompt block and walks a chain only where the set of matching workers
// changes: the cost grows with the prompt and with the workers that match,
// never with the workers that do not. Hashes held by many workers also keep
// their workers in a compact array, so a system prompt held by every worker
// is read sequentially.
//
// # Bounds
//
// MaxBlocks bounds the residences. Past it, the least recently used are
// pruned (ages bucketed, a quarter-octave apart) down to PruneTarget;
// lookups record use with an atomic store under the read lock. A TTL turns
// an Index into the approximate index of kv-approx mode, where entries are
// routing decisions that expire. Metrics: tandem_kvindex_blocks,
// tandem_kvindex_pruned_blocks_total, tandem_kvindex_events_total, …
//
// docs/benchmarks/router.md has the throughput, latency and memory figures.
package kvindex
