package engine

import "github.com/prometheus/client_golang/prometheus"

// The optional capabilities of an Engine. A host (worker, serve, the
// frontend, the disaggregation drivers) asks for one with a type assertion
// on these names, never on an anonymous interface, and each implementing
// package asserts at compile time that its engine still satisfies the ones
// it offers (var _ engine.X = (*Engine)(nil)), so a renamed method breaks the
// build instead of silently turning a capability off.

// KVEventsPublisher is implemented by engines that publish vLLM-format KV
// events on a ZMQ PUB socket: the mocker and the native engine (their own
// kvevents publisher) and engine/upstream (the server's socket, as
// configured). "" means events are off. Asked by worker (the discovery
// record, the NATS relay, the open-plane check), serve (the KV policy's
// subscriptions) and cmd/tandem (the worker banner).
type KVEventsPublisher interface {
	KVEventsEndpoint() string
}

// KVEventsReplayer is implemented by engines whose KV event publisher also
// answers replay requests on a ROUTER socket: the mocker, the native engine
// and engine/upstream. "" means no replay socket. Asked by worker (the
// discovery record, the NATS relay) and serve (the KV policy's
// subscriptions).
type KVEventsReplayer interface {
	KVEventsReplayEndpoint() string
}

// ReplayTokener is implemented by engines whose replay socket wants a token
// before it sends history: the mocker and the native engine. nil means none
// is needed. Asked by worker (the discovery record) and serve (handed to
// the KV policy with the worker's subscription).
type ReplayTokener interface {
	KVEventsReplayToken() []byte
}

// TokenIDPublisher is a KVEventsPublisher that can say whether its events
// carry token ids, and so the prompts: the mocker and the native engine
// (--kv-events-token-ids). Asked by worker, which warns when such a socket
// listens beyond the host.
type TokenIDPublisher interface {
	KVEventsPublisher
	KVEventsTokenIDs() bool
}

// MetricsCollector is implemented by whatever keeps Prometheus metrics of
// its own for its host to register: the mocker (vLLM's vllm: metrics) and a
// file discovery registry (discovery.File, its junk-file count). Asked by
// serve and worker for their engines, and by frontend for its discovery
// registry.
type MetricsCollector interface {
	Collector() prometheus.Collector
}

// KVTransferProtocolReporter is implemented by engines that move KV between
// prefill and decode with a protocol of their own rather than Tandem's
// kvtransfer: engine/upstream, a vLLM server ("vllm", discovery.ProtocolVLLM:
// kv_transfer_params through its KV connector). Asked by worker for its
// discovery record.
type KVTransferProtocolReporter interface {
	KVTransferProtocol() string
}

// URLReporter is implemented by engines that are a server reached at a
// base URL: engine/upstream. Asked by serve to name upstreams in its errors.
type URLReporter interface {
	URL() string
}

// InfoReporter is implemented by anything that can describe its engine
// (every Engine, hence every engine's KVPort). Asked by kvtransfer for the
// block size of a KVPort.
type InfoReporter interface {
	Info() Info
}

// Metrics is one collector of the MetricsCollector engines that list
// returns at each scrape, so an engine that leaves takes its series along.
// It is unchecked (it describes nothing): the engines of one process
// export the same vllm: metric families, told apart by their engine label,
// which a checked registration would refuse as duplicates.
func Metrics(list func() []Engine) prometheus.Collector { return engineMetrics(list) }

type engineMetrics func() []Engine

func (engineMetrics) Describe(chan<- *prometheus.Desc) {}

func (m engineMetrics) Collect(ch chan<- prometheus.Metric) {
	for _, e := range m() {
		if c, ok := e.(MetricsCollector); ok {
			c.Collector().Collect(ch)
		}
	}
}

// ReplayToken is eng's KV event replay token (nil: none needed).
func ReplayToken(eng Engine) []byte {
	if t, ok := eng.(ReplayTokener); ok {
		return t.KVEventsReplayToken()
	}
	return nil
}

// InfoNotifier is implemented by engines whose Info can change after they
// start: engine/upstream, whose server may answer (model, context length)
// only after Tandem started. The channel is signalled once per change,
// coalesced. Asked by the worker node, which registers its record again
// with the new context length; frontends narrow theirs to it.
type InfoNotifier interface {
	InfoChanged() <-chan struct{}
}
