package router

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/tandemllm/tandem/engine"
)

// External load: an engine that serves other clients besides this Tandem
// (an upstream vLLM, SGLang or llama-server shared with other callers)
// queues requests the router never routed. Such an engine reports its own
// queue (engine.QueueReporter: the server's /metrics, scraped in the
// background by engine/upstream), and the decision adds the part the
// router cannot see itself to the candidate's in-flight load, for every
// cost: Dynamo's own scheduler took the engine's num_requests_waiting
// from its ForwardPassMetrics the same way.
//
// The report is a snapshot taken up to one scrape interval ago and it
// counts this Tandem's requests too, so the router subtracts its own and
// never lets the sum fall below what it knows: the external part is
// max(engine's − router's, 0), waiting first. A report older than
// externalMaxAge is ignored (the scrape has stopped; its diagnostic,
// upstream_metrics_unavailable, says so).

// externalMaxAge bounds how old an engine's queue report may be and still
// count: five of the default 2 s scrapes.
const externalMaxAge = 10 * time.Second

type queueSource struct{ r engine.QueueReporter }

// externalLoad is what an engine reports beyond the router's own counts.
type externalLoad struct{ running, waiting int }

// external reads w's engine report against the router's counts for it.
func (w *kvWorker) external(now int64, ownActive, ownPrefilling int) (externalLoad, bool) {
	src := w.queue.Load()
	if src == nil {
		return externalLoad{}, false
	}
	running, waiting, at, ok := src.r.EngineQueue()
	if !ok || running < 0 || waiting < 0 || now-at.UnixNano() > int64(externalMaxAge) {
		return externalLoad{}, false
	}
	// The engine's waiting requests are queued prefills; the router's
	// requests before their first token are either queued there or in its
	// running batch, so every queued one beyond them is someone else's.
	total := max(running+waiting-ownActive, 0)
	ext := externalLoad{waiting: min(max(waiting-ownPrefilling, 0), total)}
	ext.running = total - ext.waiting
	return ext, true
}

// typicalPrefill is the fleet's running mean of uncached prompt tokens per
// routed request (an exponential mean over about 100 requests): the price
// of a queued request whose prompt the router never saw.
type typicalPrefill struct{ bits atomic.Uint64 }

const typicalPrefillPrior = 512 // tokens, before the first request

func (t *typicalPrefill) get() float64 {
	if b := t.bits.Load(); b != 0 {
		return math.Float64frombits(b)
	}
	return typicalPrefillPrior
}

// observe folds one request in; a lost race between two decisions loses
// one sample of a mean, which is harmless.
func (t *typicalPrefill) observe(tokens int) {
	m := t.get()
	t.bits.Store(math.Float64bits(m + (float64(tokens)-m)/100))
}

// addExternal adds the engines' own queue reports to the decision's
// candidates (those with a QueueReporter; a no-op pass otherwise): waiting
// requests join the prefill queue, priced at the typical prefill, and
// running ones the decode batch, at the typical context.
func (k *KV) addExternal(sc *pickScratch, now int64) {
	if k.externals.Load() == 0 {
		return
	}
	bs := k.cfg.BlockSize
	fleet := k.fleetCoef.Load()
	typical := k.typical.get()
	for i := range sc.cands {
		cs := &sc.cands[i]
		ext, ok := cs.w.external(now, cs.activeRequests, cs.prefilling)
		if !ok || ext.running+ext.waiting == 0 {
			continue
		}
		n := int(typical)
		if ext.waiting > 0 {
			// The router's virtual queue is extended by the others'
			// prefills: the ttft cost waits for them, the weighted costs
			// count their tokens.
			per, _ := cs.w.timing.src.Load().estimate(fleet, max(n, 1), 0, n, true)
			cs.busyUntil = max(cs.busyUntil, now) + int64(float64(ext.waiting)*per*1e9)
			cs.activePrefill += ext.waiting * n
		}
		cs.activeRequests += ext.running + ext.waiting
		cs.prefilling += ext.waiting
		cs.activeUnique += ext.running * ((n + bs - 1) / bs)
	}
}

// setQueue installs (or, nil, removes) the worker's queue report.
func (w *kvWorker) setQueue(r engine.QueueReporter) {
	var src *queueSource
	if r != nil {
		src = &queueSource{r: r}
	}
	had := w.queue.Swap(src) != nil
	switch has := r != nil; {
	case has && !had:
		w.k.externals.Add(1)
	case !has && had:
		w.k.externals.Add(-1)
	}
}
