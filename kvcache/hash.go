package kvcache

import (
	"encoding/binary"

	"github.com/tandemllm/tandem/blockhash"
	"github.com/tandemllm/tandem/tokenid"
)

// BlockHash is a full block's chained hash as the engine computes it. Digests
// shorter than 32 bytes are right-aligned (zero-padded on the left), so
// Uint64 always yields vLLM's integer form: the last 8 bytes, big-endian.
type BlockHash [32]byte

// Uint64 returns the hash as vLLM publishes it by default
// (int.from_bytes(digest, "big") & (2**64-1)), which is also the cache's
// lookup key.
func (h BlockHash) Uint64() uint64 { return binary.BigEndian.Uint64(h[24:]) }

// IsZero reports whether h is the zero hash, which stands for "no parent".
func (h BlockHash) IsZero() bool { return h == BlockHash{} }

// HashFromUint64 returns the BlockHash whose integer form is v.
func HashFromUint64(v uint64) BlockHash {
	var h BlockHash
	binary.BigEndian.PutUint64(h[24:], v)
	return h
}

// Hasher computes the chained hash of one full block. parent is the zero
// BlockHash for a sequence's first block; implementations substitute their
// own root value (vLLM's NONE_HASH, for instance). A Hasher is called only
// from the cache's owning goroutine, so it may keep scratch buffers.
type Hasher interface {
	Hash(parent BlockHash, tokens []tokenid.ID) BlockHash
}

// XXH3Hasher is the default Hasher: package blockhash's chained XXH3-64 hash
// (Dynamo's sequence hashes), the one the router's prefix index computes, so
// an index re-hashing an engine's tokens finds the engine's own hashes. It is
// what engines use when nobody needs vLLM's exact hash values (sha256_cbor,
// kvevents.VLLMHasher).
type XXH3Hasher struct {
	h blockhash.Hasher
}

// Hash implements Hasher: the zero parent starts a sequence (the block's
// local hash), any other is chained onto.
func (x *XXH3Hasher) Hash(parent BlockHash, tokens []tokenid.ID) BlockHash {
	local := x.h.Local(tokens)
	if parent.IsZero() {
		return HashFromUint64(local)
	}
	return HashFromUint64(blockhash.Chain(parent.Uint64(), local))
}
