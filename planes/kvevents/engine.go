package kvevents

import (
	"context"
	"crypto/rand"
	"fmt"
	"github.com/tandemllm/tandem/internal/connlimit"
	"log/slog"
	"net/netip"

	"github.com/tandemllm/tandem/kvcache"
	"github.com/tandemllm/tandem/tokenid"
)

// EngineConfig configures an engine's vLLM-compatible KV event publishing
// (the mocker's and the native engine's --kv-events flags).
type EngineConfig struct {
	// Enabled publishes events; false (--kv-events off) is a worker that
	// silently publishes nothing.
	Enabled bool
	// Format of events inside a batch: FormatMap (current vLLM,
	// default) or FormatArray (legacy positional).
	Format Format
	// Endpoint is where the PUB socket binds (default tcp://*:5557).
	Endpoint string
	// ReplayEndpoint is where the ROUTER replay socket binds; "" disables.
	ReplayEndpoint string
	// ReplayAllow are the networks routers replay from
	// (--kv-events-replay-allow): with token ids in the events, a replay
	// endpoint beyond loopback needs them (PublisherConfig.GuardReplay).
	ReplayAllow []netip.Prefix
	// ReplayLimits cap the replay socket's connections
	// (--kv-events-replay-max-conns, -max-per-source, -handshake-timeout;
	// zero: DefaultReplayLimits).
	ReplayLimits connlimit.Limits
	// ReplayToken, if set, gates replayed history
	// (PublisherConfig.ReplayToken). ReplayAuth makes NewEngineEvents
	// generate one when events carry token ids and none is set: Tandem's
	// own workers turn it on (their routers read the token from
	// discovery); a stand-in for vLLM leaves it off, as vLLM's replay
	// answers anyone.
	ReplayToken  []byte
	ReplayAuth   bool
	Topic        string
	BufferSteps  int // replay ring, in batches (default 10000)
	HWM          int // default 100000
	MaxQueueSize int // default 100000
	// HashSeed roots vLLM's sha256_cbor chain (NONE_HASH); set it to the
	// PYTHONHASHSEED a real vLLM would use. Default "vllm-none-hash".
	HashSeed string
	// BytesHashes publishes raw 32-byte digests instead of 64-bit ints
	// (vLLM with VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0).
	BytesHashes bool
	// DataParallelRank is stamped on every batch (vLLM sends 0).
	DataParallelRank int
	// OmitTokenIDs publishes BlockStored events without token ids, hashed
	// with Tandem's own block hash (kvcache.XXH3Hasher, which is
	// kvindex's) instead of vLLM's: a subscriber on the socket learns block
	// hashes, not prompts, and a Tandem router whose block size is the
	// engine's indexes the hashes as they are (--kv-events-token-ids=false).
	OmitTokenIDs bool
	// Dial connects to a binding subscriber instead of binding
	// (PublisherConfig.Dial); FirstSeq numbers the first batch.
	Dial     bool
	FirstSeq uint64
	// ZeroParent writes parent_block_hash 0 instead of None for a chain
	// that starts at block 0, as array-form vLLM look-alikes do (the
	// quirk subscribers must accept).
	ZeroParent bool
	// SGLang publishes as SGLang's scheduler does
	// (python/sglang/srt/disaggregation/kv_events.py and the radix cache's
	// page events): block hashes are SGLang's SHA-256 page chain
	// (SGLangBlockHash, no seed) sent as signed int64s (the digest's first
	// 8 bytes), events are positional arrays (msgspec array_like=True),
	// BlockStored ends with medium "GPU", the batch's third field is the
	// attention-DP rank (attn_dp_rank), and replay answers use the older
	// 2-frame layout [seq, payload]. Format is forced to FormatArray.
	SGLang bool
}

// EngineEvents is what an engine needs to publish its KV cache's events the
// way vLLM does: it is the kvcache.EventSink of the engine's cache, collects
// one scheduler step's events, and publishes them as one batch when the
// engine calls EndStep (vLLM publishes once per step, only if non-empty).
// The mocker and the native engine share it, so their wire output is the
// same. Like the cache it serves, it belongs to the scheduler goroutine.
type EngineEvents struct {
	stepRecorder
	pub    *Publisher
	hasher kvcache.Hasher
	dpRank int
}

// NewEngineEvents binds the publisher's sockets.
func NewEngineEvents(ctx context.Context, cfg EngineConfig, blockSize int, log *slog.Logger) (*EngineEvents, error) {
	if cfg.OmitTokenIDs && cfg.BytesHashes {
		return nil, fmt.Errorf("KV events: events without token ids carry Tandem's 64-bit hashes; they cannot be bytes hashes")
	}
	if cfg.ReplayAuth && !cfg.OmitTokenIDs && cfg.ReplayEndpoint != "" && cfg.ReplayToken == nil {
		// Past batches carry prompts: history goes only to routers that
		// present this token (the worker's relay, its router in process,
		// frontends that read it from discovery).
		cfg.ReplayToken = make([]byte, 32)
		if _, err := rand.Read(cfg.ReplayToken); err != nil {
			return nil, fmt.Errorf("KV events: replay token: %w", err)
		}
	}
	pub, err := NewPublisher(ctx, PublisherConfig{
		Endpoint:         cfg.Endpoint,
		ReplayEndpoint:   cfg.ReplayEndpoint,
		Topic:            cfg.Topic,
		BufferSteps:      cfg.BufferSteps,
		HWM:              cfg.HWM,
		MaxQueueSize:     cfg.MaxQueueSize,
		DataParallelRank: cfg.DataParallelRank,
		Dial:             cfg.Dial,
		FirstSeq:         cfg.FirstSeq,
		LegacyReplay:     cfg.SGLang,
		GuardReplay:      !cfg.OmitTokenIDs,
		ReplayAllow:      cfg.ReplayAllow,
		ReplayLimits:     cfg.ReplayLimits,
		ReplayToken:      cfg.ReplayToken,
		Logger:           log,
	})
	if err != nil {
		return nil, fmt.Errorf("KV events: %w", err)
	}
	var h kvcache.Hasher = NewVLLMHasher(cfg.HashSeed)
	if cfg.OmitTokenIDs {
		h = &kvcache.XXH3Hasher{}
	}
	format := cfg.Format
	if cfg.SGLang {
		if cfg.OmitTokenIDs || cfg.BytesHashes {
			return nil, fmt.Errorf("KV events: SGLang events carry token ids and int64 hashes")
		}
		h, format = SGLangHasher{}, FormatArray
	}
	return &EngineEvents{
		stepRecorder: stepRecorder{blockSize: blockSize, format: format, bytesHashes: cfg.BytesHashes, omitTokens: cfg.OmitTokenIDs,
			zeroParent: cfg.ZeroParent, sglang: cfg.SGLang},
		pub: pub, hasher: h, dpRank: cfg.DataParallelRank,
	}, nil
}

// Hasher is the block hash the engine's cache must use for the published
// hashes to be vLLM's (sha256_cbor), or Tandem's with OmitTokenIDs.
func (e *EngineEvents) Hasher() kvcache.Hasher { return e.hasher }

// EndStep publishes the step's events as one batch stamped ts (seconds).
func (e *EngineEvents) EndStep(ts float64) {
	if payload := e.take(ts, e.dpRank); payload != nil {
		e.pub.Publish(payload)
	}
}

// TokenIDs reports whether the published events carry token ids.
func (e *EngineEvents) TokenIDs() bool { return !e.omitTokens }

// Endpoint is the bound PUB address (with the real port when 0 was asked).
func (e *EngineEvents) Endpoint() string { return e.pub.Endpoint() }

// ReplayEndpoint is the bound replay address, "" if none.
func (e *EngineEvents) ReplayEndpoint() string { return e.pub.ReplayEndpoint() }

// ReplayToken is what a replay request must carry for history (nil: none
// needed, the events carry no token ids).
func (e *EngineEvents) ReplayToken() []byte { return e.pub.cfg.ReplayToken }

// Stats reports the publisher's counters.
func (e *EngineEvents) Stats() PublisherStats { return e.pub.Stats() }

// Close stops the publisher.
func (e *EngineEvents) Close() error { return e.pub.Close() }

// stepRecorder is the kvcache.EventSink of a worker with events on. It
// collects one scheduler step's events in vLLM's shapes, to be encoded and
// published as one batch at the end of the step (vLLM publishes once per
// step, only if non-empty). Its arenas are reused step after step.
type stepRecorder struct {
	blockSize   int
	format      Format
	bytesHashes bool
	omitTokens  bool
	zeroParent  bool
	sglang      bool // SGLang's signed int64 of the digest's first 8 bytes

	events []Event
	hashes []Hash
	tokens []int32
	digest []byte
	nils   [][]byte // read-only run of nil extra_keys entries
}

func (b *stepRecorder) hash(h kvcache.BlockHash) Hash {
	if b.sglang {
		return IntHash(uint64(SGLangHashInt64(h)))
	}
	if !b.bytesHashes {
		return IntHash(h.Uint64())
	}
	start := len(b.digest)
	b.digest = append(b.digest, h[:]...)
	return BytesHash(b.digest[start:len(b.digest):len(b.digest)])
}

// vllmShape adds the fields current vLLM (map format, v0.26+) fills for a
// plain GPU full-attention model; the legacy array format predates them.
func (b *stepRecorder) vllmShape(e *Event, blocks int) {
	if b.format != FormatMap {
		return
	}
	e.GroupIdx = Int(0)
	if e.Type != TypeBlockStored {
		return
	}
	for len(b.nils) < blocks {
		b.nils = append(b.nils, nil)
	}
	e.ExtraKeys = b.nils[:blocks:blocks]
	e.KVCacheSpecKind = "full_attention"
}

// BlocksStored implements kvcache.EventSink.
func (b *stepRecorder) BlocksStored(parent kvcache.BlockHash, blocks []kvcache.BlockHash, tokens []tokenid.ID) {
	b.TierStored(kvcache.TierG1, parent, blocks, tokens)
}

// medium names tier t as the engine being imitated does.
func (b *stepRecorder) medium(t kvcache.Tier) string {
	if b.sglang {
		return t.SGLangMedium()
	}
	return t.Medium()
}

// TierStored implements kvcache.TierSink: a BlockStored whose medium names
// the tier. Lower-tier events carry their token ids and block size (vLLM's
// "self-describing" offload events), so a router can place them without
// having seen the pool's.
func (b *stepRecorder) TierStored(t kvcache.Tier, parent kvcache.BlockHash, blocks []kvcache.BlockHash, tokens []tokenid.ID) {
	hs := len(b.hashes)
	for _, h := range blocks {
		b.hashes = append(b.hashes, b.hash(h))
	}
	ts := len(b.tokens)
	if !b.omitTokens {
		b.tokens = append(b.tokens, tokens...)
	}
	e := Event{
		Type:        TypeBlockStored,
		BlockHashes: b.hashes[hs:len(b.hashes):len(b.hashes)],
		TokenIDs:    b.tokens[ts:len(b.tokens):len(b.tokens)],
		BlockSize:   b.blockSize,
		Medium:      b.medium(t),
	}
	if !parent.IsZero() {
		e.ParentBlockHash, e.HasParent = b.hash(parent), true
	} else if b.zeroParent {
		e.HasParent = true // parent_block_hash 0: "none" to its writer
	}
	b.vllmShape(&e, len(blocks))
	b.events = append(b.events, e)
}

// BlocksRemoved implements kvcache.EventSink, one event per block as vLLM's
// block pool emits them.
func (b *stepRecorder) BlocksRemoved(blocks []kvcache.BlockHash) {
	b.TierRemoved(kvcache.TierG1, blocks)
}

// TierRemoved implements kvcache.TierSink.
func (b *stepRecorder) TierRemoved(t kvcache.Tier, blocks []kvcache.BlockHash) {
	for _, h := range blocks {
		i := len(b.hashes)
		b.hashes = append(b.hashes, b.hash(h))
		e := Event{Type: TypeBlockRemoved, BlockHashes: b.hashes[i : i+1 : i+1], Medium: b.medium(t)}
		b.vllmShape(&e, 1)
		b.events = append(b.events, e)
	}
}

// AllBlocksCleared implements kvcache.EventSink.
func (b *stepRecorder) AllBlocksCleared() {
	b.events = append(b.events, Event{Type: TypeAllBlocksCleared})
}

// take encodes and clears the step's events; nil when there were none.
func (b *stepRecorder) take(ts float64, dpRank int) []byte {
	if len(b.events) == 0 {
		return nil
	}
	batch := Batch{TS: ts, Events: b.events, DataParallelRank: Int(int64(dpRank)), SignedHashes: b.sglang}
	payload := EncodeBatch(&batch, b.format)
	clear(b.events) // drop references into the arenas
	b.events, b.hashes, b.tokens, b.digest = b.events[:0], b.hashes[:0], b.tokens[:0], b.digest[:0]
	return payload
}

// Publish sends payload as its own batch outside the step cycle (a probe
// that lets a new subscriber see the stream is up); it reports whether the
// payload was queued.
func (e *EngineEvents) Publish(payload []byte) bool { return e.pub.Publish(payload) }
