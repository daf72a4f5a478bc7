package discovery

import (
	"encoding/hex"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/tokenizer"
)

// RecordOf is the registration record of worker id serving model with
// eng, as far as the engine can tell: its kind, context length, capacity,
// KV layout (LayoutOf) and KV event sockets (published in eventsFormat,
// "map" or "array"). The worker fills in its role, version and KV config
// fingerprint, and the addresses once its sockets are bound.
func RecordOf(id string, eng engine.Engine, model *tokenizer.Model, eventsFormat string) Record {
	info := eng.Info()
	rec := Record{ID: id, Model: model.Name, Engine: info.Kind, ContextLength: info.ContextLength, KVLayout: LayoutOf(eng, model)}
	if info.BlockSize > 0 {
		rec.CapacityBlocks = info.KVCapacityTokens / info.BlockSize
	}
	if e, ok := eng.(engine.KVEventsPublisher); ok {
		rec.KVEvents.Endpoint = e.KVEventsEndpoint()
	}
	if e, ok := eng.(engine.KVEventsReplayer); ok {
		rec.KVEvents.ReplayEndpoint = e.KVEventsReplayEndpoint()
		rec.KVEvents.ReplayToken = hex.EncodeToString(engine.ReplayToken(eng))
	}
	if rec.KVEvents.Endpoint != "" {
		rec.KVEvents.Format = eventsFormat
	}
	rec.KVShare = ShareOf(eng)
	return rec
}

// ShareOf names the lower KV tiers eng shares with other workers of its
// host: its KVSharedHost (a shared host-memory pool: engine/mocker's
// --kv-offload-host-shared) and KVSharedTier (a shared disk:
// --kv-offload-disk-shared), when it has them.
func ShareOf(eng engine.Engine) KVShare {
	var s KVShare
	if e, ok := eng.(interface{ KVSharedHost() string }); ok {
		s.Host = e.KVSharedHost()
	}
	if e, ok := eng.(interface{ KVSharedTier() string }); ok {
		s.Disk = e.KVSharedTier()
	}
	return s
}

// LayoutOf describes eng's KV cache as far as the engine can tell
// (engine.KVDescriber, engine.KVPort), for model's tokenizer.
func LayoutOf(eng engine.Engine, model *tokenizer.Model) KVLayout {
	l := KVLayout{Model: model.Name, BlockSize: eng.Info().BlockSize, TokenizerHash: model.Tokenizer.Fingerprint()}
	if d, ok := eng.(engine.KVDescriber); ok {
		s := d.KVShape()
		l.DType, l.Layers, l.KVHeads, l.HeadSize, l.Weights = s.DType, s.Layers, s.KVHeads, s.HeadSize, s.Weights
	}
	if p, ok := eng.(engine.KVPort); ok {
		l.EngineLayout = p.KVLayout()
	}
	return l
}

// TransferProtocol is ProtocolVLLM for engines that are vLLM servers
// (engine/upstream), which move their own KV; "" otherwise.
func TransferProtocol(eng engine.Engine) string {
	if p, ok := eng.(engine.KVTransferProtocolReporter); ok && p.KVTransferProtocol() == ProtocolVLLM {
		return ProtocolVLLM
	}
	return ""
}
