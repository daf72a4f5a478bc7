// Package event is the KV event model of vLLM and SGLang (events, batches,
// block hashes) and the states of a followed event stream, with no transport:
// package kvevents owns the wire (codec, ZMQ publisher and subscriber) and
// re-exports these types; kvindex, the router and planes/kvevents/follow share them
// without linking a socket library.
package event

import "encoding/binary"

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

// StreamState is what a stream's follower knows about its event stream.
type StreamState uint8

const (
	// StreamConnecting: dialing, or reconnecting after an error. Events may
	// be missed meanwhile; sequence numbers will tell.
	StreamConnecting StreamState = iota
	// StreamSynced: connected and caught up through the replay socket with
	// everything the publisher still buffers. Whether the subscription
	// itself is effective is not known yet (ZMQ's slow joiner: a PUB drops
	// messages until it has processed the SUB's subscription).
	StreamSynced
	// StreamLive: a live message arrived in sequence after connecting, so
	// the subscription is effective and nothing was lost.
	StreamLive
	// StreamLoss: events were lost for good (replay unavailable, failed, or
	// no longer buffered; or a corrupt payload). The consumer's view of the
	// engine's cache is incomplete.
	StreamLoss
	// StreamReset: the publisher restarted (its sequence went back), so the
	// engine's cache is new. The consumer must drop what it knew; what the
	// new publisher still buffers follows as batches.
	StreamReset
)

func (s StreamState) String() string {
	switch s {
	case StreamConnecting:
		return "connecting"
	case StreamSynced:
		return "synced"
	case StreamLive:
		return "live"
	case StreamLoss:
		return "loss"
	case StreamReset:
		return "reset"
	}
	return "unknown"
}

// StreamStatus reports a transition.
type StreamStatus struct {
	State StreamState
	// Seq is the sequence number the status concerns (the first live one,
	// the first after a loss, …).
	Seq uint64
	// Lost counts batches lost for good (StreamLoss); 0 when unknown.
	Lost uint64
	// Err is the cause of StreamConnecting (after an error) or StreamLoss.
	Err error
	// MidStream, on a fresh subscription's StreamLive, says its first
	// batch was not the stream's first and nothing replayed those before
	// it: they predate the subscription, or were published while it was
	// still being established (ZMQ's slow joiner drops them unseen).
	// Either way the consumer's index may lack what they stored.
	MidStream bool
}

// Handler consumes one worker's stream. Calls come from the subscriber's
// goroutine, one at a time, batches in sequence order.
type Handler interface {
	// HandleBatch receives the next batch. b and everything it references
	// are valid only during the call (the decoder reuses its buffers).
	HandleBatch(seq uint64, b *Batch)
	// HandleState reports a stream transition.
	HandleState(s StreamStatus)
}
