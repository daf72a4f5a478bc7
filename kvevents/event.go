package kvevents

import (
	"encoding/binary"
	"fmt"
)

// Format selects how events inside a batch are encoded. The batch itself is
// always a positional array, as in every vLLM and SGLang release.
type Format uint8

const (
	// FormatMap is current vLLM's tagged-map encoding (the default).
	FormatMap Format = iota
	// FormatArray is the legacy positional encoding (vLLM before #42892).
	FormatArray
)

// ParseFormat parses the --kv-events-format flag value ("map" or "array").
func ParseFormat(s string) (Format, error) {
	switch s {
	case "map", "":
		return FormatMap, nil
	case "array":
		return FormatArray, nil
	}
	return 0, fmt.Errorf("kvevents: unknown event format %q (want array or map)", s)
}

func (f Format) String() string {
	if f == FormatArray {
		return "array"
	}
	return "map"
}

// EventType is an event's tag.
type EventType uint8

const (
	TypeUnknown EventType = iota
	TypeBlockStored
	TypeBlockRemoved
	TypeAllBlocksCleared
)

func (t EventType) String() string {
	switch t {
	case TypeBlockStored:
		return "BlockStored"
	case TypeBlockRemoved:
		return "BlockRemoved"
	case TypeAllBlocksCleared:
		return "AllBlocksCleared"
	}
	return "Unknown"
}

// Hash is vLLM's ExternalBlockHash: an integer, or the raw digest when the
// engine runs with VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0.
type Hash struct {
	// V is the integer form. For a digest it is the last 8 bytes big-endian,
	// exactly what vLLM would have sent in integer mode, so consumers can key
	// on V alone. Signed (SGLang) hashes are stored as their two's-complement
	// bit pattern.
	V uint64
	// Bytes is the digest when the wire carried bytes, nil for integers.
	Bytes []byte
}

// IntHash returns an integer-form Hash.
func IntHash(v uint64) Hash { return Hash{V: v} }

// BytesHash returns a bytes-form Hash, deriving V like vLLM does.
func BytesHash(b []byte) Hash { return Hash{V: hashBytesToUint64(b), Bytes: b} }

// hashBytesToUint64 is int.from_bytes(b, "big") & (2**64-1).
func hashBytesToUint64(b []byte) uint64 {
	if len(b) >= 8 {
		return binary.BigEndian.Uint64(b[len(b)-8:])
	}
	var v uint64
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	return v
}

// OptInt is an integer that may be None on the wire.
type OptInt struct {
	V     int64
	Valid bool
}

// Int returns a present OptInt.
func Int(v int64) OptInt { return OptInt{V: v, Valid: true} }

// Event is one KV event. Which fields matter depends on Type; the rest stay
// zero. A flat struct instead of an interface lets the decoder fill a reused
// slice without allocating per event.
//
// Strings use "" for None: vLLM never sends an empty string in these fields.
type Event struct {
	Type EventType

	// BlockStored and BlockRemoved.
	BlockHashes []Hash
	Medium      string // "GPU", "CPU", …; "" is None
	GroupIdx    OptInt
	Locality    string

	// BlockStored only.
	ParentBlockHash Hash
	HasParent       bool // false: parent_block_hash is None (run starts at block 0)
	// TokenIDs holds len(BlockHashes)*BlockSize tokens for GPU events. For
	// SGLang's EAGLE [tok, tok] pairs the first token of each pair is kept.
	TokenIDs  []int32
	BlockSize int
	LoRAID    OptInt
	LoRAName  string
	// ExtraKeys is None when nil; otherwise one entry per block, each the raw
	// msgpack of that entry or nil for None. The codec passes them through
	// without interpreting them.
	ExtraKeys                [][]byte
	KVCacheSpecKind          string
	KVCacheSpecSlidingWindow OptInt
}

// Batch is one published message: the events of one scheduler step.
type Batch struct {
	TS     float64 // time.time() at publish
	Events []Event
	// DataParallelRank is omitted from the wire when not Valid. SGLang calls
	// the same slot attn_dp_rank.
	DataParallelRank OptInt
	// Skipped counts events the decoder dropped because of an unknown tag.
	Skipped int
	// SignedHashes (encoder only) writes integer hashes as signed int64s,
	// as SGLang does (msgpack int64, negative for a digest whose first
	// bit is set); the decoder reads either into Hash.V's bit pattern.
	SignedHashes bool
}
