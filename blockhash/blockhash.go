package blockhash

import (
	"encoding/binary"

	"github.com/zeebo/xxh3"
)

// Seed is the XXH3 seed of every Tandem block hash, Dynamo's XXH3_SEED.
const Seed = 1337

// Local returns the hash of one block's tokens alone: XXH3-64 (Seed) over the
// ids as little-endian u32. It is Dynamo's LocalBlockHash.
func Local(tokens []int32) uint64 {
	var h Hasher
	return h.Local(tokens)
}

// Chain combines a parent's sequence hash with a block's local hash: XXH3-64
// (Seed) over (parent, local) as little-endian u64. It is Dynamo's sequence
// hash of every block after a sequence's first.
func Chain(parent, local uint64) uint64 {
	var pair [16]byte
	binary.LittleEndian.PutUint64(pair[:8], parent)
	binary.LittleEndian.PutUint64(pair[8:], local)
	return xxh3.HashSeed(pair[:], Seed)
}

// Hasher computes block hashes, reusing a scratch buffer between calls. The
// zero value is ready; a Hasher is not safe for concurrent use.
type Hasher struct {
	buf []byte
}

// Local is the package's Local, with h's scratch buffer.
func (h *Hasher) Local(tokens []int32) uint64 {
	b := h.buf[:0]
	for _, t := range tokens {
		b = binary.LittleEndian.AppendUint32(b, uint32(t))
	}
	h.buf = b
	return xxh3.HashSeed(b, Seed)
}

// Next returns the sequence hash of the block of tokens: chained onto parent
// when hasParent is set, else its local hash (a sequence's first block).
func (h *Hasher) Next(parent uint64, hasParent bool, tokens []int32) uint64 {
	l := h.Local(tokens)
	if !hasParent {
		return l
	}
	return Chain(parent, l)
}

// Append appends the sequence hashes of the full blocks of tokens to dst and
// returns it. The trailing partial block is ignored. When hasParent is set,
// the first block chains onto parent (a continuation, as in a BlockStored
// event with a parent); otherwise it is a sequence's first block and its hash
// is its local hash. A blockSize below 1 appends nothing.
func (h *Hasher) Append(dst []uint64, parent uint64, hasParent bool, tokens []int32, blockSize int) []uint64 {
	if blockSize <= 0 {
		return dst
	}
	for len(tokens) >= blockSize {
		parent = h.Next(parent, hasParent, tokens[:blockSize])
		hasParent = true
		dst = append(dst, parent)
		tokens = tokens[blockSize:]
	}
	return dst
}

// Blocks returns the sequence hashes of the full blocks of a prompt, or nil
// when blockSize is below 1.
func Blocks(tokens []int32, blockSize int) []uint64 {
	if blockSize <= 0 {
		return nil
	}
	var h Hasher
	return h.Append(make([]uint64, 0, len(tokens)/blockSize), 0, false, tokens, blockSize)
}
