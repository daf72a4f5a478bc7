package mocker

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/kvcache"
	"github.com/tandemllm/tandem/planes/kvevents"
	"github.com/tandemllm/tandem/structured"
)

// Defaults; each matches the flag of the same name.
const (
	DefaultBlockSize           = 16
	DefaultKVCapacityTokens    = 16384 * DefaultBlockSize // Dynamo's mocker default of 16384 blocks
	DefaultMaxNumSeqs          = 256
	DefaultMaxNumBatchedTokens = 8192
	DefaultContextLength       = 32768
	DefaultKVBytesPerToken     = 114688 // Qwen3-0.6B: 28 layers × 2 × 8 KV heads × 128 × bf16
	DefaultEngineLabel         = "0"

	// SeedKVCapacityTokens is the per-worker KV capacity of the seed
	// report's Qwen3-0.6B workers (two per 8 GB GPU).
	SeedKVCapacityTokens = 14816
)

// TimingModel is the simulated cost of a scheduler step, in milliseconds:
//
//	prefill_ms(T) = PrefillA·T² + PrefillB·T + PrefillC   T = uncached tokens computed in the step
//	decode_ms(u)  = max(DecodeA·u² + DecodeB·u + DecodeC, DecodeMin)   u = KV blocks in use / capacity
//
// A step that both prefills and decodes costs the sum. Only uncached tokens
// count towards T, so a prefix-cache hit is visibly faster, as on a GPU.
type TimingModel struct {
	PrefillA, PrefillB, PrefillC float64
	DecodeA, DecodeB, DecodeC    float64
	DecodeMin                    float64
}

// DynamoTiming is the polynomial of Dynamo's mocker (ai-dynamo/dynamo, lib/mocker: its prefill and decode
// cost polynomials): 1,024
// new tokens ≈ 32.5 ms, decode 5.7 ms empty to 34 ms full.
func DynamoTiming() TimingModel {
	return TimingModel{
		PrefillA: 4.209989e-07, PrefillB: 1.518344e-02, PrefillC: 16.50142,
		DecodeA: -25.74, DecodeB: 54.01, DecodeC: 5.74, DecodeMin: 1.0,
	}
}

// Qwen3_0_6BTiming is calibrated on the seed report's single-GPU Qwen3-0.6B
// worker: ≈80 ms TTFT for a 1,500-token miss and ≈15 ms for a hit whose
// last ~30 tokens are new. Decode keeps Dynamo's curve. Combine with
// KVCapacityTokens = SeedKVCapacityTokens to reproduce that setup.
func Qwen3_0_6BTiming() TimingModel {
	t := DynamoTiming()
	t.PrefillB, t.PrefillC = 0.0436, 13.6
	return t
}

// PrefillMs is the model's prefill time for T new tokens.
func (m TimingModel) PrefillMs(tokens int) float64 {
	if tokens <= 0 {
		return 0
	}
	t := float64(tokens)
	return m.PrefillA*t*t + m.PrefillB*t + m.PrefillC
}

// DecodeMs is the model's decode step time at KV usage u in [0, 1].
func (m TimingModel) DecodeMs(u float64) float64 {
	return max(m.DecodeA*u*u+m.DecodeB*u+m.DecodeC, m.DecodeMin)
}

// Simulated link defaults: an H100-class host, the GPU on PCIe 5.0 x16
// (MLCommons inference results' H100/H200 SXM system descriptions:
// accelerator_host_interconnect "PCIe Gen5 x16"; 32 GT/s × 16 lanes with
// 128b/130b coding is 63 GB/s each way) with host↔device copies of pinned
// memory taken at well under half that peak, the low end of the 25-50 GB/s
// effective range, and an NVMe SSD on PCIe 4.0 x4 (16 GT/s × 4 lanes,
// under 8 GB/s) for the disk tier. Onboarding is never free: the host copy
// of a Qwen3-0.6B block costs a tenth of recomputing it, a disk read
// about half.
const (
	DefaultHostBandwidth = 25e9 // bytes/s, host memory ↔ GPU
	DefaultHostLatency   = 10 * time.Microsecond
	DefaultDiskBandwidth = 5e9 // bytes/s, disk → host
	DefaultDiskLatency   = 100 * time.Microsecond
)

// TierConfig sizes the mocker's lower KV tiers and the links that reach
// them (--kv-offload-host-bytes, --kv-offload-disk-bytes and the
// --kv-offload-*-bandwidth/-latency flags). Zero sizes turn a tier off; zero
// link figures take the defaults above. Blocks below the pool have no bytes
// in the mocker: only their time is modelled.
type TierConfig struct {
	HostBytes, DiskBytes         int64
	HostBandwidth, DiskBandwidth float64 // bytes per second
	HostLatency, DiskLatency     time.Duration
	// Shared, if set, is the disk of the host this worker shares with
	// others (NewSharedDisk, one per host): a block any of them holds in
	// G3 is onboarded by the others too, and every G3 read of the host's
	// workers queues on that one disk at DiskBandwidth. Needs DiskBytes.
	Shared *SharedDisk
	// SharedHost, if set, is the host memory this worker shares with the
	// other workers of its host (NewSharedHost, one per host): a block any
	// of them holds in G2 is onboarded by the others over their own host
	// link, at HostBandwidth, as from their own G2. Needs HostBytes.
	SharedHost *SharedHost
}

// SharedHost is a simulated host-memory tier several mocker workers of one
// host share (a shared-memory segment each worker's process maps): it
// holds the union of their G2 blocks, each worker's part bounded by its
// HostBytes, and counts a block's copies so that it is in the pool from
// its first copy in to its last copy out. Each worker reads it over its
// own host↔device link.
type SharedHost struct {
	name string
	mu   sync.Mutex
	refs map[kvcache.BlockHash]int32 // G2 copies per block, over the workers
}

// NewSharedHost returns an empty shared host pool whose workers tell a
// router its name (Engine.KVSharedHost; "" for none): the router's index
// applies one worker's G2 events to every worker of that name.
func NewSharedHost(name string) *SharedHost {
	return &SharedHost{name: name, refs: make(map[kvcache.BlockHash]int32)}
}

// Name is the shared host pool's name.
func (p *SharedHost) Name() string { return p.name }

// Has implements kvcache.SharedTier.
func (p *SharedHost) Has(h kvcache.BlockHash) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refs[h] > 0
}

// StoredG2 implements kvcache.SharedHostRecorder.
func (p *SharedHost) StoredG2(h kvcache.BlockHash) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refs[h]++
	return p.refs[h] == 1
}

// RemovedG2 implements kvcache.SharedHostRecorder.
func (p *SharedHost) RemovedG2(h kvcache.BlockHash) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.refs[h] <= 1 {
		delete(p.refs, h)
		return true
	}
	p.refs[h]--
	return false
}

// Blocks is how many distinct blocks the pool holds.
func (p *SharedHost) Blocks() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.refs)
}

// SharedDisk is a simulated disk tier several mocker workers of one host
// share, as the native engine's --kv-offload-disk-shared directory is: it
// holds the union of their G3 blocks (each worker's share bounded by its
// DiskBytes) and one queue of reads, kept in the time of the clock the
// workers sharing it must share (Config.Clock).
type SharedDisk struct {
	name string
	mu   sync.Mutex
	refs map[kvcache.BlockHash]int32 // G3 copies per block, over the workers
	free time.Time                   // when the reads queued so far end
}

// NewSharedDisk returns an empty shared disk.
func NewSharedDisk() *SharedDisk { return NewSharedDiskNamed("") }

// NewSharedDiskNamed returns an empty shared disk whose workers tell a
// router its name (Engine.KVSharedTier): the router's index applies one
// worker's G3 events to every worker of that name.
func NewSharedDiskNamed(name string) *SharedDisk {
	return &SharedDisk{name: name, refs: make(map[kvcache.BlockHash]int32)}
}

// Name is the shared disk's name ("" for NewSharedDisk's).
func (d *SharedDisk) Name() string { return d.name }

// Has implements kvcache.SharedTier.
func (d *SharedDisk) Has(h kvcache.BlockHash) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.refs[h] > 0
}

// StoredG3 implements kvcache.SharedRecorder.
func (d *SharedDisk) StoredG3(h kvcache.BlockHash) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.refs[h]++
	return d.refs[h] == 1
}

// RemovedG3 implements kvcache.SharedRecorder.
func (d *SharedDisk) RemovedG3(h kvcache.BlockHash) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.refs[h] <= 1 {
		delete(d.refs, h)
		return true
	}
	d.refs[h]--
	return false
}

// read queues a read of dur on the disk and returns when it ends.
func (d *SharedDisk) read(now time.Time, dur time.Duration) time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.free = later(now, d.free).Add(dur)
	return d.free
}

// Enabled reports whether any lower tier is configured.
func (t TierConfig) Enabled() bool { return t.HostBytes > 0 || t.DiskBytes > 0 }

// onboardSeconds is the simulated time to bring n2 blocks from host memory
// and n3 from disk into the pool, blockBytes each: the disk read and one
// host-to-device copy of everything (a disk block passes through host
// memory), each paying its link's latency once per onboard.
func (t TierConfig) onboardSeconds(n2, n3 int, blockBytes int64) (disk, host float64) {
	if n3 > 0 {
		disk = t.DiskLatency.Seconds() + float64(int64(n3)*blockBytes)/t.DiskBandwidth
	}
	if n2+n3 > 0 {
		host = t.HostLatency.Seconds() + float64(int64(n2+n3)*blockBytes)/t.HostBandwidth
	}
	return disk, host
}

// onboardWall is how long an onboard of n2 host and n3 disk blocks takes
// on idle links. The copies are pipelined block by block, as LMCache's and
// Dynamo KVBM's chunked transfers are: a block read from disk crosses the
// host link while the next is read, so the onboard ends when the slower
// link is done, or one block's host copy after the disk's last read.
func (t TierConfig) onboardWall(n2, n3 int, blockBytes int64) float64 {
	disk, host := t.onboardSeconds(n2, n3, blockBytes)
	if n3 == 0 {
		return host
	}
	_, last := t.onboardSeconds(1, 0, blockBytes)
	return max(host, disk+last)
}

// KVEventsConfig configures vLLM-compatible KV event publishing.
type KVEventsConfig = kvevents.EngineConfig

// Config configures one mocker worker. Zero fields take the defaults
// above, so Config{} is a usable (events-off) worker; DefaultConfig returns
// the flag defaults, events on.
type Config struct {
	// Model is the served model name (Info, metric labels).
	Model string
	// Seed makes outputs reproducible: the same Seed, prompt and sampling
	// seed give the same tokens.
	Seed uint64
	// Vocabulary is the token stream the mocker emits, typically the
	// tokenization of some readable English text: each sequence emits it
	// cyclically from an offset derived from Seed and the request (its
	// sampling seed if set, else its prompt), so outputs are deterministic
	// and decode to readable text. Empty: the prompt itself is cycled.
	Vocabulary []engine.Token
	// TokenBytes is the model's vocabulary as token byte strings, for
	// requests with a Constraint (structured outputs): the mocker then
	// draws each token uniformly among those the constraint allows. Nil:
	// such requests are refused.
	TokenBytes *structured.Vocab
	// EOS lists end-of-sequence tokens (reported in Info; EOS[0] is emitted
	// on a natural stop).
	EOS []engine.Token
	// MaxNaturalTokens, when positive, gives each sequence a natural end
	// length drawn deterministically in [1, MaxNaturalTokens] (raised to
	// MinTokens+1) from its seed; the sequence then emits EOS[0] and stops
	// unless IgnoreEOS. Zero means sequences run to max_tokens (or the
	// context length), which keeps benchmark output lengths exact.
	MaxNaturalTokens int
	// Script, when set, answers the prompts its rules match with their
	// exact reply text, then EOS (--mocker-script; see Script).
	Script *Script

	ContextLength int // max prompt+output tokens (default 32768, clamped to the KV capacity)
	BlockSize     int // --block-size (default 16)
	// KVCapacityTokens is the KV cache size (--kv-capacity-tokens, default
	// 262144), rounded down to whole blocks. NumBlocks, if set, wins.
	KVCapacityTokens int
	NumBlocks        int
	// KVBytesPerToken is the size of one token's K/V on the simulated model
	// (--kv-bytes-per-token, default 114688); disaggregation moves this many
	// real bytes per token.
	KVBytesPerToken int

	MaxNumSeqs            int // --max-num-seqs (default 256)
	MaxNumBatchedTokens   int // --max-num-batched-tokens (default 8192)
	DisableChunkedPrefill bool
	DisablePrefixCaching  bool
	// MaxWaiting bounds queued requests; beyond it Generate returns
	// engine.ErrOverloaded. Zero is unbounded.
	MaxWaiting int

	// Timing is the step-time model; the zero value selects DynamoTiming.
	Timing TimingModel
	// Speedup divides every simulated time (--speedup; default 1).
	Speedup float64
	// Instant makes every step take zero time (--instant), for measuring
	// the serving stack's own overhead.
	Instant bool
	// Clock drives time; nil is the wall clock. Tests use a VirtualClock
	// for exact, non-flaky timings.
	Clock Clock

	KVEvents KVEventsConfig

	// Tiers puts simulated host-memory (G2) and disk (G3) tiers below the
	// KV pool: evicted blocks go there and a later prompt onboards them at
	// the links' simulated speed instead of recomputing them.
	Tiers TierConfig

	// StepObserver, if set, receives each step's shape and its duration on
	// Clock (wall time divided by Speedup on the wall clock), on the
	// scheduler goroutine.
	StepObserver engine.StepObserver

	// EngineLabel is the "engine" label of the vllm: metrics (vLLM's engine
	// index; default "0"). Give in-process workers distinct values.
	EngineLabel string
	Logger      *slog.Logger
}

// DefaultConfig returns the flag defaults: events on at vLLM's default
// endpoint, Dynamo's timing.
func DefaultConfig() Config {
	return Config{
		Model:               "mocker",
		ContextLength:       DefaultContextLength,
		BlockSize:           DefaultBlockSize,
		KVCapacityTokens:    DefaultKVCapacityTokens,
		KVBytesPerToken:     DefaultKVBytesPerToken,
		MaxNumSeqs:          DefaultMaxNumSeqs,
		MaxNumBatchedTokens: DefaultMaxNumBatchedTokens,
		Timing:              DynamoTiming(),
		Speedup:             1,
		KVEvents: KVEventsConfig{
			Enabled:      true,
			Format:       kvevents.FormatMap,
			Endpoint:     kvevents.DefaultEndpoint,
			BufferSteps:  kvevents.DefaultBufferSteps,
			HWM:          kvevents.DefaultHWM,
			MaxQueueSize: kvevents.DefaultMaxQueueSize,
			HashSeed:     kvevents.DefaultNoneHashSeed,
		},
		EngineLabel: DefaultEngineLabel,
	}
}

// withDefaults fills zero fields and validates.
func (c Config) withDefaults() (Config, error) {
	if c.Model == "" {
		c.Model = "mocker"
	}
	if c.BlockSize == 0 {
		c.BlockSize = DefaultBlockSize
	}
	if c.KVCapacityTokens == 0 && c.NumBlocks == 0 {
		c.KVCapacityTokens = DefaultKVCapacityTokens
	}
	if c.NumBlocks == 0 {
		c.NumBlocks = c.KVCapacityTokens / c.BlockSize
	}
	if c.ContextLength == 0 {
		c.ContextLength = DefaultContextLength
	}
	c.ContextLength = min(c.ContextLength, c.NumBlocks*c.BlockSize)
	if c.KVBytesPerToken == 0 {
		c.KVBytesPerToken = DefaultKVBytesPerToken
	}
	if c.MaxNumSeqs == 0 {
		c.MaxNumSeqs = DefaultMaxNumSeqs
	}
	if c.MaxNumBatchedTokens == 0 {
		c.MaxNumBatchedTokens = DefaultMaxNumBatchedTokens
	}
	if c.Timing == (TimingModel{}) {
		c.Timing = DynamoTiming()
	}
	if c.Speedup == 0 {
		c.Speedup = 1
	}
	if c.EngineLabel == "" {
		c.EngineLabel = DefaultEngineLabel
	}
	if c.Tiers.HostBandwidth == 0 {
		c.Tiers.HostBandwidth = DefaultHostBandwidth
	}
	if c.Tiers.DiskBandwidth == 0 {
		c.Tiers.DiskBandwidth = DefaultDiskBandwidth
	}
	if c.Tiers.HostLatency == 0 {
		c.Tiers.HostLatency = DefaultHostLatency
	}
	if c.Tiers.DiskLatency == 0 {
		c.Tiers.DiskLatency = DefaultDiskLatency
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = wallClock{}
	}
	switch {
	case c.BlockSize < 1:
		return c, fmt.Errorf("mocker: block size %d must be positive", c.BlockSize)
	case c.NumBlocks < 1:
		return c, fmt.Errorf("mocker: KV capacity %d tokens is less than one block of %d", c.KVCapacityTokens, c.BlockSize)
	case c.MaxNumSeqs < 1 || c.MaxNumBatchedTokens < 1:
		return c, fmt.Errorf("mocker: max-num-seqs %d and max-num-batched-tokens %d must be positive", c.MaxNumSeqs, c.MaxNumBatchedTokens)
	case c.Tiers.HostBytes < 0 || c.Tiers.DiskBytes < 0 || c.Tiers.HostBandwidth < 0 || c.Tiers.DiskBandwidth < 0 ||
		c.Tiers.HostLatency < 0 || c.Tiers.DiskLatency < 0:
		return c, fmt.Errorf("mocker: KV offload sizes, bandwidths and latencies must not be negative")
	case c.Tiers.Shared != nil && c.Tiers.DiskBytes == 0:
		return c, fmt.Errorf("mocker: a shared disk tier needs a disk size (--kv-offload-disk-bytes)")
	case c.Tiers.SharedHost != nil && c.Tiers.HostBytes == 0:
		return c, fmt.Errorf("mocker: a shared host tier needs a host size (--kv-offload-host-bytes)")
	case c.Speedup < 0:
		return c, fmt.Errorf("mocker: speedup %v must be positive", c.Speedup)
	case c.DisableChunkedPrefill && c.MaxNumBatchedTokens < c.ContextLength:
		// Without chunking a prompt must fit one step's budget.
		c.ContextLength = c.MaxNumBatchedTokens
	}
	return c, nil
}

// stepDuration converts milliseconds of model time into wall time.
func (c *Config) stepDuration(ms float64) time.Duration {
	if c.Instant || ms <= 0 {
		return 0
	}
	return time.Duration(ms / c.Speedup * float64(time.Millisecond))
}
