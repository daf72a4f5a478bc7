package kvcache

import (
	"encoding/binary"

	"github.com/zeebo/xxh3"

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

// XXH3Seed is the seed Dynamo's router uses for its block hashes; the default
// hasher uses it so a Tandem index and a Dynamo one agree on local hashes.
const XXH3Seed = 1337

// XXH3Hasher is the default Hasher: XXH3-64 (seed XXH3Seed) over the tokens as
// little-endian u32, chained as XXH3-64 over (parent, local) little-endian
// u64, the scheme of Dynamo's sequence hashes. It is an order of magnitude
// cheaper than sha256_cbor and is what engines use when nobody needs vLLM's
// exact hash values.
type XXH3Hasher struct {
	buf []byte
}

// Hash implements Hasher.
func (x *XXH3Hasher) Hash(parent BlockHash, tokens []tokenid.ID) BlockHash {
	buf := x.buf[:0]
	for _, t := range tokens {
		buf = binary.LittleEndian.AppendUint32(buf, uint32(t))
	}
	x.buf = buf
	local := xxh3.HashSeed(buf, XXH3Seed)
	if parent.IsZero() {
		return HashFromUint64(local)
	}
	var pair [16]byte
	binary.LittleEndian.PutUint64(pair[:8], parent.Uint64())
	binary.LittleEndian.PutUint64(pair[8:], local)
	return HashFromUint64(xxh3.HashSeed(pair[:], XXH3Seed))
}
