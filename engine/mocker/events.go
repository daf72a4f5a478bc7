package mocker

import (
	"github.com/tandemllm/tandem/kvcache"
	"github.com/tandemllm/tandem/kvevents"
)

// eventBuffer is the kvcache.EventSink of a worker with events on. It
// collects one scheduler step's events in vLLM's shapes, to be encoded and
// published as one batch at the end of the step (vLLM publishes once per
// step, only if non-empty). Its arenas are reused step after step.
type eventBuffer struct {
	blockSize   int
	format      kvevents.Format
	bytesHashes bool

	events []kvevents.Event
	hashes []kvevents.Hash
	tokens []int32
	digest []byte
	nils   [][]byte // read-only run of nil extra_keys entries
}

func (b *eventBuffer) hash(h kvcache.BlockHash) kvevents.Hash {
	if !b.bytesHashes {
		return kvevents.IntHash(h.Uint64())
	}
	start := len(b.digest)
	b.digest = append(b.digest, h[:]...)
	return kvevents.BytesHash(b.digest[start:len(b.digest):len(b.digest)])
}

// vllmShape adds the fields current vLLM (map format, v0.26+) fills for a
// plain GPU full-attention model; the legacy array format predates them.
func (b *eventBuffer) vllmShape(e *kvevents.Event, blocks int) {
	if b.format != kvevents.FormatMap {
		return
	}
	e.GroupIdx = kvevents.Int(0)
	if e.Type != kvevents.TypeBlockStored {
		return
	}
	for len(b.nils) < blocks {
		b.nils = append(b.nils, nil)
	}
	e.ExtraKeys = b.nils[:blocks:blocks]
	e.KVCacheSpecKind = "full_attention"
}

// BlocksStored implements kvcache.EventSink.
func (b *eventBuffer) BlocksStored(parent kvcache.BlockHash, blocks []kvcache.BlockHash, tokens []kvcache.Token) {
	hs := len(b.hashes)
	for _, h := range blocks {
		b.hashes = append(b.hashes, b.hash(h))
	}
	ts := len(b.tokens)
	b.tokens = append(b.tokens, tokens...)
	e := kvevents.Event{
		Type:        kvevents.TypeBlockStored,
		BlockHashes: b.hashes[hs:len(b.hashes):len(b.hashes)],
		TokenIDs:    b.tokens[ts:len(b.tokens):len(b.tokens)],
		BlockSize:   b.blockSize,
		Medium:      "GPU",
	}
	if !parent.IsZero() {
		e.ParentBlockHash, e.HasParent = b.hash(parent), true
	}
	b.vllmShape(&e, len(blocks))
	b.events = append(b.events, e)
}

// BlocksRemoved implements kvcache.EventSink, one event per block as vLLM's
// block pool emits them.
func (b *eventBuffer) BlocksRemoved(blocks []kvcache.BlockHash) {
	for _, h := range blocks {
		i := len(b.hashes)
		b.hashes = append(b.hashes, b.hash(h))
		e := kvevents.Event{Type: kvevents.TypeBlockRemoved, BlockHashes: b.hashes[i : i+1 : i+1], Medium: "GPU"}
		b.vllmShape(&e, 1)
		b.events = append(b.events, e)
	}
}

// AllBlocksCleared implements kvcache.EventSink.
func (b *eventBuffer) AllBlocksCleared() {
	b.events = append(b.events, kvevents.Event{Type: kvevents.TypeAllBlocksCleared})
}

// take encodes and clears the step's events; nil when there were none.
func (b *eventBuffer) take(ts float64, dpRank int) []byte {
	if len(b.events) == 0 {
		return nil
	}
	batch := kvevents.Batch{TS: ts, Events: b.events, DataParallelRank: kvevents.Int(int64(dpRank))}
	payload := kvevents.EncodeBatch(&batch, b.format)
	clear(b.events) // drop references into the arenas
	b.events, b.hashes, b.tokens, b.digest = b.events[:0], b.hashes[:0], b.tokens[:0], b.digest[:0]
	return payload
}
