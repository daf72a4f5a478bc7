package kvevents

import (
	"crypto/sha256"
	"encoding/binary"
	"math"

	"github.com/tandemllm/tandem/kvcache"
	"github.com/tandemllm/tandem/tokenid"
)

// DefaultNoneHashSeed is the seed newer vLLM releases hash into NONE_HASH
// when PYTHONHASHSEED is unset. Pass the value of PYTHONHASHSEED instead to
// match an engine started with it (older releases need it set to be
// reproducible at all).
const DefaultNoneHashSeed = "vllm-none-hash"

// NoneHash returns vLLM's NONE_HASH for sha256_cbor: SHA-256 of the seed
// string in canonical CBOR. It is the parent of every sequence's first block.
func NoneHash(seed string) [32]byte {
	return sha256.Sum256(appendCBORText(nil, seed))
}

// AppendCBORBlockInput appends canonical CBOR of vLLM's hash input
// (parent, tuple(tokens), extra_keys) where extra_keys is None when extra is
// empty and a tuple of strings otherwise (LoRA name, cache salt).
func AppendCBORBlockInput(dst []byte, parent [32]byte, tokens []int32, extra ...string) []byte {
	dst = append(dst, 0x83)
	dst = appendCBORHead(dst, 2, 32)
	dst = append(dst, parent[:]...)
	dst = appendCBORHead(dst, 4, uint64(len(tokens)))
	for _, t := range tokens {
		dst = appendCBORInt(dst, int64(t))
	}
	if len(extra) == 0 {
		return append(dst, 0xf6)
	}
	dst = appendCBORHead(dst, 4, uint64(len(extra)))
	for _, s := range extra {
		dst = appendCBORText(dst, s)
	}
	return dst
}

// SHA256CBORBlockHash is vLLM's hash_block_tokens with sha256_cbor. parent
// must be NONE_HASH for a sequence's first block.
func SHA256CBORBlockHash(parent [32]byte, tokens []int32, extra ...string) [32]byte {
	var stack [256]byte
	return sha256.Sum256(AppendCBORBlockInput(stack[:0], parent, tokens, extra...))
}

// VLLMHasher is a kvcache.Hasher computing vLLM's sha256_cbor chain, so the
// block hashes an engine publishes equal vLLM's for the same tokens and seed.
// Like every kvcache.Hasher it is used from one goroutine only.
type VLLMHasher struct {
	none [32]byte
	buf  []byte
}

// NewVLLMHasher returns a hasher rooted at NoneHash(seed); an empty seed means
// DefaultNoneHashSeed.
func NewVLLMHasher(seed string) *VLLMHasher {
	if seed == "" {
		seed = DefaultNoneHashSeed
	}
	return &VLLMHasher{none: NoneHash(seed)}
}

// Hash implements kvcache.Hasher.
func (h *VLLMHasher) Hash(parent kvcache.BlockHash, tokens []tokenid.ID) kvcache.BlockHash {
	p := [32]byte(parent)
	if parent.IsZero() {
		p = h.none
	}
	h.buf = AppendCBORBlockInput(h.buf[:0], p, tokens)
	return sha256.Sum256(h.buf)
}

// SGLangBlockHash is SGLang's page hash: SHA-256 over the previous page's
// digest (nothing for the first page) followed by each token as a
// little-endian uint32.
func SGLangBlockHash(prev []byte, tokens []int32) [32]byte {
	d := sha256.New()
	d.Write(prev)
	var b [4]byte
	for _, t := range tokens {
		binary.LittleEndian.PutUint32(b[:], uint32(t))
		d.Write(b[:])
	}
	var out [32]byte
	d.Sum(out[:0])
	return out
}

// SGLangHashInt64 is the int64 SGLang publishes for a digest: its first 8
// bytes, big-endian, signed.
func SGLangHashInt64(digest [32]byte) int64 {
	return int64(binary.BigEndian.Uint64(digest[:8]))
}

func appendCBORHead(dst []byte, major byte, n uint64) []byte {
	m := major << 5
	switch {
	case n < 24:
		return append(dst, m|byte(n))
	case n <= math.MaxUint8:
		return append(dst, m|24, byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(dst, m|25), uint16(n))
	case n <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(dst, m|26), uint32(n))
	}
	return binary.BigEndian.AppendUint64(append(dst, m|27), n)
}

func appendCBORInt(dst []byte, v int64) []byte {
	if v >= 0 {
		return appendCBORHead(dst, 0, uint64(v))
	}
	return appendCBORHead(dst, 1, uint64(-1-v))
}

func appendCBORText(dst []byte, s string) []byte {
	return append(appendCBORHead(dst, 3, uint64(len(s))), s...)
}

// SGLangHasher is kvcache.Hasher for SGLang's page hashes
// (SGLangBlockHash): the root page hashes no parent digest.
type SGLangHasher struct{}

// Hash implements kvcache.Hasher.
func (SGLangHasher) Hash(parent kvcache.BlockHash, tokens []tokenid.ID) kvcache.BlockHash {
	var prev []byte
	if !parent.IsZero() {
		prev = parent[:]
	}
	return SGLangBlockHash(prev, tokens)
}
