package httpapi

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	requests *prometheus.CounterVec
	ttft     *prometheus.HistogramVec
	itl      *prometheus.HistogramVec
	duration *prometheus.HistogramVec
	isl      *prometheus.HistogramVec
	osl      *prometheus.HistogramVec
	cached   *prometheus.HistogramVec
	inflight *prometheus.GaugeVec
	queued   *prometheus.GaugeVec
	// Limits: requests refused by admission control, connections past
	// the cap, bodies past the memory budget.
	admissionRejected *prometheus.CounterVec
	connsRefused      prometheus.Counter
	bodyRefused       prometheus.Counter
	// kvParamsRefused counts requests refused for client kv_transfer_params.
	kvParamsRefused prometheus.Counter
	// probeConns counts connections served from the probes' reserve.
	probeConns prometheus.Counter
	// authFailures counts requests refused for a missing or wrong API key.
	authFailures *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	latency := []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	tokens := prometheus.ExponentialBuckets(16, 2, 12) // 16 … 32768
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_frontend_requests_total", Help: "Requests by endpoint, model and HTTP status.",
		}, []string{"endpoint", "model", "status"}),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tandem_frontend_time_to_first_token_seconds", Help: "Time from request arrival to the first token.", Buckets: latency,
		}, []string{"model"}),
		itl: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tandem_frontend_inter_token_latency_seconds", Help: "Time between consecutive tokens of a stream.",
			Buckets: []float64{.0001, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}, []string{"model"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tandem_frontend_request_duration_seconds", Help: "Time from request arrival to the last byte.", Buckets: latency,
		}, []string{"model"}),
		isl: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tandem_frontend_input_sequence_tokens", Help: "Prompt length in tokens.", Buckets: tokens,
		}, []string{"model"}),
		osl: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tandem_frontend_output_sequence_tokens", Help: "Generated tokens per request.", Buckets: tokens,
		}, []string{"model"}),
		cached: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tandem_frontend_cached_tokens", Help: "Prompt tokens the engine found in its prefix cache.", Buckets: tokens,
		}, []string{"model"}),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tandem_frontend_inflight_requests", Help: "Requests being served.",
		}, []string{"model"}),
		queued: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tandem_frontend_queued_requests", Help: "Requests waiting for their first token.",
		}, []string{"model"}),
		admissionRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_frontend_admission_rejected_total", Help: "Requests refused with 429 by a model's admission limit, by reason (queue_full, queue_timeout; client_gone: left while queued).",
		}, []string{"model", "reason"}),
		connsRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tandem_frontend_connections_refused_total", Help: "Client connections closed with a 503 because the connection cap was reached.",
		}),
		bodyRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tandem_frontend_body_budget_refused_total", Help: "Requests refused with 503 because request bodies in memory reached the server's budget.",
		}),
		kvParamsRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tandem_frontend_kv_transfer_params_refused_total", Help: "Requests refused with 400 because a client sent kv_transfer_params without --trust-client-kv-transfer-params.",
		}),
		probeConns: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tandem_frontend_probe_connections_total", Help: "Connections accepted past --max-connections into the reserve kept for /health, /live and /metrics.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.ttft, m.itl, m.duration, m.isl, m.osl, m.cached, m.inflight, m.queued,
			m.admissionRejected, m.connsRefused, m.bodyRefused, m.kvParamsRefused, m.probeConns)
	}
	m.authFailures = newAuthFailures(reg)
	return m
}

// modelMetrics holds the label-bound children of one model, resolved once:
// WithLabelValues hashes its labels on every call, which showed up on the
// per-token path.
type modelMetrics struct {
	ttft, itl, duration, isl, osl, cached prometheus.Observer
	inflight, queued                      prometheus.Gauge
}

func (m *metrics) forModel(model string) *modelMetrics {
	return &modelMetrics{
		ttft: m.ttft.WithLabelValues(model), itl: m.itl.WithLabelValues(model),
		duration: m.duration.WithLabelValues(model), isl: m.isl.WithLabelValues(model),
		osl: m.osl.WithLabelValues(model), cached: m.cached.WithLabelValues(model),
		inflight: m.inflight.WithLabelValues(model), queued: m.queued.WithLabelValues(model),
	}
}
