package vllmpd

import (
	"cmp"
	"fmt"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemllm/tandem/authn"
	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/internal/connlimit"
	"github.com/tandemllm/tandem/planes/kvtransfer"
)

// HostConfig makes every worker of a process answer vLLM's P/D protocol
// (kv_transfer_params): the vLLM-compatible worker mode can then stand in
// for a vLLM NixlConnector server on either leg.
type HostConfig struct {
	Enabled bool
	// ListenHost is where the transfer node and side channel listen
	// (default 127.0.0.1); AdvertiseHost is what remote_host says.
	ListenHost    string
	AdvertiseHost string
	// TransferBudget is the staging budget in bytes (default: kvtransfer's).
	TransferBudget int64
	// Peers are the side channels a decode leg may pull from
	// (--kv-transfer-peers, ParsePeers; "" is PeersLoopback); this
	// process's own side channels are always among them.
	Peers string
	// ConnLimits bound the transfer node's and the side channel's ports
	// (--conn-* flags; the zero value: connlimit.Defaults()).
	ConnLimits connlimit.Limits
	// MTLS, if set, is the worker's cluster identity: the side channel and
	// the transfer node admit only cluster workers (--mtls-*).
	MTLS authn.Files
}

// Host plays vLLM's P/D roles for a process's workers, which share one
// set of trusted peers and one set of series.
type Host struct {
	cfg     HostConfig
	board   *health.Board
	log     *slog.Logger
	cluster *authn.Cluster
	metrics *kvtransfer.Metrics
	conns   *connlimit.Metrics
	peers   *Peers
	refused prometheus.Counter

	mu      sync.Mutex
	nodes   []*kvtransfer.Node
	workers []*Worker
}

// NewHost prepares the process's side of the protocol.
func NewHost(cfg HostConfig, board *health.Board, reg prometheus.Registerer, log *slog.Logger) (*Host, error) {
	cfg.ListenHost = cmp.Or(cfg.ListenHost, "127.0.0.1")
	if cfg.ConnLimits == (connlimit.Limits{}) {
		cfg.ConnLimits = connlimit.Defaults()
	}
	peers, err := ParsePeers(cmp.Or(cfg.Peers, PeersLoopback))
	if err != nil {
		return nil, fmt.Errorf("vllmpd: --kv-transfer-peers: %w", err)
	}
	cluster, err := authn.Load(cfg.MTLS)
	if err != nil {
		return nil, fmt.Errorf("vllmpd: %w", err)
	}
	refused := prometheus.NewCounter(prometheus.CounterOpts{Name: "tandem_vllmpd_pulls_refused_total",
		Help: "Decode legs whose kv_transfer_params named a side channel outside --kv-transfer-peers (nothing sent; prefilled locally)."})
	if reg != nil {
		reg.MustRegister(refused)
	}
	return &Host{cfg: cfg, board: board, log: log, cluster: cluster, metrics: kvtransfer.NewMetrics(reg), conns: connlimit.NewMetrics(reg),
		peers: peers, refused: refused}, nil
}

// Wrap gives worker id a listening transfer node and a side channel, and
// returns the Generator that plays vLLM's P/D roles for it.
func (h *Host) Wrap(id string, eng engine.Engine, gen engine.Generator) (engine.Generator, error) {
	c := h.cfg
	port, ok := eng.(engine.KVPort)
	if !ok {
		return nil, fmt.Errorf("vllmpd: %s: the %s engine cannot transfer KV", id, eng.Info().Kind)
	}
	n, err := kvtransfer.NewNode(kvtransfer.Config{ID: id, Port: port, Budget: kvtransfer.NewBudget(c.TransferBudget),
		Board: h.board, Metrics: h.metrics, Logger: h.log, RequireToken: true, TLS: h.cluster,
		ConnLimits: c.ConnLimits, ConnMetrics: h.conns})
	if err != nil {
		return nil, fmt.Errorf("vllmpd: %s: %w", id, err)
	}
	h.mu.Lock()
	h.nodes = append(h.nodes, n)
	h.mu.Unlock()
	if err := n.Listen(c.ListenHost + ":0"); err != nil {
		return nil, fmt.Errorf("vllmpd: %s: %w", id, err)
	}
	w, err := NewWorker(WorkerConfig{ID: id, Engine: eng, Gen: gen, Node: n,
		SideChannel: c.ListenHost + ":0", AdvertiseHost: c.AdvertiseHost, Logger: h.log, TLS: h.cluster,
		Peers: h.peers, RefusedPulls: h.refused, ConnLimits: c.ConnLimits, ConnMetrics: h.conns, Board: h.board})
	if err != nil {
		return nil, fmt.Errorf("vllmpd: %s: %w", id, err)
	}
	h.peers.Add(w.SideChannelAddr())
	h.mu.Lock()
	h.workers = append(h.workers, w)
	h.mu.Unlock()
	return w, nil
}

// Close stops every worker's side channel and transfer node.
func (h *Host) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, w := range h.workers {
		_ = w.Close()
	}
	for _, n := range h.nodes {
		_ = n.Close()
	}
}
