package mocker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/kvcache"
	"github.com/tandemllm/tandem/planes/kvevents"
	"github.com/tandemllm/tandem/structured"
)

// The engine's optional capabilities (package engine), checked at compile
// time so a renamed method cannot turn one off silently.
var (
	_ engine.Engine            = (*Engine)(nil)
	_ engine.KVEventsPublisher = (*Engine)(nil)
	_ engine.KVEventsReplayer  = (*Engine)(nil)
	_ engine.ReplayTokener     = (*Engine)(nil)
	_ engine.TokenIDPublisher  = (*Engine)(nil)
	_ engine.MetricsCollector  = (*Engine)(nil)
)

// ErrEmptyPrompt is returned by Generate for a request without tokens.
var ErrEmptyPrompt = errors.New("mocker: empty prompt")

// Engine is one simulated vLLM-class worker. Generate, Info, Load, Close and
// the collector are safe for concurrent use; everything else belongs to the
// scheduler goroutine.
type Engine struct {
	cfg   Config
	info  engine.Info
	clock Clock
	stats *stats
	coll  *collector
	pub   *kvevents.EngineEvents // nil with events off

	// Inbox, shared with callers.
	mu       sync.Mutex
	inbox    []*seq
	aborts   []*seq
	commands []func()
	closed   bool
	wake     chan struct{}
	done     chan struct{}

	// Load snapshot, written by the scheduler after every step.
	loadRunning, loadWaiting atomic.Int64
	loadUsedBlocks           atomic.Int64

	// Scheduler state, owned by the scheduler goroutine.
	cache   *kvcache.Cache
	waiting seqQueue
	running []*seq
	items   []stepItem
	steps   uint64
	// Simulated links of the lower KV tiers: when each is next free, so
	// onboards queue behind each other as copies on one link do.
	hostFree, diskFree time.Time
	onboards           []kvcache.Onboard
	onboarding         int // running sequences waiting for an onboard
	tok1               [1]engine.Token
	// validate, when set by tests, checks the cache's invariants after
	// every step and records the first violation.
	validate    bool
	validateErr error
}

// Load is a worker's instantaneous load, for the router and for metrics.
type Load struct {
	Running, Waiting int
	UsedBlocks       int
	TotalBlocks      int
	KVUsage          float64 // UsedBlocks / TotalBlocks
}

// New starts a worker: its KV cache, its event publisher (if enabled) and
// its scheduler goroutine, which sleeps until work arrives. Close releases
// them.
func New(cfg Config) (*Engine, error) {
	e, err := newEngine(cfg)
	if err != nil {
		return nil, err
	}
	go e.run()
	return e, nil
}

// newEngine builds a worker without starting its scheduler (benchmarks
// drive steps directly).
func newEngine(cfg Config) (*Engine, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	e := &Engine{
		cfg:   cfg,
		clock: cfg.Clock,
		stats: newStats(),
		wake:  make(chan struct{}, 1),
		done:  make(chan struct{}),
		info: engine.Info{
			Kind:             "mocker",
			Model:            cfg.Model,
			BlockSize:        cfg.BlockSize,
			ContextLength:    cfg.ContextLength,
			KVCapacityTokens: cfg.NumBlocks * cfg.BlockSize,
			EOS:              append([]engine.Token(nil), cfg.EOS...),
		},
	}
	e.coll = &collector{e: e}
	ccfg := kvcache.Config{
		NumBlocks:            cfg.NumBlocks,
		BlockSize:            cfg.BlockSize,
		DisablePrefixCaching: cfg.DisablePrefixCaching,
	}
	if cfg.Tiers.Enabled() {
		ccfg.Tiers = kvcache.TierConfig{
			BlockBytes: int64(cfg.BlockSize) * int64(cfg.KVBytesPerToken),
			HostBytes:  cfg.Tiers.HostBytes,
			DiskBytes:  cfg.Tiers.DiskBytes,
		}
		if cfg.Tiers.Shared != nil {
			ccfg.Tiers.Shared = cfg.Tiers.Shared
		}
		if cfg.Tiers.SharedHost != nil {
			ccfg.Tiers.SharedHost = cfg.Tiers.SharedHost
		}
	}
	if ev := cfg.KVEvents; ev.Enabled && !cfg.DisablePrefixCaching {
		// Hash like vLLM only when someone can see the hashes; otherwise the
		// fast default keeps idle-heavy scale tests cheap.
		e.pub, err = kvevents.NewEngineEvents(context.Background(), ev, cfg.BlockSize, cfg.Logger)
		if err != nil {
			return nil, fmt.Errorf("mocker: %w", err)
		}
		ccfg.Hasher, ccfg.Sink = e.pub.Hasher(), e.pub
	}
	e.cache, err = kvcache.New(ccfg)
	if err != nil {
		if e.pub != nil {
			e.pub.Close()
		}
		return nil, fmt.Errorf("mocker: %w", err)
	}
	return e, nil
}

// Info implements engine.Engine.
func (e *Engine) Info() engine.Info { return e.info }

// KVBytesPerToken is the simulated model's KV size per token.
func (e *Engine) KVBytesPerToken() int { return e.cfg.KVBytesPerToken }

// Config returns the effective configuration (defaults applied).
func (e *Engine) Config() Config { return e.cfg }

// Collector returns the worker's vllm: Prometheus metrics. Register it
// once; give workers that share a registry distinct EngineLabels.
func (e *Engine) Collector() prometheus.Collector { return e.coll }

// KVEventsTokenIDs reports whether the engine's KV events carry token ids
// (and so its prompts).
func (e *Engine) KVEventsTokenIDs() bool { return e.pub != nil && e.pub.TokenIDs() }

// KVEventsEndpoint returns the bound PUB address ("" with events off), with
// the real port when the configured one was 0.
func (e *Engine) KVEventsEndpoint() string {
	if e.pub == nil {
		return ""
	}
	return e.pub.Endpoint()
}

// KVEventsReplayEndpoint returns the bound replay address ("" if none).
func (e *Engine) KVEventsReplayEndpoint() string {
	if e.pub == nil {
		return ""
	}
	return e.pub.ReplayEndpoint()
}

// KVEventsReplayToken is what a replay request must carry for history
// (nil: none needed).
func (e *Engine) KVEventsReplayToken() []byte {
	if e.pub == nil {
		return nil
	}
	return e.pub.ReplayToken()
}

// PublisherStats reports the event publisher's counters (zero with events
// off).
func (e *Engine) PublisherStats() kvevents.PublisherStats {
	if e.pub == nil {
		return kvevents.PublisherStats{}
	}
	return e.pub.Stats()
}

// Load returns the latest load snapshot.
func (e *Engine) Load() Load {
	used := int(e.loadUsedBlocks.Load())
	return Load{
		Running:     int(e.loadRunning.Load()),
		Waiting:     int(e.loadWaiting.Load()),
		UsedBlocks:  used,
		TotalBlocks: e.cfg.NumBlocks,
		KVUsage:     float64(used) / float64(e.cfg.NumBlocks),
	}
}

// Generate implements engine.Generator. The returned stream's first Delta
// carries PromptTokens and CachedTokens (the prefix-cache hit at first
// admission).
func (e *Engine) Generate(ctx context.Context, req *engine.Request) (engine.Stream, error) {
	if len(req.Prompt) == 0 {
		return nil, ErrEmptyPrompt
	}
	maxTokens, err := engine.CheckRequest(req, e.info, 0)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := newSeq(e, req, maxTokens)
	s.pipe = engine.NewPipe(ctx)
	if req.Constraint != nil {
		if s.matcher, err = structured.ForRequest(req.Constraint, e.cfg.TokenBytes); err != nil {
			return nil, fmt.Errorf("mocker: %w", err)
		}
	}

	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, engine.ErrClosed
	}
	if e.cfg.MaxWaiting > 0 && e.loadWaiting.Load()+int64(len(e.inbox)) >= int64(e.cfg.MaxWaiting) {
		e.mu.Unlock()
		return nil, engine.ErrOverloaded
	}
	// AfterFunc runs its function on a new goroutine, which needs e.mu:
	// even for an already-cancelled ctx the abort lands after the
	// sequence is in the inbox, and the scheduler sees stopAbort set.
	s.stopAbort = context.AfterFunc(ctx, func() { e.abort(s) })
	e.inbox = append(e.inbox, s)
	e.mu.Unlock()
	e.signal()
	return s.pipe, nil
}

func (e *Engine) signal() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// abort asks the scheduler to drop s (its context ended).
func (e *Engine) abort(s *seq) {
	e.mu.Lock()
	e.aborts = append(e.aborts, s)
	e.mu.Unlock()
	e.signal()
}

// do runs f on the scheduler goroutine and waits for it.
func (e *Engine) do(ctx context.Context, f func()) error {
	done := make(chan struct{})
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return engine.ErrClosed
	}
	e.commands = append(e.commands, func() { f(); close(done) })
	e.mu.Unlock()
	e.signal()
	select {
	case <-done:
		return nil
	case <-e.done:
		return engine.ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ResetPrefixCache drops every cached block and publishes AllBlocksCleared,
// like vLLM's /reset_prefix_cache. It fails while requests hold blocks.
func (e *Engine) ResetPrefixCache(ctx context.Context) error {
	var err error
	if derr := e.do(ctx, func() {
		err = e.cache.Reset()
		e.flushEvents()
	}); derr != nil {
		return derr
	}
	return err
}

// CacheStats returns the KV cache's block counts, read on the scheduler
// goroutine.
func (e *Engine) CacheStats(ctx context.Context) (kvcache.Stats, error) {
	var st kvcache.Stats
	err := e.do(ctx, func() { st = e.cache.Stats() })
	return st, err
}

// Close stops the scheduler, fails every unfinished stream with
// engine.ErrClosed and closes the event publisher.
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		<-e.done
		return nil
	}
	e.closed = true
	e.mu.Unlock()
	e.signal()
	select {
	case <-e.done:
	case <-time.After(10 * time.Second):
		return errors.New("mocker: scheduler did not stop")
	}
	if e.pub != nil {
		return e.pub.Close()
	}
	return nil
}
