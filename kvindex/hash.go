package kvindex

import (
	"encoding/binary"

	"github.com/zeebo/xxh3"
)

// Seed is the XXH3 seed of every Tandem block hash. It is Dynamo's
// (lib/kv-router protocols.rs XXH3_SEED), so a Tandem index and a Dynamo one
// agree on the hashes of the same tokens.
const Seed = 1337

// LocalHash is the hash of one block's tokens alone: XXH3-64 over the ids as
// little-endian u32. It is Dynamo's LocalBlockHash.
func LocalHash(tokens []int32) uint64 {
	var h Hasher
	return h.local(tokens)
}

// ChainHash combines a parent's sequence hash with a block's local hash:
// XXH3-64 over (parent, local) as little-endian u64. It is Dynamo's
// sequence hash, so equal values mean equal prefixes, and the index can key
// a block by this one number instead of walking a tree.
func ChainHash(parent, local uint64) uint64 {
	var pair [16]byte
	binary.LittleEndian.PutUint64(pair[:8], parent)
	binary.LittleEndian.PutUint64(pair[8:], local)
	return xxh3.HashSeed(pair[:], Seed)
}

// Hasher computes Tandem block hashes, reusing a scratch buffer between
// calls. The zero value is ready; a Hasher is not safe for concurrent use.
type Hasher struct {
	buf []byte
}

func (h *Hasher) local(tokens []int32) uint64 {
	n := 4 * len(tokens)
	if cap(h.buf) < n {
		h.buf = make([]byte, n)
	}
	b := h.buf[:n]
	for i, t := range tokens {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(t))
	}
	return xxh3.HashSeed(b, Seed)
}

// Append appends the sequence hashes of the full blocks of tokens to dst and
// returns it. The trailing partial block is ignored: an engine only caches
// full blocks, so only they can ever match. When hasParent is set, the first
// block chains onto parent (a continuation, as in a BlockStored event with a
// parent); otherwise it is a sequence's first block and its hash is its local
// hash, as in Dynamo.
func (h *Hasher) Append(dst []uint64, parent uint64, hasParent bool, tokens []int32, blockSize int) []uint64 {
	if blockSize <= 0 {
		return dst
	}
	for len(tokens) >= blockSize {
		l := h.local(tokens[:blockSize])
		if hasParent {
			parent = ChainHash(parent, l)
		} else {
			parent, hasParent = l, true
		}
		dst = append(dst, parent)
		tokens = tokens[blockSize:]
	}
	return dst
}

// BlockHashes returns the sequence hashes of the full blocks of a prompt.
func BlockHashes(tokens []int32, blockSize int) []uint64 {
	if blockSize <= 0 {
		return nil
	}
	var h Hasher
	return h.Append(make([]uint64, 0, len(tokens)/blockSize), 0, false, tokens, blockSize)
}
