package disagg

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/kvtransfer"
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

// Role is a worker's part in disaggregated serving (--role).
type Role string

const (
	Aggregated Role = "aggregated"
	Prefill    Role = "prefill"
	Decode     Role = "decode"
)

// ParseRole parses --role.
func ParseRole(s string) (Role, error) {
	switch r := Role(s); r {
	case Aggregated, Prefill, Decode:
		return r, nil
	case "":
		return Aggregated, nil
	}
	return "", fmt.Errorf("role %q: want aggregated, prefill or decode", s)
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
	FallbackPrefillFailed = "disagg_prefill_failed"
)

// Worker is an engine taking part in disaggregated serving.
type Worker struct {
	ID     string
	Role   Role
	Engine engine.Engine
	// Gen is how requests reach the engine (nil: Engine itself); the KV
	// side always talks to Engine.
	Gen engine.Generator
	// Node is the worker's transfer-plane end; decode workers' nodes
	// must be listening.
	Node *kvtransfer.Node
}

// Config configures an Orchestrator.
type Config struct {
	Mode Mode
	// InterferenceWeight is w in the cost model (default 1).
	InterferenceWeight float64
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

	LocalSeconds           float64 // local cost
	RemoteSeconds          float64 // remote cost (0 when not priced)
	EstTransferSeconds     float64
	MeasuredTransferSecond float64 // after the transfer, 0 if none
	Fallback               string  // the code, when remote failed and local served
}

// Orchestrator owns the prefill workers and wraps decode workers.
type Orchestrator struct {
	cfg       Config
	log       *slog.Logger
	decisions *prometheus.CounterVec
	fallbacks *prometheus.CounterVec
	estErr    prometheus.Histogram

	mu      sync.Mutex
	prefill []*prefillWorker
	rates   map[string]*rate // learned prefill speed of engines without an estimator
}

type prefillWorker struct {
	Worker
	pending float64 // estimated seconds of prefill legs in flight (under mu)
}

// rate is a learned prefill speed: seconds per token.
type rate struct{ perToken float64 }

// New returns an orchestrator; register prefill workers with AddPrefill
// and wrap decode workers with Wrap.
func New(cfg Config) *Orchestrator {
	if cfg.Mode == "" {
		cfg.Mode = Auto
	}
	if cfg.InterferenceWeight == 0 {
		cfg.InterferenceWeight = 1
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	o := &Orchestrator{
		cfg: cfg, log: cfg.Logger, rates: map[string]*rate{},
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
	}
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(o.decisions, o.fallbacks, o.estErr)
	}
	return o
}

// AddPrefill registers a prefill worker. Its engine must implement
// engine.KVPort and its Node need not listen.
func (o *Orchestrator) AddPrefill(w Worker) error {
	if _, ok := w.Engine.(engine.KVPort); !ok || w.Node == nil {
		return fmt.Errorf("disagg: prefill worker %s cannot export KV", w.ID)
	}
	o.mu.Lock()
	o.prefill = append(o.prefill, &prefillWorker{Worker: w})
	o.mu.Unlock()
	return nil
}

// Wrap returns the Generator the router should hold for decode worker w:
// each request is prefilled locally or remotely as the decider chooses.
// A worker that cannot import KV is returned unwrapped.
func (o *Orchestrator) Wrap(w Worker) engine.Generator {
	port, ok := w.Engine.(engine.KVPort)
	if w.Gen == nil {
		w.Gen = w.Engine
	}
	if !ok || w.Node == nil || w.Node.Addr() == "" || o.cfg.Mode == Never {
		return w.Gen
	}
	return &decodeGen{o: o, w: w, port: port}
}

type decodeGen struct {
	o    *Orchestrator
	w    Worker
	port engine.KVPort
}

func (g *decodeGen) Generate(ctx context.Context, req *engine.Request) (engine.Stream, error) {
	d, p := g.o.decide(ctx, g, req.Prompt)
	if d.Choice == ChoiceRemote {
		if code, err := g.o.remote(ctx, g, p, req, &d); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			d.Fallback = code
			g.o.fallbacks.WithLabelValues(code).Inc()
			g.o.log.Warn("remote prefill failed; prefilling locally", "diagnostic_code", code,
				"request_id", req.ID, "decode_worker", g.w.ID, "prefill_worker", d.PrefillWorker, "err", err)
		}
	}
	if g.o.cfg.OnDecision != nil {
		g.o.cfg.OnDecision(d)
	}
	return g.w.Gen.Generate(ctx, req)
}

// estimate returns the seconds engine e needs to prefill n tokens.
func (o *Orchestrator) estimate(id string, e engine.Engine, n int) float64 {
	if n <= 0 {
		return 0
	}
	if pe, ok := e.(engine.PrefillEstimator); ok {
		return pe.EstimatePrefill(n)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if r, ok := o.rates[id]; ok {
		return r.perToken * float64(n)
	}
	// Unknown engine, never measured: a conservative CPU-class guess that
	// the first remote leg corrects.
	return 100e-6 * float64(n)
}

func (o *Orchestrator) learn(id string, e engine.Engine, n int, d time.Duration) {
	if _, ok := e.(engine.PrefillEstimator); ok || n < 16 {
		return
	}
	pt := d.Seconds() / float64(n)
	o.mu.Lock()
	if r, ok := o.rates[id]; ok {
		r.perToken = 0.7*r.perToken + 0.3*pt
	} else {
		o.rates[id] = &rate{perToken: pt}
	}
	o.mu.Unlock()
}

func running(e engine.Engine) int {
	if lr, ok := e.(engine.LoadReporter); ok {
		return lr.RunningDecodes()
	}
	return 0
}

// decide prices local and remote prefill for prompt on decode worker g.
func (o *Orchestrator) decide(ctx context.Context, g *decodeGen, prompt []engine.Token) (d Decision, pick *prefillWorker) {
	d = Decision{DecodeWorker: g.w.ID, PromptTokens: len(prompt), Choice: ChoiceLocal}
	defer func() {
		o.decisions.WithLabelValues(d.Choice, d.Reason).Inc()
		o.log.Debug("disagg decision", "decode_worker", d.DecodeWorker, "prefill_worker", d.PrefillWorker,
			"choice", d.Choice, "reason", d.Reason, "prompt_tokens", d.PromptTokens,
			"local_uncached", d.LocalUncached, "remote_uncached", d.RemoteUncached,
			"missing_blocks", d.MissingBlocks, "transfer_bytes", d.TransferBytes,
			"link_bytes_per_sec", d.LinkBytesPerSec, "running_decodes", d.RunningDecodes,
			"local_s", d.LocalSeconds, "remote_s", d.RemoteSeconds, "est_transfer_s", d.EstTransferSeconds)
	}()
	info := g.w.Engine.Info()
	bs := info.BlockSize
	// The last prompt token is always recomputed (its logits start decode),
	// so only blocks within the first len-1 tokens are worth moving.
	usable := prompt[:max(len(prompt)-1, 0)]
	hit, err := g.port.CachedPrefix(ctx, usable)
	if err != nil {
		d.Reason = ReasonEstimateFailure
		return d, nil
	}
	d.RunningDecodes = running(g.w.Engine)
	interf := 1 + o.cfg.InterferenceWeight*float64(d.RunningDecodes)
	d.LocalUncached = len(prompt) - hit
	d.LocalSeconds = o.estimate(g.w.ID, g.w.Engine, d.LocalUncached) * interf
	if o.cfg.Mode == Never {
		d.Reason = ReasonModeNever
		return d, nil
	}
	full := len(usable) / bs
	d.MissingBlocks = full - hit/bs
	if d.MissingBlocks <= 0 {
		d.Reason = ReasonNothingToMove
		return d, nil
	}
	o.mu.Lock()
	cands := slices.Clone(o.prefill)
	o.mu.Unlock()
	layout := g.port.KVLayout()
	var best *prefillWorker
	bestT, mismatched := 0.0, 0
	for _, p := range cands {
		pp := p.Engine.(engine.KVPort)
		if pp.KVLayout() != layout || p.Engine.Info().BlockSize != bs {
			mismatched++
			continue
		}
		ph, err := pp.CachedPrefix(ctx, usable)
		if err != nil {
			continue
		}
		o.mu.Lock()
		pending := p.pending
		o.mu.Unlock()
		t := pending + o.estimate(p.ID, p.Engine, len(prompt)-ph)
		if best == nil || t < bestT {
			best, bestT, d.RemoteUncached = p, t, len(prompt)-ph
		}
	}
	if best == nil {
		d.Reason = ReasonNoPrefill
		if mismatched > 0 {
			d.Reason = ReasonLayoutMismatch
			if o.cfg.Board != nil {
				o.cfg.Board.Raise(kvtransfer.CodeLayoutMismatch, g.w.ID, health.Warn,
					"no prefill worker shares this decode worker's KV layout; prefilling locally", "layout", layout)
			}
		}
		return d, nil
	}
	d.PrefillWorker = best.ID
	d.TransferBytes = int64(d.MissingBlocks) * int64(g.port.KVBlockBytes())
	bps, err := best.Node.Throughput(ctx, kvtransfer.Peer{ID: g.w.ID, Addr: g.w.Node.Addr()})
	if err != nil {
		d.Reason = ReasonLinkUnmeasured
		return d, nil
	}
	d.LinkBytesPerSec = bps
	d.EstTransferSeconds = float64(d.TransferBytes) / bps
	tail := len(prompt) - full*bs
	d.RemoteSeconds = bestT + d.EstTransferSeconds + o.estimate(g.w.ID, g.w.Engine, tail)*interf
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

// remote runs the prefill leg on p and moves the blocks decode worker g
// lacks. On failure it returns the fallback code.
func (o *Orchestrator) remote(ctx context.Context, g *decodeGen, p *prefillWorker, req *engine.Request, d *Decision) (string, error) {
	cost := o.estimate(p.ID, p.Engine, d.RemoteUncached)
	o.mu.Lock()
	p.pending += cost
	o.mu.Unlock()
	start := time.Now()
	err := prefillOnly(ctx, p.Engine, req)
	o.mu.Lock()
	p.pending -= cost
	o.mu.Unlock()
	if err != nil {
		return FallbackPrefillFailed, fmt.Errorf("prefill leg on %s: %w", p.ID, err)
	}
	o.learn(p.ID, p.Engine, d.RemoteUncached, time.Since(start))
	bs := g.w.Engine.Info().BlockSize
	full := (len(req.Prompt) - 1) / bs
	from := full - d.MissingBlocks
	st, err := p.Node.Send(ctx, kvtransfer.Peer{ID: g.w.ID, Addr: g.w.Node.Addr()}, req.Prompt[:full*bs], from)
	if err != nil {
		code := kvtransfer.CodeOf(err)
		if code == "" {
			code = kvtransfer.CodeFailed
		}
		return code, err
	}
	d.MeasuredTransferSecond = st.Duration.Seconds()
	d.TransferBytes = st.Bytes
	if d.EstTransferSeconds > 0 && st.Bytes > 0 {
		o.estErr.Observe(d.MeasuredTransferSecond / d.EstTransferSeconds)
	}
	return "", nil
}

// prefillOnly computes the prompt's KV on e and leaves it in e's prefix
// cache: one output token, as vLLM's prefill leg (max_tokens = 1).
func prefillOnly(ctx context.Context, e engine.Engine, req *engine.Request) error {
	pr := *req
	pr.ID = req.ID + "-prefill"
	pr.MaxTokens, pr.MinTokens, pr.IgnoreEOS, pr.StopTokens = 1, 0, true, nil
	st, err := e.Generate(ctx, &pr)
	if err != nil {
		return err
	}
	for {
		if _, err := st.Recv(); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
	}
}
