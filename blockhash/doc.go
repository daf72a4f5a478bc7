// Package blockhash is Tandem's one block hash: the chained XXH3-64 hash that
// names a full block of KV cache by its tokens and everything before them.
// Engines (kvcache's default Hasher) and the router's prefix index (kvindex)
// both compute it here, so the two can never drift apart: a router and
// engines that disagree on hashes route at random without a word.
//
// # Scheme
//
// It is Dynamo's (ai-dynamo/dynamo, lib/kv-router/src/protocols.rs, earlier
// lib/llm/src/kv_router/protocols.rs: XXH3_SEED, compute_block_hash_for_seq,
// compute_seq_hash_for_block), so a Tandem index and a Dynamo one agree on
// the hashes of the same tokens:
//
//   - a block's local hash is XXH3-64 with seed 1337 (Seed) over its token
//     ids as little-endian u32 (Local);
//   - a sequence's first block is named by its local hash;
//   - every later block is named by XXH3-64 (seed 1337) over its parent's
//     sequence hash and its own local hash, both little-endian u64 (Chain).
//
// Only full blocks are hashed: an engine caches only full blocks, so a
// trailing partial block can never match. A chained hash names a whole
// prefix, so equal hashes mean equal prefixes and an index can key a block by
// this one number instead of walking a tree.
//
// The package is a leaf (layer 0): it imports only the standard library and
// github.com/zeebo/xxh3, and takes token ids as int32 (tokenid.ID's type).
package blockhash
