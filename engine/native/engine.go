package native

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/native/kernels"
	"github.com/tandemllm/tandem/engine/native/model"
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
	_ engine.MemoryReporter    = (*Engine)(nil)
)

// Options tune an Engine. The zero value is usable.
type Options struct {
	// Model is the id reported in Info (default "native").
	Model string
	// Threads is the number of compute threads (0: GOMAXPROCS).
	Threads int
	// BlockSize is the KV block size in tokens (default 16).
	BlockSize int
	// KVBytes is the KV cache's memory, always at least one full context
	// (0: one full context or 256 MiB, whichever is larger, where half the
	// machine's available memory split between Workers has room for it,
	// else what fits, the context shortened to it: planKV).
	KVBytes int64
	// Workers is how many engines of this process share the machine's
	// memory, for the default KV size (0: 1).
	Workers int
	// KVType is the KV cache's element type (default model.KVF32;
	// model.KVF16 halves the cache's memory and decode's attention reads,
	// as llama.cpp's default F16 cache does). KV transfer and export carry
	// fp32 either way.
	KVType model.KVType
	// MaxSeqs bounds the sequences decoded together (default 16).
	MaxSeqs int
	// MaxBatchTokens bounds the tokens of one forward step (default 512).
	// The scheduler also shrinks steps so one takes about StepTarget.
	MaxBatchTokens int
	// StepTarget is the wall time one step aims at, which bounds how late a
	// cancellation is noticed (default 40 ms).
	StepTarget time.Duration
	// MaxQueue bounds requests waiting for admission (default 1024); beyond
	// it Generate returns engine.ErrOverloaded.
	MaxQueue int
	// Vocab is the vocabulary as token byte strings, for requests with a
	// Constraint (structured outputs); nil: such requests are refused.
	Vocab *structured.Vocab
	// ContextLength caps the model's context (0: the model's).
	ContextLength int
	// EOS overrides the end-of-sequence tokens (nil: the model's).
	EOS []engine.Token
	// Sink receives the KV cache's block events (the router's feed).
	Sink kvcache.EventSink
	// Hasher selects the block hash (nil: kvcache's default XXH3 chain).
	Hasher kvcache.Hasher
	// KVEvents publishes the cache's events over ZMQ exactly as the mocker
	// (and vLLM) does; when enabled it replaces Sink and Hasher.
	KVEvents kvevents.EngineConfig
	// DisablePrefixCaching recomputes every prompt.
	DisablePrefixCaching bool
	// KVOffloadHostBytes and KVOffloadDiskBytes size the KV tiers below
	// the pool (kvcache G2 and G3): evicted blocks are copied there and
	// copied back on a prefix hit instead of being recomputed. The disk
	// tier writes its files under a fresh directory inside KVOffloadDiskDir
	// (default: the system's temporary directory), removed at Close.
	KVOffloadHostBytes, KVOffloadDiskBytes int64
	KVOffloadDiskDir                       string
	// KVOffloadDiskShared makes KVOffloadDiskDir itself the disk tier,
	// shared by the workers of a host: each writes its blocks there and
	// onboards the others' (a prefix computed on one worker is copied by
	// another, not recomputed); each removes only its own files at Close.
	KVOffloadDiskShared bool
}

func (o *Options) defaults() {
	if o.Model == "" {
		o.Model = "native"
	}
	if o.BlockSize <= 0 {
		o.BlockSize = 16
	}
	if o.MaxSeqs <= 0 {
		o.MaxSeqs = 16
	}
	if o.MaxBatchTokens <= 0 {
		o.MaxBatchTokens = 512
	}
	if o.StepTarget <= 0 {
		o.StepTarget = 40 * time.Millisecond
	}
	if o.MaxQueue <= 0 {
		o.MaxQueue = 1024
	}
}

// Engine runs a model on the CPU with continuous batching over a paged,
// prefix-cached KV store. One scheduler goroutine owns the model state, the
// KV cache and the sequences; Generate, ExportKV and ImportKV talk to it
// through channels.
type Engine struct {
	m        *model.Model
	opts     Options
	info     engine.Info
	pool     *kernels.Pool
	kv       *model.KVStore
	cache    *kvcache.Cache
	tiers    *tierStore             // nil without KV offload tiers
	onboards []kvcache.Onboard      // scheduler scratch
	events   *kvevents.EngineEvents // nil with KV events off
	fp       [32]byte
	reqs     chan *seq
	cmds     chan func()
	closed   chan struct{}
	done     chan struct{}
	closeMu  sync.Mutex
	isClosed bool
	seeds    uint64 // scheduler-only: fallback sampler seeds
	// prefillRate (float64 bits, tokens per second of recent steps of at
	// least minRateTokens) and running (sequences in the scheduler that
	// are decoding) are written by the scheduler and read by a
	// disaggregation decider on other goroutines.
	prefillRate atomic.Uint64
	running     atomic.Int64 // of them decoding (past their prompt)
	kvSizedBy   string       // how the KV pool's size was chosen (planKV)
}

// minRateTokens: steps with fewer tokens are mostly decodes, bound by
// latency rather than compute, and would make prefill look slow.
const minRateTokens = 64

// New builds an engine over a loaded model. The engine owns m afterwards.
func New(m *model.Model, opts Options) (*Engine, error) {
	opts.defaults()
	c := &m.Config
	ctxLen := c.SeqLen
	if opts.ContextLength > 0 && opts.ContextLength < ctxLen {
		ctxLen = opts.ContextLength
	}
	blockBytes := int64(opts.BlockSize) * int64(c.KVDim()) * int64(c.Layers) * 2 * int64(opts.KVType.Bytes())
	plan := planKV(opts.KVBytes, ctxLen, opts.BlockSize, blockBytes, opts.Workers, m.MappedWeightBytes(), readMachineMemory())
	blocks := plan.blocks
	if plan.ctxLen < ctxLen {
		slog.Warn("native: the machine's memory leaves a shorter context than the model's; pass --kv-cache-bytes to choose",
			"model", opts.Model, "context", plan.ctxLen, "model_context", ctxLen, "sized_by", plan.sizedBy)
	}
	ctxLen = plan.ctxLen
	kv, err := model.NewKVStoreOf(c, opts.BlockSize, blocks, opts.KVType)
	if err != nil {
		return nil, err
	}
	slog.Info("native: KV cache", "model", opts.Model, "bytes", int64(blocks)*blockBytes, "tokens", blocks*opts.BlockSize,
		"dtype", opts.KVType.String(), "context", ctxLen, "sized_by", plan.sizedBy)
	var events *kvevents.EngineEvents
	if opts.KVEvents.Enabled && !opts.DisablePrefixCaching {
		if events, err = kvevents.NewEngineEvents(context.Background(), opts.KVEvents, opts.BlockSize, nil); err != nil {
			return nil, fmt.Errorf("native: %w", err)
		}
		opts.Sink, opts.Hasher = events, events.Hasher()
	}
	ccfg := kvcache.Config{NumBlocks: blocks, BlockSize: opts.BlockSize, Hasher: opts.Hasher,
		Sink: opts.Sink, DisablePrefixCaching: opts.DisablePrefixCaching}
	var tiers *tierStore
	if opts.KVOffloadHostBytes > 0 || opts.KVOffloadDiskBytes > 0 {
		dir := ""
		if opts.KVOffloadDiskBytes > 0 {
			dir = opts.KVOffloadDiskDir
			if dir == "" {
				dir = os.TempDir()
			}
		}
		if tiers, err = newTierStore(kv, dir, opts.KVOffloadDiskShared && dir != "", slog.Default()); err != nil {
			if events != nil {
				_ = events.Close()
			}
			return nil, err
		}
		// A disk block costs its header too; host copies are the payload.
		ccfg.Tiers = kvcache.TierConfig{BlockBytes: int64(kv.RawBlockBytes() + tierHeaderSize),
			HostBytes: opts.KVOffloadHostBytes, DiskBytes: opts.KVOffloadDiskBytes, Store: tiers}
		if tiers.shared {
			ccfg.Tiers.Shared = tiers
		}
	}
	cache, err := kvcache.New(ccfg)
	if err != nil {
		if events != nil {
			_ = events.Close()
		}
		if tiers != nil {
			tiers.close()
		}
		return nil, err
	}
	eos := opts.EOS
	if eos == nil {
		eos = defaultEOS(m)
	}
	e := &Engine{
		m: m, opts: opts, pool: kernels.NewPool(opts.Threads), kv: kv, cache: cache, events: events, tiers: tiers,
		fp:        Fingerprint(m),
		kvSizedBy: plan.sizedBy,
		reqs:      make(chan *seq, opts.MaxQueue),
		cmds:      make(chan func()),
		closed:    make(chan struct{}),
		done:      make(chan struct{}),
		seeds:     uint64(time.Now().UnixNano()),
	}
	e.info = engine.Info{Kind: "native", Model: opts.Model, BlockSize: opts.BlockSize, ContextLength: ctxLen,
		KVCapacityTokens: blocks * opts.BlockSize, EOS: eos}
	addUser(m, 1)
	go e.loop()
	return e, nil
}

func defaultEOS(m *model.Model) []engine.Token {
	if m.EOS != nil {
		return append([]engine.Token(nil), m.EOS...)
	}
	return []engine.Token{2} // llama2.c / SentencePiece convention
}

// Info implements engine.Engine.
func (e *Engine) Info() engine.Info {
	info := e.info
	info.EOS = append([]engine.Token(nil), info.EOS...)
	return info
}

// Model returns the model the engine runs (read-only).
func (e *Engine) Model() *model.Model { return e.m }

// Close stops the scheduler; running sequences end with ErrClosed.
func (e *Engine) Close() error {
	e.closeMu.Lock()
	if e.isClosed {
		e.closeMu.Unlock()
		return nil
	}
	e.isClosed = true
	close(e.closed)
	e.closeMu.Unlock()
	<-e.done
	addUser(e.m, -1)
	e.pool.Close()
	if e.tiers != nil {
		e.tiers.close()
	}
	if e.events != nil {
		return e.events.Close()
	}
	return nil
}

// acquire references s's longest cached prefix, onboarding what the lower
// tiers hold after the pool's part: each block's copy goes back into its
// pool block before anything computes past it (a copy that cannot be read
// back is dropped and recomputed).
func (e *Engine) acquire(s *seq) int {
	if e.tiers == nil {
		return e.cache.Acquire(&s.kv, s.tokens[:len(s.tokens)-1])
	}
	n, ob := e.cache.AcquireTiers(&s.kv, s.tokens[:len(s.tokens)-1], e.onboards, func(o kvcache.Onboard) error {
		data, err := e.tiers.load(o.From, o.Hash)
		if err != nil {
			return err
		}
		return e.kv.CopyBlockIn(data, int(o.Block))
	})
	e.onboards = ob
	return n
}

// KVSharedTier names the disk tier this engine shares with the other
// workers of its host (--kv-offload-disk-shared: the directory and the
// host), "" when it shares none: the router applies one worker's disk
// events to every worker of the same name, since each can read the
// others' files.
func (e *Engine) KVSharedTier() string {
	if e.tiers == nil || !e.tiers.shared || e.tiers.dir == "" {
		return ""
	}
	host, _ := os.Hostname()
	dir, err := filepath.Abs(e.tiers.dir)
	if err != nil {
		dir = e.tiers.dir
	}
	return "native:" + host + ":" + dir
}

// TierStats reports the KV offload tiers' counters (zero without tiers).
func (e *Engine) TierStats(ctx context.Context) (kvcache.TierStats, error) {
	var st kvcache.TierStats
	err := e.do(ctx, func() { st = e.cache.TierStats() })
	return st, err
}

// KVEventsTokenIDs reports whether the engine's KV events carry token ids
// (and so its prompts).
func (e *Engine) KVEventsTokenIDs() bool { return e.events != nil && e.events.TokenIDs() }

// KVEventsEndpoint returns the bound ZMQ PUB address ("" with events off).
func (e *Engine) KVEventsEndpoint() string {
	if e.events == nil {
		return ""
	}
	return e.events.Endpoint()
}

// KVEventsReplayEndpoint returns the bound replay address ("" if none).
func (e *Engine) KVEventsReplayEndpoint() string {
	if e.events == nil {
		return ""
	}
	return e.events.ReplayEndpoint()
}

// KVEventsReplayToken is what a replay request must carry for history
// (nil: none needed).
func (e *Engine) KVEventsReplayToken() []byte {
	if e.events == nil {
		return nil
	}
	return e.events.ReplayToken()
}

// seq is one request in flight; only the scheduler touches it after
// Generate hands it over.
type seq struct {
	req       *engine.Request
	ctx       context.Context
	pipe      *engine.Pipe
	tokens    []int32 // prompt, then generated tokens
	promptLen int
	maxLen    int // tokens may grow to this length
	kv        kvcache.Seq
	computed  int // leading tokens whose K/V is in the cache
	admitted  bool
	cached    int
	generated int
	sampler   *sampler
	logits    []float32
	rawLogits []float32 // logprobs: the logits before any mask
	stop      map[int32]bool
	eos       map[int32]bool
	started   bool // first Delta sent
	matcher   *structured.Matcher
}

// Generate implements engine.Generator.
func (e *Engine) Generate(ctx context.Context, req *engine.Request) (engine.Stream, error) {
	if len(req.Prompt) == 0 {
		return nil, errors.New("native: empty prompt")
	}
	maxNew, err := engine.CheckRequest(req, e.info, e.m.Config.Vocab)
	if err != nil {
		return nil, fmt.Errorf("native: %w", err)
	}
	maxLen := len(req.Prompt) + maxNew
	s := &seq{
		req: req, ctx: ctx, pipe: engine.NewPipe(ctx),
		tokens:    append(make([]int32, 0, maxLen), req.Prompt...),
		promptLen: len(req.Prompt), maxLen: maxLen,
		stop: map[int32]bool{}, eos: map[int32]bool{},
	}
	for _, t := range req.StopTokens {
		s.stop[t] = true
	}
	if req.Constraint != nil {
		if s.matcher, err = structured.ForRequest(req.Constraint, e.opts.Vocab); err != nil {
			return nil, fmt.Errorf("native: %w", err)
		}
	}
	if !req.IgnoreEOS {
		for _, t := range e.info.EOS {
			s.eos[t] = true
		}
	}
	select {
	case <-e.closed:
		return nil, engine.ErrClosed
	default:
	}
	select {
	case e.reqs <- s:
		return s.pipe, nil
	case <-e.closed:
		return nil, engine.ErrClosed
	default:
		return nil, engine.ErrOverloaded
	}
}

// do runs f on the scheduler goroutine between steps.
func (e *Engine) do(ctx context.Context, f func()) error {
	ran := make(chan struct{})
	select {
	case e.cmds <- func() { f(); close(ran) }:
	case <-e.closed:
		return engine.ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	<-ran
	return nil
}

// stepCtx lets a forward step stop early once every sequence in it has
// been cancelled, without a goroutine per step.
type stepCtx struct {
	context.Context
	seqs []*seq
}

func (c *stepCtx) Err() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	for _, s := range c.seqs {
		if s.ctx.Err() == nil {
			return nil
		}
	}
	return context.Canceled
}

func (e *Engine) loop() {
	defer close(e.done)
	var waiting, running []*seq
	st := &model.State{}
	base, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-e.closed
		cancel()
	}()
	rate := 0.0 // tokens per second of recent steps
	var batch []model.Seq
	var inBatch []*seq
	for {
		// What the last step (or command) did to the cache goes out as one
		// batch, before the loop may block.
		if e.events != nil {
			e.events.EndStep(float64(time.Now().UnixNano()) / 1e9)
		}
		// Block only when there is nothing to compute.
		if len(waiting) == 0 && len(running) == 0 {
			select {
			case s := <-e.reqs:
				waiting = append(waiting, s)
			case f := <-e.cmds:
				f()
				continue
			case <-e.closed:
				return
			}
		}
	drain:
		for {
			select {
			case s := <-e.reqs:
				waiting = append(waiting, s)
			case f := <-e.cmds:
				f()
			case <-e.closed:
				for _, s := range append(waiting, running...) {
					e.cache.Free(&s.kv)
					s.pipe.Fail(engine.ErrClosed)
				}
				return
			default:
				break drain
			}
		}
		// Cancelled sequences leave before any work is spent on them.
		keep := running[:0]
		for _, s := range running {
			if s.pipe.Done() {
				e.finish(s, engine.FinishCancelled)
				continue
			}
			keep = append(keep, s)
		}
		running = keep
		keepW := waiting[:0]
		for _, s := range waiting {
			if s.pipe.Done() {
				e.finish(s, engine.FinishCancelled)
				continue
			}
			keepW = append(keepW, s)
		}
		waiting = keepW
		for len(waiting) > 0 && len(running) < e.opts.MaxSeqs {
			s := waiting[0]
			waiting = waiting[1:]
			if !s.admitted {
				s.admitted = true
				s.sampler = newSampler(s.req.Sampling, e.nextSeed())
				s.logits = make([]float32, e.m.Config.Vocab)
			}
			// Keep at least the last token to compute: it yields the logits.
			s.computed = e.acquire(s)
			if !s.started {
				s.cached = s.computed
			}
			running = append(running, s)
		}
		if len(running) == 0 {
			continue
		}
		// Build the step: decodes first (they are latency-bound), then
		// prefill chunks in admission order within the token budget.
		budget := e.opts.MaxBatchTokens
		if rate > 0 {
			budget = min(budget, max(16, int(rate*e.opts.StepTarget.Seconds())))
		}
		batch, inBatch = batch[:0], inBatch[:0]
		for pass := 0; pass < 2; pass++ {
			for _, s := range running {
				if budget <= 0 {
					break
				}
				left := len(s.tokens) - s.computed
				if (pass == 0) != (left == 1) {
					continue
				}
				n := min(left, budget)
				if err := e.cache.Allocate(&s.kv, s.computed+n); err != nil {
					continue // out of blocks: waits for others to finish
				}
				ms := model.Seq{Tokens: s.tokens[s.computed : s.computed+n], Pos: s.computed, Blocks: s.kv.Blocks()}
				if s.computed+n == len(s.tokens) {
					ms.Logits = s.logits
				}
				batch = append(batch, ms)
				inBatch = append(inBatch, s)
				budget -= n
			}
		}
		if len(batch) == 0 {
			// No sequence could grow: preempt the youngest (it recomputes
			// from its cached prefix later), or fail a lone sequence that
			// is larger than the whole cache.
			v := running[len(running)-1]
			running = running[:len(running)-1]
			e.cache.Free(&v.kv)
			if len(running) > 0 {
				v.computed = 0
				waiting = append([]*seq{v}, waiting...)
			} else {
				v.pipe.Fail(fmt.Errorf("native: KV cache (%d tokens) too small for this sequence", e.info.KVCapacityTokens))
			}
			continue
		}
		decoding := 0
		for _, s := range running {
			if s.started {
				decoding++
			}
		}
		e.running.Store(int64(decoding))
		t0 := time.Now()
		err := e.m.Forward(&stepCtx{Context: base, seqs: inBatch}, e.pool, st, e.kv, batch)
		if err != nil {
			if base.Err() != nil {
				continue // closing
			}
			if errors.Is(err, context.Canceled) {
				continue // every sequence of the step was cancelled
			}
			for _, s := range inBatch {
				e.cache.Free(&s.kv)
				running = remove(running, s)
				s.pipe.Fail(fmt.Errorf("native: forward: %w", err))
			}
			continue
		}
		n := 0
		for _, b := range batch {
			n += len(b.Tokens)
		}
		if dt := time.Since(t0).Seconds(); dt > 0 {
			r := float64(n) / dt
			if rate == 0 {
				rate = r
			} else {
				rate = 0.7*rate + 0.3*r
			}
			if n >= minRateTokens {
				pr := math.Float64frombits(e.prefillRate.Load())
				if pr > 0 {
					r = 0.7*pr + 0.3*r
				}
				e.prefillRate.Store(math.Float64bits(r))
			}
		}
		for i, s := range inBatch {
			s.computed += len(batch[i].Tokens)
			e.cache.Commit(&s.kv, s.tokens[:s.computed])
			if s.computed < len(s.tokens) {
				continue
			}
			if reason, done := e.emit(s); done {
				e.finish(s, reason)
				running = remove(running, s)
			}
		}
	}
}

func (e *Engine) nextSeed() uint64 {
	e.seeds = e.seeds*6364136223846793005 + 1442695040888963407
	return e.seeds
}

// emit samples the next token of s and sends it; it reports whether the
// sequence is finished.
func (e *Engine) emit(s *seq) (engine.FinishReason, bool) {
	var lpLogits []float32
	if s.req.Logprobs {
		lpLogits = s.logits // the sampler reads logits, never writes them
		if s.generated < s.req.MinTokens {
			// The raw distribution, before the min_tokens mask below.
			s.rawLogits = append(s.rawLogits[:0], s.logits...)
			lpLogits = s.rawLogits
		}
	}
	if s.generated < s.req.MinTokens && (s.matcher == nil || !s.matcher.Terminated()) {
		for t := range s.eos {
			s.logits[t] = float32(math.Inf(-1))
		}
		for t := range s.stop {
			if int(t) < len(s.logits) && t >= 0 {
				s.logits[t] = float32(math.Inf(-1))
			}
		}
	}
	var tok int32
	if s.matcher != nil {
		// Logprobs read the masked logits: the mask is written into them.
		t, err := sampleConstrained(s.sampler, s.matcher, s.logits, lpLogits != nil)
		if err == nil {
			err = s.matcher.Accept(t)
		}
		if err != nil {
			return e.constraintFailed(s, err)
		}
		tok = t
	} else {
		tok = s.sampler.sample(s.logits)
	}
	s.tokens = append(s.tokens, tok)
	s.generated++
	d := engine.Delta{Tokens: []engine.Token{tok}}
	if lpLogits != nil {
		v, top := logprobsOf(lpLogits, tok, s.req.TopLogprobs, make([]engine.TopLogprob, 0, s.req.TopLogprobs))
		d.Logprobs = []engine.TokenLogprob{{Token: tok, Logprob: v, Top: top}}
	}
	if !s.started {
		s.started = true
		d.PromptTokens, d.CachedTokens = s.promptLen, s.cached
	}
	switch {
	case s.eos[tok] || s.stop[tok] || (s.matcher != nil && s.matcher.Done()):
		d.Finish = engine.FinishStop
	case len(s.tokens) >= s.maxLen:
		d.Finish = engine.FinishLength
	}
	if !s.pipe.Send(d) {
		return engine.FinishCancelled, true
	}
	return d.Finish, d.Finish != engine.FinishNone
}

// sampleConstrained picks the next token of a constrained sequence (the
// matcher is not advanced). With inPlace, or a top-k/top-p cut, the mask
// is written into logits (-Inf for every disallowed id) before sampling;
// otherwise the sampler visits the allowed ids alone and logits are left
// as they are.
func sampleConstrained(sp *sampler, m *structured.Matcher, logits []float32, inPlace bool) (int32, error) {
	if inPlace || sp.cuts(len(logits)) {
		if err := m.ApplyMask(logits); err != nil {
			return 0, err
		}
		return sp.sample(logits), nil
	}
	mask, err := m.Mask()
	if err != nil {
		return 0, err
	}
	tok, ok := sp.sampleMasked(logits, mask)
	if !ok {
		return 0, fmt.Errorf("%w: no allowed token has a logit", structured.ErrRejected)
	}
	return tok, nil
}

// constraintFailed ends a constrained sequence whose grammar can go no
// further (its state budget spent): logged, and ended as a stop so the
// output so far is returned rather than unconstrained text.
func (e *Engine) constraintFailed(s *seq, err error) (engine.FinishReason, bool) {
	slog.Warn("native: structured output ended early", "request", s.req.ID, "kind", s.req.Constraint.Kind, "generated", s.generated, "can_end", s.matcher.CanEnd(), "err", err)
	d := engine.Delta{Finish: engine.FinishStop}
	if !s.started {
		s.started = true
		d.PromptTokens, d.CachedTokens = s.promptLen, s.cached
	}
	if !s.pipe.Send(d) {
		return engine.FinishCancelled, true
	}
	return engine.FinishStop, true
}

func (e *Engine) finish(s *seq, reason engine.FinishReason) {
	e.cache.Free(&s.kv)
	if reason == engine.FinishCancelled {
		d := engine.Delta{Finish: engine.FinishCancelled}
		if !s.started {
			d.PromptTokens, d.CachedTokens = s.promptLen, s.cached
		}
		s.pipe.Send(d)
	}
}

func remove(list []*seq, s *seq) []*seq {
	for i, v := range list {
		if v == s {
			return append(list[:i], list[i+1:]...)
		}
	}
	return list
}

// CacheStats reports KV block usage (for metrics).
func (e *Engine) CacheStats(ctx context.Context) (kvcache.Stats, error) {
	var st kvcache.Stats
	err := e.do(ctx, func() { st = e.cache.Stats() })
	return st, err
}
