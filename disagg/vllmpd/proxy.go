package vllmpd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/routed"
)

// Proxy is vLLM's P/D proxy inside Tandem's router: the router picks the
// decode worker (KV-aware, as for any worker), the proxy runs the prefill
// leg on the prefill worker with the fewest legs in flight and hands the
// kv_transfer_params it returns to the decode leg. Workers are Generators
// that speak the protocol through engine.Request.KVTransferParams: an
// upstream vLLM server (engine/upstream), or a Tandem worker wrapped in
// Worker. Forward is the same protocol for callers that hold HTTP bodies.
type Proxy struct {
	always bool
	log    *slog.Logger
	legs   *prometheus.CounterVec

	mu      sync.Mutex
	prefill []*prefillWorker
}

type prefillWorker struct {
	id       string
	gen      engine.Generator
	inFlight int // under mu
}

// Leg outcomes (tandem_vllmpd_prefill_legs_total{result}).
const (
	LegOK       = "ok"
	LegNoParams = "no_params" // the prefill worker returned no kv_transfer_params: the decode worker prefills
	LegFailed   = "failed"    // the leg failed: the decode worker prefills (diagnostic vllmpd_prefill_failed)
	LegNone     = "no_prefill_worker"
	// LegCached: the router predicts the decode worker holds every whole
	// block of the prompt; a leg could only move nothing (auto mode).
	LegCached = "skipped_cached"
)

// ProxyConfig configures a Proxy.
type ProxyConfig struct {
	// Always runs the prefill leg even when the router predicts the
	// decode worker caches the whole prompt (--disagg always, for
	// comparisons).
	Always     bool
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// NewProxy returns a proxy with no prefill worker yet.
func NewProxy(cfg ProxyConfig) *Proxy {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	p := &Proxy{always: cfg.Always, log: cfg.Logger, legs: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tandem_vllmpd_prefill_legs_total",
		Help: "Prefill legs of vLLM's P/D protocol the router ran, by result.",
	}, []string{"result"})}
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(p.legs)
	}
	return p
}

// AddPrefill registers (or replaces) prefill worker id.
func (p *Proxy) AddPrefill(id string, gen engine.Generator) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range p.prefill {
		if w.id == id {
			w.gen = gen
			return
		}
	}
	p.prefill = append(p.prefill, &prefillWorker{id: id, gen: gen})
}

// RemovePrefill forgets prefill worker id.
func (p *Proxy) RemovePrefill(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, w := range p.prefill {
		if w.id == id {
			p.prefill = append(p.prefill[:i], p.prefill[i+1:]...)
			return
		}
	}
}

// Wrap returns the Generator the router holds for decode worker id, whose
// KV blocks hold blockSize tokens.
func (p *Proxy) Wrap(id string, decode engine.Generator, blockSize int) engine.Generator {
	return &pair{p: p, id: id, decode: decode, bs: max(blockSize, 1)}
}

func (p *Proxy) pick() *prefillWorker {
	p.mu.Lock()
	defer p.mu.Unlock()
	var best *prefillWorker
	for _, w := range p.prefill {
		if best == nil || w.inFlight < best.inFlight {
			best = w
		}
	}
	if best != nil {
		best.inFlight++
	}
	return best
}

func (p *Proxy) done(w *prefillWorker) {
	p.mu.Lock()
	w.inFlight--
	p.mu.Unlock()
}

type pair struct {
	p      *Proxy
	id     string
	decode engine.Generator
	bs     int
}

// cached reports whether the router predicts that the decode worker holds
// every whole block of the prompt before its last token: a vLLM server's
// cache cannot be asked, but a KV-aware router's index is a good guess,
// and a prefill leg for a cached prompt moves nothing and costs a round
// trip and a prefill-server step.
func (g *pair) cached(r routed.Request) bool {
	full := max(len(r.Req.Prompt)-1, 0) / g.bs * g.bs
	return full > 0 && r.PredictedCachedTokens >= full
}

// Generate runs the prefill leg, then the decode leg with the parameters
// it returned. A failed leg costs the decode worker the prefill, never
// the request.
func (g *pair) Generate(ctx context.Context, req *engine.Request) (engine.Stream, error) {
	return g.GenerateRouted(ctx, routed.Request{Req: req})
}

// GenerateRouted is Generate knowing the prefix the router predicts the
// decode server holds (a full hit skips the prefill leg).
func (g *pair) GenerateRouted(ctx context.Context, r routed.Request) (engine.Stream, error) {
	req := r.Req
	if req.KVTransferParams != nil {
		// The client drives the protocol itself (Tandem behind another
		// proxy): pass it through.
		return g.decode.Generate(ctx, req)
	}
	if !g.p.always && g.cached(r) {
		g.p.legs.WithLabelValues(LegCached).Inc()
		return g.decode.Generate(ctx, req)
	}
	w := g.p.pick()
	if w == nil {
		g.p.legs.WithLabelValues(LegNone).Inc()
		return g.decode.Generate(ctx, req)
	}
	params, err := prefillLeg(ctx, w.gen, req)
	g.p.done(w)
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, ctx.Err()
	case err != nil:
		g.p.legs.WithLabelValues(LegFailed).Inc()
		g.p.log.Warn("vLLM prefill leg failed; the decode worker prefills", "diagnostic_code", DiagPrefillFailed,
			"request_id", req.ID, "prefill_worker", w.id, "decode_worker", g.id, "err", err)
		return g.decode.Generate(ctx, req)
	case params == nil:
		g.p.legs.WithLabelValues(LegNoParams).Inc()
		return g.decode.Generate(ctx, req)
	}
	g.p.legs.WithLabelValues(LegOK).Inc()
	d := *req
	d.KVTransferParams = params
	return g.decode.Generate(ctx, &d)
}

// prefillLeg runs the prefill leg of req on gen (same request id, as the
// protocol's X-Request-Id on both legs) and returns the kv_transfer_params
// of its response (nil when there were none).
func prefillLeg(ctx context.Context, gen engine.Generator, req *engine.Request) ([]byte, error) {
	pr := *req
	pr.MaxTokens, pr.MinTokens = 1, 0
	pr.KVTransferParams = prefillLegParams
	st, err := gen.Generate(ctx, &pr)
	if err != nil {
		return nil, err
	}
	var params []byte
	for {
		d, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return params, nil
		}
		if err != nil {
			return nil, fmt.Errorf("vllmpd: prefill leg: %w", err)
		}
		if d.KVTransferParams != nil {
			params = d.KVTransferParams
		}
	}
}
