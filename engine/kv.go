package engine

import (
	"context"
	"time"
)

// KVPort is implemented by engines whose KV blocks can move to another
// worker (disaggregated prefill). Blocks are addressed by their index in a
// prompt: block i holds tokens [i*BlockSize, (i+1)*BlockSize). A block's
// payload depends only on its tokens and every token before it, so the
// tokens always travel with the blocks.
type KVPort interface {
	// KVLayout fingerprints everything that makes a block's bytes
	// meaningful (model, dtype, shape, block size). Workers with different
	// layouts must never exchange blocks.
	KVLayout() string
	// KVBlockBytes is the size of one block's payload.
	KVBlockBytes() int
	// CachedPrefix returns how many leading tokens of tokens (whole blocks)
	// the prefix cache holds now.
	CachedPrefix(ctx context.Context, tokens []Token) (int, error)
	// ExportBlocks writes blocks [from, n) of tokens' cached prefix into
	// buf, one block at a time, calling emit after each; n is the cached
	// prefix in blocks, returned. buf has KVBlockBytes bytes and belongs to
	// the caller (it is budgeted memory); emit may keep nothing of it.
	ExportBlocks(ctx context.Context, tokens []Token, from int, buf []byte, emit func(i int) error) (int, error)
	// ImportBlocks stores blocks [from, from+len(blocks)) of tokens in the
	// prefix cache as evictable cached blocks. Blocks before from must be
	// cached already (the importer's own prefix); otherwise it fails and
	// nothing is kept. The caller may reuse blocks' memory on return.
	ImportBlocks(ctx context.Context, tokens []Token, from int, blocks [][]byte) error
}

// KVStreamer is implemented by engines whose prefill commits KV blocks to
// the prefix cache chunk by chunk (chunked prefill), so a transfer can send
// a prompt's first blocks while its later chunks are still computed.
type KVStreamer interface {
	// KVCommitted returns a channel closed the next time blocks are
	// committed to, or imported into, the prefix cache. Take it before
	// looking at the cache so that no commit is missed.
	KVCommitted() <-chan struct{}
	// PrefillChunkTokens is the most prompt tokens one scheduler step
	// prefills: blocks become exportable at this granularity.
	PrefillChunkTokens() int
}

// PrefillEstimator is implemented by engines that can predict how long a
// prefill takes, so a disaggregation decision does not need to learn it.
type PrefillEstimator interface {
	// EstimatePrefill is the time to compute n uncached prompt tokens on an
	// otherwise idle worker; negative while the engine cannot tell yet
	// (one that measures itself, before its first prefill).
	EstimatePrefill(n int) float64 // seconds
}

// LoadReporter is implemented by engines that expose their scheduler load.
type LoadReporter interface {
	// RunningDecodes is the number of sequences being decoded now: the
	// requests a local prefill would stall.
	RunningDecodes() int
}

// QueueReporter is implemented by engines whose own account of their
// queue can include requests this Tandem did not send: an upstream server
// shared with other clients reports it on its /metrics. The router adds
// what it cannot see itself to its own in-flight counts.
type QueueReporter interface {
	// EngineQueue returns the requests the engine runs and the ones it
	// holds waiting, as of at; ok is false while unknown (no good
	// measurement yet, or the last one failed).
	EngineQueue() (running, waiting int, at time.Time, ok bool)
}

// KVShape is what an engine can tell about its KV cache for its discovery
// record: the fields that decide whether two workers' blocks mean the
// same thing. Zero fields are unknown.
type KVShape struct {
	DType    string // "f32"; "simulated" for a cache with no tensors
	Layers   int
	KVHeads  int
	HeadSize int
	// Weights identifies the checkpoint (a weight fingerprint, or the
	// served model's name for a server whose weights Tandem cannot see).
	Weights string
}

// KVDescriber is implemented by engines that can describe their KV cache,
// so that a worker builds its record without knowing the engine's type.
type KVDescriber interface {
	KVShape() KVShape
}
