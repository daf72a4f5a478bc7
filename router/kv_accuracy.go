package router

import (
	"fmt"

	"github.com/tandemllm/tandem/health"
)

// gradePrefix grades one request's predicted prefix (blocks) against the
// engine's report (blocks and tokens) with the worker's accuracy.Prefix,
// exports the window's figures and raises or clears kv_prediction_drift.
// It turns the seed report's manual check ("does TTFT drop when the same
// prefix is resent?") into metrics.
func (k *KV) gradePrefix(f *flight, actual, cachedTokens int) {
	k.met.predicted.Observe(float64(f.predicted))
	k.met.reported.Observe(float64(actual))
	k.met.predErr.Observe(float64(actual - f.predicted))
	w := f.w
	v, ok := w.acc.Grade(f.predicted, actual, cachedTokens, f.isl)
	if !ok {
		return // the worker left
	}
	k.met.accuracy.WithLabelValues(w.id).Set(v.Ratio)
	k.met.predHit.WithLabelValues(w.id).Set(v.Hit)
	k.met.cacheHit.WithLabelValues(w.id).Set(v.CacheHit)
	if v.Raise {
		k.board.Raise(DiagPredictionDrift, w.id, health.Warn,
			fmt.Sprintf("router predictions for worker %s disagree with the engine's cached_tokens: only %.0f%% of the last %d were within one block (predicted %.1f blocks on average, engine reported %.1f)",
				w.id, 100*v.Ratio, v.N, v.PredictedMean, v.ActualMean),
			"worker", w.id, "accuracy", v.Ratio, "window", v.N, "state", w.healthState().String())
	}
	if v.Clear {
		k.board.Clear(DiagPredictionDrift, w.id, DiagPredictionRecovery, "router predictions agree with the engine again")
	}
}
