package disagg

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/routed"
	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/planes/kvtransfer"
	"github.com/tandemllm/tandem/tracing"
)

// Mode is --disagg.
type Mode string

const (
	Auto   Mode = "auto"
	Always Mode = "always"
	Never  Mode = "never"
)

// ParseMode parses --disagg.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case Auto, Always, Never:
		return m, nil
	case "":
		return Auto, nil
	}
	return "", fmt.Errorf("disagg mode %q: want auto, always or never", s)
}

// Choice and reason values, the labels of tandem_disagg_decisions_total.
const (
	ChoiceLocal  = "local"
	ChoiceRemote = "remote"

	ReasonModeNever       = "mode_never"
	ReasonModeAlways      = "mode_always"
	ReasonNoPrefill       = "no_prefill_worker"
	ReasonLayoutMismatch  = kvtransfer.CodeLayoutMismatch
	ReasonNothingToMove   = "nothing_to_transfer"
	ReasonRemoteCheaper   = "remote_cheaper"
	ReasonLocalCheaper    = "local_cheaper"
	ReasonLinkUnmeasured  = "link_unmeasured"
	ReasonEstimateFailure = "estimate_failed"
)

// Fallback codes (tandem_disagg_fallbacks_total, log diagnostic_code).
const (
	FallbackPrefillFailed = kvtransfer.CodePrefillFailed
	// FallbackPrefillTimeout: the remote leg outlived Config.LegTimeout (a
	// stuck or overloaded prefill worker); the request stops waiting.
	FallbackPrefillTimeout = "disagg_prefill_timeout"
)

// Config configures an Orchestrator.
type Config struct {
	Mode Mode
	// InterferenceWeight is w in the cost model (default 1).
	InterferenceWeight float64
	// LegTimeout bounds a remote prefill leg, transfer included (default
	// DefaultLegTimeout): past it the request prefills locally rather than
	// wait on a stuck prefill worker.
	LegTimeout time.Duration
	// OnDecision, if set, hears every decision after the request's prefill
	// (with the measured transfer time when there was one). For tests and
	// benchmarks.
	OnDecision func(Decision)
	Board      *health.Board
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// Decision is the decider's reckoning for one request.
type Decision struct {
	DecodeWorker  string
	PrefillWorker string // "" when none was considered
	Choice        string
	Reason        string

	PromptTokens    int
	LocalUncached   int // tokens the decode worker would compute
	RemoteUncached  int // tokens the prefill worker would compute
	MissingBlocks   int // blocks the decode worker lacks
	TransferBytes   int64
	LinkBytesPerSec float64
	RunningDecodes  int

	// PrefillChunks is how many chunks the remote prefill streams its
	// blocks in (1: the transfer starts after the prefill).
	PrefillChunks int

	LocalSeconds       float64 // local cost
	RemoteSeconds      float64 // remote cost (0 when not priced)
	EstTransferSeconds float64
	// MeasuredTransferSecond is the time the transfer kept the link busy
	// (its duration less the time it waited for the prefill to commit
	// blocks); 0 if nothing moved.
	MeasuredTransferSecond float64
	Fallback               string // the code, when remote failed and local served
	// Predicted: the decision rests on the KV router's prediction that
	// the decode worker caches the prompt, without asking the workers.
	Predicted bool
}

// Orchestrator owns the prefill workers and wraps decode workers.
type Orchestrator struct {
	cfg       Config
	log       *slog.Logger
	decisions *prometheus.CounterVec
	fallbacks *prometheus.CounterVec
	estErr    prometheus.Histogram
	nPrefill  prometheus.Gauge

	ctx  context.Context // ends with Close: stops link probes
	stop context.CancelFunc

	mu      sync.Mutex
	prefill []*prefillWorker
	decode  map[string]kvtransfer.Side // the wrapped decode workers, whose links are probed
	rates   map[string]float64         // learned seconds per prefill token, of engines that cannot estimate
	probing map[chan struct{}]struct{}
}

// DefaultLegTimeout is Config.LegTimeout's default: the transfer plane's
// own bound, so a healthy slow transfer is never cut by the leg's.
const DefaultLegTimeout = kvtransfer.DefaultTimeout

// probeTimeout bounds a background link probe.
const probeTimeout = 10 * time.Second

type prefillWorker struct {
	kvtransfer.Side
	// queue is the worker's estimated seconds of prefill legs in flight
	// (under mu). A pointer, so a replaced Side keeps the legs its
	// predecessor started, and they still subtract what they added.
	queue *float64
}

// New returns an orchestrator; register prefill workers with AddPrefill
// and wrap decode workers with Wrap.
func New(cfg Config) *Orchestrator {
	if cfg.Mode == "" {
		cfg.Mode = Auto
	}
	if cfg.InterferenceWeight == 0 {
		cfg.InterferenceWeight = 1
	}
	if cfg.LegTimeout <= 0 {
		cfg.LegTimeout = DefaultLegTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	o := &Orchestrator{
		cfg: cfg, log: cfg.Logger, rates: map[string]float64{}, decode: map[string]kvtransfer.Side{}, probing: map[chan struct{}]struct{}{},
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_disagg_decisions_total",
			Help: "Disaggregation decisions: where the prompt was prefilled and why.",
		}, []string{"choice", "reason"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_disagg_fallbacks_total",
			Help: "Remote prefills that failed and fell back to local prefill, by diagnostic code.",
		}, []string{"code"}),
		estErr: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tandem_disagg_transfer_estimate_ratio",
			Help:    "Measured ÷ estimated KV transfer time of remote prefills.",
			Buckets: []float64{0.5, 0.75, 0.9, 1, 1.1, 1.25, 1.5, 2, 4},
		}),
		nPrefill: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tandem_disagg_prefill_workers",
			Help: "Prefill workers the orchestrator can send prefill legs to.",
		}),
	}
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(o.decisions, o.fallbacks, o.estErr, o.nPrefill)
	}
	o.ctx, o.stop = context.WithCancel(context.Background())
	return o
}

// Mode is the orchestrator's --disagg mode.
func (o *Orchestrator) Mode() Mode { return o.cfg.Mode }

// Close stops the link probes in flight and waits for them.
func (o *Orchestrator) Close() {
	o.stop()
	_ = o.Probed(context.Background())
}

// probeLocked measures the link from prefill worker p to decode worker d
// in the background, so that the first request on the pair is priced on a
// measurement instead of paying for the probe itself.
func (o *Orchestrator) probeLocked(p, d kvtransfer.Side) {
	if o.cfg.Mode == Never || o.ctx.Err() != nil {
		return
	}
	done := make(chan struct{})
	o.probing[done] = struct{}{}
	go func() {
		defer func() {
			o.mu.Lock()
			delete(o.probing, done)
			o.mu.Unlock()
			close(done)
		}()
		ctx, cancel := context.WithTimeout(o.ctx, probeTimeout)
		defer cancel()
		if _, err := p.LinkThroughput(ctx, kvtransfer.Peer{ID: d.ID(), Addr: d.TransferAddr()}); err != nil && o.ctx.Err() == nil {
			o.log.Warn("probing a KV link failed; it is probed again on first use", "src", p.ID(), "dst", d.ID(), "err", err)
		}
	}()
}

// Probed waits until the link probes started so far have ended, or ctx.
func (o *Orchestrator) Probed(ctx context.Context) error {
	o.mu.Lock()
	pending := make([]chan struct{}, 0, len(o.probing))
	for c := range o.probing {
		pending = append(pending, c)
	}
	o.mu.Unlock()
	for _, c := range pending {
		select {
		case <-c:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// AddPrefill registers (or, for a known id, replaces) a prefill worker.
func (o *Orchestrator) AddPrefill(s kvtransfer.Side) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for i, p := range o.prefill {
		if p.ID() == s.ID() {
			o.prefill[i] = &prefillWorker{Side: s, queue: p.queue}
			return
		}
	}
	o.prefill = append(o.prefill, &prefillWorker{Side: s, queue: new(float64)})
	o.nPrefill.Set(float64(len(o.prefill)))
	for _, d := range o.decode {
		o.probeLocked(s, d)
	}
}

// RemovePrefill forgets a prefill worker; legs already running on it
// finish or fall back as usual.
func (o *Orchestrator) RemovePrefill(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.prefill = slices.DeleteFunc(o.prefill, func(p *prefillWorker) bool { return p.ID() == id })
	delete(o.rates, id)
	o.nPrefill.Set(float64(len(o.prefill)))
}

// PrefillWorkers returns the registered prefill workers' ids, sorted.
func (o *Orchestrator) PrefillWorkers() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	ids := make([]string, len(o.prefill))
	for i, p := range o.prefill {
		ids[i] = p.ID()
	}
	slices.Sort(ids)
	return ids
}

// Wrap returns the Generator the router should hold for decode worker s,
// whose requests reach it through gen: each is prefilled locally or
// remotely as the decider chooses. A worker that receives no blocks, or
// mode never, gets gen back unwrapped. Every prefill worker's link to s is
// probed in the background (Probed waits for that).
func (o *Orchestrator) Wrap(s kvtransfer.Side, gen engine.Generator) engine.Generator {
	if s.TransferAddr() == "" || o.cfg.Mode == Never {
		return gen
	}
	o.mu.Lock()
	o.decode[s.ID()] = s
	for _, p := range o.prefill {
		o.probeLocked(p.Side, s)
	}
	o.mu.Unlock()
	return &decodeGen{o: o, side: s, gen: gen}
}

// RemoveDecode forgets a wrapped decode worker (its links are no longer
// probed for new prefill workers).
func (o *Orchestrator) RemoveDecode(id string) {
	o.mu.Lock()
	delete(o.decode, id)
	o.mu.Unlock()
}

type decodeGen struct {
	o    *Orchestrator
	side kvtransfer.Side
	gen  engine.Generator
}

// Generate decides with no prediction from the router.
func (g *decodeGen) Generate(ctx context.Context, req *engine.Request) (engine.Stream, error) {
	return g.GenerateRouted(ctx, routed.Request{Req: req})
}

// GenerateRouted decides local or remote prefill for r, knowing the
// prefix the router predicts the decode worker holds.
func (g *decodeGen) GenerateRouted(ctx context.Context, r routed.Request) (engine.Stream, error) {
	req := r.Req
	sctx, span := startSpan(ctx, tracing.SpanDisagg)
	d, l := g.o.decide(sctx, g.side, req.Prompt, r.PredictedCachedTokens)
	if l != nil {
		if code, err := g.o.remote(sctx, g.side, l, req, &d); err != nil {
			if ctx.Err() != nil {
				endDecision(span, &d)
				return nil, ctx.Err()
			}
			d.Fallback = code
			g.o.fallbacks.WithLabelValues(code).Inc()
			g.o.log.WarnContext(sctx, "remote prefill failed; prefilling locally", "diagnostic_code", code,
				"request_id", req.ID, "decode_worker", g.side.ID(), "prefill_worker", d.PrefillWorker, "err", err)
		}
	}
	endDecision(span, &d)
	if g.o.cfg.OnDecision != nil {
		g.o.cfg.OnDecision(d)
	}
	return routed.Generate(ctx, g.gen, r)
}

// seconds is an engine's own estimate when it has one (est >= 0), else
// the rate learned from its past prefill legs.
func (o *Orchestrator) seconds(id string, est float64, n int) float64 {
	switch {
	case n <= 0:
		return 0
	case est >= 0:
		return est
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if r, ok := o.rates[id]; ok {
		return r * float64(n)
	}
	// Unknown engine, never measured: a conservative CPU-class guess that
	// the first remote leg corrects.
	return 100e-6 * float64(n)
}

func (o *Orchestrator) learn(id string, n int, d time.Duration) {
	if n < 16 || d <= 0 {
		return
	}
	pt := d.Seconds() / float64(n)
	o.mu.Lock()
	if r, ok := o.rates[id]; ok {
		o.rates[id] = 0.7*r + 0.3*pt
	} else {
		o.rates[id] = pt
	}
	o.mu.Unlock()
}

// candidate is a prefill worker priced for one request.
type candidate struct {
	p   *prefillWorker
	a   kvtransfer.Assessment
	err error
}

// assess asks the decode worker and every prefill candidate about the
// prompt at once: across processes each is a round trip, and they are
// independent.
func assess(ctx context.Context, dec kvtransfer.Side, cands []*prefillWorker, prompt []engine.Token, tail int) (kvtransfer.Assessment, error, []candidate) {
	out := make([]candidate, len(cands))
	var wg sync.WaitGroup
	for i, p := range cands {
		out[i].p = p
		wg.Go(func() { out[i].a, out[i].err = p.Assess(ctx, prompt, 0) })
	}
	a, err := dec.Assess(ctx, prompt, tail)
	wg.Wait()
	return a, err, out
}

// remoteCost prices a remote prefill of uncached tokens taking prefill
// seconds, whose transfer takes xfer seconds, streamed in chunks: the
// transfer of chunk k overlaps the prefill of chunk k+1, so the slower of
// the two paces the pipeline and the faster adds only its last chunk.
func remoteCost(prefill, xfer float64, chunks int) float64 {
	if chunks <= 1 {
		return prefill + xfer
	}
	c := float64(chunks)
	return max(prefill+xfer/c, prefill/c+xfer)
}

// leg is a chosen remote prefill.
type leg struct {
	p       *prefillWorker
	seconds float64 // its estimated prefill time
	// estimated: the engine priced itself; otherwise the leg's measured
	// time teaches the orchestrator its rate.
	estimated bool
}

// decide prices local and remote prefill for prompt on decode worker dec.
// It returns the remote leg to run, nil for local prefill.
// predicted is the prefix the router expects dec to hold
// (routed.Request.PredictedCachedTokens).
func (o *Orchestrator) decide(ctx context.Context, dec kvtransfer.Side, prompt []engine.Token, predicted int) (d Decision, l *leg) {
	d = Decision{DecodeWorker: dec.ID(), PromptTokens: len(prompt), Choice: ChoiceLocal}
	defer func() {
		o.decisions.WithLabelValues(d.Choice, d.Reason).Inc()
		o.log.Debug("disagg decision", "decode_worker", d.DecodeWorker, "prefill_worker", d.PrefillWorker,
			"choice", d.Choice, "reason", d.Reason, "prompt_tokens", d.PromptTokens,
			"local_uncached", d.LocalUncached, "remote_uncached", d.RemoteUncached,
			"missing_blocks", d.MissingBlocks, "transfer_bytes", d.TransferBytes,
			"link_bytes_per_sec", d.LinkBytesPerSec, "running_decodes", d.RunningDecodes, "prefill_chunks", d.PrefillChunks,
			"local_s", d.LocalSeconds, "remote_s", d.RemoteSeconds, "est_transfer_s", d.EstTransferSeconds, "predicted", d.Predicted)
	}()
	bs := dec.BlockSize()
	// The last prompt token is always recomputed (its logits start decode),
	// so only blocks within the first len-1 tokens are worth moving.
	full := max(len(prompt)-1, 0) / max(bs, 1)
	if bs <= 0 || full == 0 {
		// Not one whole block to move: no need to ask anyone.
		d.LocalUncached, d.Reason = len(prompt), ReasonNothingToMove
		return d, nil
	}
	if o.cfg.Mode == Auto && predicted >= full*bs {
		// The KV router expects the decode worker to hold every whole
		// block: there is nothing to move, and asking would cost a round
		// trip per worker (a wrong guess costs a local prefill, which is
		// what a cache miss on an aggregated worker costs too).
		d.LocalUncached, d.Reason, d.Predicted = len(prompt)-min(predicted, len(prompt)), ReasonNothingToMove, true
		return d, nil
	}
	tail := len(prompt) - full*bs
	o.mu.Lock()
	var cands []*prefillWorker
	mismatched := 0
	layout := dec.Layout()
	for _, p := range o.prefill {
		if p.Layout() != layout || p.BlockSize() != bs {
			mismatched++
			continue
		}
		cands = append(cands, p)
	}
	o.mu.Unlock()
	da, err, priced := assess(ctx, dec, cands, prompt, tail)
	if err != nil {
		d.Reason = ReasonEstimateFailure
		o.log.Warn("cannot assess the decode worker's cache; prefilling locally", "decode_worker", dec.ID(), "err", err)
		return d, nil
	}
	d.RunningDecodes = da.RunningDecodes
	interf := 1 + o.cfg.InterferenceWeight*float64(d.RunningDecodes)
	d.LocalUncached = len(prompt) - da.CachedTokens
	d.LocalSeconds = o.seconds(dec.ID(), da.UncachedSeconds, d.LocalUncached) * interf
	d.MissingBlocks = full - da.CachedTokens/bs
	if d.MissingBlocks <= 0 {
		d.Reason = ReasonNothingToMove
		return d, nil
	}
	if len(cands) == 0 {
		d.Reason = ReasonNoPrefill
		if mismatched > 0 {
			d.Reason = ReasonLayoutMismatch
			if o.cfg.Board != nil {
				o.cfg.Board.Raise(kvtransfer.CodeLayoutMismatch, dec.ID(), health.Warn,
					"no prefill worker shares this decode worker's KV layout; prefilling locally", "layout", layout)
			}
		}
		return d, nil
	}
	d.TransferBytes = int64(d.MissingBlocks) * int64(dec.BlockBytes())
	peer := kvtransfer.Peer{ID: dec.ID(), Addr: dec.TransferAddr()}
	tailSecs := o.seconds(dec.ID(), da.TailSeconds, tail) * interf
	var best *leg
	unmeasured := 0
	for i := range priced {
		c := &priced[i]
		if c.err != nil {
			continue
		}
		bps, err := c.p.LinkThroughput(ctx, peer)
		if err != nil || bps <= 0 {
			unmeasured++
			continue
		}
		o.mu.Lock()
		pending := *c.p.queue
		o.mu.Unlock()
		uncached := len(prompt) - c.a.CachedTokens
		chunks := 1
		if c.a.ChunkTokens > 0 {
			chunks = (uncached + c.a.ChunkTokens - 1) / c.a.ChunkTokens
		}
		xfer := float64(d.TransferBytes) / bps
		pre := o.seconds(c.p.ID(), c.a.UncachedSeconds, uncached)
		t := pending + remoteCost(pre, xfer, chunks) + tailSecs
		if best == nil || t < d.RemoteSeconds {
			best = &leg{p: c.p, seconds: pre, estimated: c.a.UncachedSeconds >= 0}
			d.PrefillWorker, d.RemoteUncached, d.PrefillChunks = c.p.ID(), uncached, chunks
			d.LinkBytesPerSec, d.EstTransferSeconds, d.RemoteSeconds = bps, xfer, t
		}
	}
	if best == nil {
		d.Reason = ReasonNoPrefill
		if unmeasured > 0 {
			d.Reason = ReasonLinkUnmeasured
		}
		return d, nil
	}
	switch {
	case o.cfg.Mode == Always:
		d.Choice, d.Reason = ChoiceRemote, ReasonModeAlways
	case d.RemoteSeconds < d.LocalSeconds:
		d.Choice, d.Reason = ChoiceRemote, ReasonRemoteCheaper
	default:
		d.Reason = ReasonLocalCheaper
	}
	if d.Choice == ChoiceRemote {
		return d, best
	}
	return d, nil
}

// remote runs the prefill leg on p, which streams the blocks decode
// worker dec lacks. On failure it returns the fallback code.
func (o *Orchestrator) remote(ctx context.Context, dec kvtransfer.Side, l *leg, req *engine.Request, d *Decision) (string, error) {
	p := l.p
	o.mu.Lock()
	*p.queue += l.seconds
	o.mu.Unlock()
	full := (len(req.Prompt) - 1) / dec.BlockSize()
	lctx, cancel := context.WithTimeout(ctx, o.cfg.LegTimeout)
	defer cancel()
	from := full - d.MissingBlocks
	// The token binds the leg to this prompt, this prefill worker and
	// this decode worker: the decode worker refuses blocks without it.
	tok, err := dec.TransferToken(lctx, p.ID(), req.Prompt[:full*dec.BlockSize()], from)
	if err != nil {
		o.mu.Lock()
		*p.queue -= l.seconds
		o.mu.Unlock()
		return kvtransfer.CodeFailed, fmt.Errorf("transfer token from %s: %w", dec.ID(), err)
	}
	push, err := p.PrefillAndSend(lctx, req, kvtransfer.Peer{ID: dec.ID(), Addr: dec.TransferAddr(), Token: tok}, from)
	o.mu.Lock()
	*p.queue -= l.seconds
	o.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil && lctx.Err() != nil {
			return FallbackPrefillTimeout, fmt.Errorf("remote prefill on %s outlived %v: %w", p.ID(), o.cfg.LegTimeout, err)
		}
		code := kvtransfer.CodeOf(err)
		if code == "" {
			code = kvtransfer.CodeFailed
		}
		if r, ok := dec.(kvtransfer.TransferKeyResetter); ok && code == kvtransfer.CodeRejected {
			// The token may be stale (the decode worker restarted with a
			// new key under the same record): fetch the key again.
			r.ResetTransferKey()
		}
		return code, err
	}
	if !l.estimated {
		o.learn(p.ID(), d.RemoteUncached, push.Prefill)
	}
	st := push.Transfer
	d.MeasuredTransferSecond = (st.Duration - st.Waited).Seconds()
	d.TransferBytes = st.Bytes
	if d.EstTransferSeconds > 0 && st.Bytes > 0 {
		o.estErr.Observe(d.MeasuredTransferSecond / d.EstTransferSeconds)
	}
	return "", nil
}
