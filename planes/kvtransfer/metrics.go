package kvtransfer

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the transfer plane's Prometheus series, shared by every Node
// of a process (they are labelled by worker).
type Metrics struct {
	throughput *prometheus.GaugeVec
	bytes      *prometheus.CounterVec
	transfers  *prometheus.CounterVec
	seconds    *prometheus.HistogramVec
	budgetUsed *prometheus.GaugeVec
	budgetWait *prometheus.CounterVec
	refused    *prometheus.CounterVec
}

// NewMetrics registers the series on reg (nil: unregistered, for tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		throughput: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tandem_kv_link_throughput_bytes_per_second",
			Help: "Estimated KV transfer throughput from src to dst worker (EWMA of real transfers, seeded by a probe).",
		}, []string{"src", "dst"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_kv_transfer_bytes_total",
			Help: "KV block bytes sent from src to dst worker.",
		}, []string{"src", "dst"}),
		transfers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_kv_transfers_total",
			Help: "KV transfers by outcome: ok, aborted (the prefill they streamed failed or was cancelled) or a diagnostic code.",
		}, []string{"src", "dst", "result"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tandem_kv_transfer_seconds",
			Help:    "Wall time of KV transfers, from the call to the receiver's answer; a transfer streamed during its prefill (SendWhile) includes the wait for the engine.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}, []string{"src", "dst"}),
		budgetUsed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tandem_kv_transfer_budget_bytes",
			Help: "Transfer staging memory of the worker: limit, allocated and peak.",
		}, []string{"worker", "state"}),
		budgetWait: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_kv_transfer_budget_wait_seconds_total",
			Help: "Time transfers spent waiting for the worker's staging budget.",
		}, []string{"worker"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_kv_transfers_refused_total",
			Help: "Inbound KV transfer connections or transfers the worker refused, by reason: tls (no or a foreign certificate) or token (no valid transfer token).",
		}, []string{"worker", "reason"}),
	}
	if reg != nil {
		reg.MustRegister(m.throughput, m.bytes, m.transfers, m.seconds, m.budgetUsed, m.budgetWait, m.refused)
	}
	return m
}
