package router

import (
	"fmt"

	"github.com/tandemllm/tandem/health"
)

// accuracy keeps a worker's recent predictions, graded against the
// engine's cached_tokens. It turns the seed report's manual check ("does
// TTFT drop when the same prefix is resent?") into metrics, and raises
// kv_prediction_drift when the router's picture of the worker's cache keeps
// being wrong, whatever the cause: lost events, an engine that evicts more
// than we think, a tokenizer mismatch.
type accuracy struct {
	ring []sample
	at   int
	n    int
	// Running sums over the ring.
	close, predictedHits, confirmedHits int
	cached, prompt                      int
	predSum, actSum                     int
	drifting                            bool
}

type sample struct {
	close             bool // within one block
	predictedHit      bool // predicted > 0
	confirmed         bool // predicted > 0 and the engine had it (within a block)
	cached, prompt    int
	predicted, actual int
}

func (a *accuracy) init(window int) { a.ring = make([]sample, window) }

func (a *accuracy) add(s sample) {
	if a.n == len(a.ring) {
		o := a.ring[a.at]
		a.close -= b2i(o.close)
		a.predictedHits -= b2i(o.predictedHit)
		a.confirmedHits -= b2i(o.confirmed)
		a.cached -= o.cached
		a.prompt -= o.prompt
		a.predSum -= o.predicted
		a.actSum -= o.actual
	} else {
		a.n++
	}
	a.ring[a.at] = s
	a.at = (a.at + 1) % len(a.ring)
	a.close += b2i(s.close)
	a.predictedHits += b2i(s.predictedHit)
	a.confirmedHits += b2i(s.confirmed)
	a.cached += s.cached
	a.prompt += s.prompt
	a.predSum += s.predicted
	a.actSum += s.actual
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// accuracy grades one request's prediction (blocks) against the engine's
// report (blocks and tokens).
func (k *KV) accuracy(f *flight, actual, cachedTokens int) {
	diff := actual - f.predicted
	k.met.predicted.Observe(float64(f.predicted))
	k.met.reported.Observe(float64(actual))
	k.met.predErr.Observe(float64(diff))
	s := sample{
		close:        diff >= -1 && diff <= 1,
		predictedHit: f.predicted > 0,
		confirmed:    f.predicted > 0 && diff >= -1,
		cached:       cachedTokens,
		prompt:       f.isl,
		predicted:    f.predicted,
		actual:       actual,
	}
	w := f.w
	w.mu.Lock()
	if w.removed {
		w.mu.Unlock()
		return
	}
	a := &w.acc
	a.add(s)
	ratio := float64(a.close) / float64(a.n)
	hit := 1.0
	if a.predictedHits > 0 {
		hit = float64(a.confirmedHits) / float64(a.predictedHits)
	}
	cacheHit := 0.0
	if a.prompt > 0 {
		cacheHit = float64(a.cached) / float64(a.prompt)
	}
	var raise, clear bool
	full := a.n >= len(a.ring)/2
	switch {
	case !a.drifting && full && ratio < k.cfg.DriftThreshold:
		a.drifting, raise = true, true
	case a.drifting && ratio >= defaultDriftRecoverRate:
		a.drifting, clear = false, true
	}
	n, predMean, actMean := a.n, float64(a.predSum)/float64(a.n), float64(a.actSum)/float64(a.n)
	w.mu.Unlock()
	k.met.accuracy.WithLabelValues(w.id).Set(ratio)
	k.met.predHit.WithLabelValues(w.id).Set(hit)
	k.met.cacheHit.WithLabelValues(w.id).Set(cacheHit)
	if raise {
		k.board.Raise(DiagPredictionDrift, w.id, health.Warn,
			fmt.Sprintf("router predictions for worker %s disagree with the engine's cached_tokens: only %.0f%% of the last %d were within one block (predicted %.1f blocks on average, engine reported %.1f)",
				w.id, 100*ratio, n, predMean, actMean),
			"worker", w.id, "accuracy", ratio, "window", n, "state", w.healthState().String())
	}
	if clear {
		k.board.Clear(DiagPredictionDrift, w.id, DiagPredictionRecovery, "router predictions agree with the engine again")
	}
}
