package router

import (
	"fmt"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// kvMetrics are the kv policies' metrics. Per-worker series are deleted
// when the worker leaves.
type kvMetrics struct {
	health      *prometheus.GaugeVec
	blockEvents *prometheus.CounterVec
	// applied and lastEvent prove that events, not the fallback, route a
	// worker: KV events applied to its index, and when the last arrived.
	applied   *prometheus.CounterVec
	lastEvent *prometheus.GaugeVec
	picks     *prometheus.HistogramVec
	predicted prometheus.Histogram
	reported  prometheus.Histogram
	predErr   prometheus.Histogram
	predHit   *prometheus.GaugeVec
	accuracy  *prometheus.GaugeVec
	cacheHit  *prometheus.GaugeVec
	ttftRatio *prometheus.HistogramVec
	ttftErr   *prometheus.GaugeVec
}

func newKVMetrics(reg prometheus.Registerer, policy string) (*kvMetrics, error) {
	blocks := []float64{0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048}
	cl := prometheus.Labels{"policy": policy}
	m := &kvMetrics{
		health: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tandem_router_kv_event_health",
			Help: "1 for the worker's current KV event state (connecting, syncing, healthy, missing, rebuilding, refused, approx), 0 for the others.",
		}, []string{"worker", "state"}),
		blockEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_router_kv_block_events_total",
			Help: "Index blocks stored or removed by the worker's KV events.",
		}, []string{"worker"}),
		applied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_router_kv_events_applied_total",
			Help: "KV events (BlockStored, BlockRemoved, AllBlocksCleared) applied to the worker's index: the proof that its events, not approximation, route it.",
		}, []string{"worker"}),
		lastEvent: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tandem_router_kv_last_event_timestamp_seconds",
			Help: "Unix time of the last KV event batch received from the worker (age: time() - this).",
		}, []string{"worker"}),
		picks: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tandem_router_kv_pick_seconds", ConstLabels: cl,
			Help:    "Time to route one request (hash, look up, score), by the chosen worker's KV state.",
			Buckets: prometheus.ExponentialBuckets(5e-6, 2, 14),
		}, []string{"state"}),
		predicted: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "tandem_router_kv_predicted_cached_blocks", ConstLabels: cl,
			Help: "Prefix blocks the router predicted the chosen worker holds.", Buckets: blocks,
		}),
		reported: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "tandem_router_kv_engine_cached_blocks", ConstLabels: cl,
			Help: "Prefix blocks the engine reported cached (cached_tokens / block size).", Buckets: blocks,
		}),
		predErr: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "tandem_router_kv_prediction_error_blocks", ConstLabels: cl,
			Help:    "Engine-reported minus predicted cached blocks per request (negative: the router was too optimistic).",
			Buckets: []float64{-256, -64, -16, -4, -2, -1, 0, 1, 2, 4, 16, 64, 256},
		}),
		predHit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tandem_router_kv_prediction_hit_ratio", ConstLabels: cl,
			Help: "Of the worker's recent requests predicted to hit the cache, the fraction the engine confirmed (cached within one block of the prediction or more).",
		}, []string{"worker"}),
		accuracy: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tandem_router_kv_prediction_accuracy_ratio", ConstLabels: cl,
			Help: "Fraction of the worker's recent predictions within one block of the engine's cached_tokens.",
		}, []string{"worker"}),
		cacheHit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tandem_router_kv_cache_hit_ratio", ConstLabels: cl,
			Help: "Engine-reported cached prompt tokens over prompt tokens, over the worker's recent requests.",
		}, []string{"worker"}),
		ttftRatio: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tandem_router_ttft_observed_over_predicted", ConstLabels: cl,
			Help:    "Per request, the TTFT the router observed over the TTFT the ttft cost predicted when routing it (1 is exact).",
			Buckets: prometheus.ExponentialBuckets(0.125, math.Sqrt2, 13),
		}, []string{"worker"}),
		ttftErr: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tandem_router_ttft_prediction_error_ratio", ConstLabels: cl,
			Help: "Mean of |observed − predicted| / max(observed, predicted) TTFT over the worker's last 32 requests; above 0.5 raises ttft_model_drift, below 0.3 clears it.",
		}, []string{"worker"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.health, m.blockEvents, m.applied, m.lastEvent, m.picks, m.predicted, m.reported, m.predErr, m.predHit, m.accuracy, m.cacheHit, m.ttftRatio, m.ttftErr} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register kv metrics: %w", err)
			}
		}
	}
	return m, nil
}

func (m *kvMetrics) setHealth(worker string, st workerHealth) {
	for s := workerHealth(0); s < numHealth; s++ {
		v := 0.0
		if s == st {
			v = 1
		}
		m.health.WithLabelValues(worker, s.String()).Set(v)
	}
}

func (m *kvMetrics) observePick(st workerHealth, d time.Duration) {
	m.picks.WithLabelValues(st.String()).Observe(d.Seconds())
}

func (m *kvMetrics) forget(worker string) {
	l := prometheus.Labels{"worker": worker}
	m.health.DeletePartialMatch(l)
	m.blockEvents.DeletePartialMatch(l)
	m.applied.DeletePartialMatch(l)
	m.lastEvent.DeletePartialMatch(l)
	m.predHit.DeletePartialMatch(l)
	m.accuracy.DeletePartialMatch(l)
	m.cacheHit.DeletePartialMatch(l)
	m.ttftRatio.DeletePartialMatch(l)
	m.ttftErr.DeletePartialMatch(l)
}
