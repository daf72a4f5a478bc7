package serve

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemllm/tandem/authn"
	"github.com/tandemllm/tandem/disagg/vllmpd"
	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/internal/connlimit"
	"github.com/tandemllm/tandem/kvtransfer"
)

// VLLMPDConfig makes every worker answer vLLM's P/D protocol
// (kv_transfer_params, disagg/vllmpd): the vLLM-compatible worker mode
// can then stand in for a vLLM NixlConnector server on either leg.
type VLLMPDConfig struct {
	Enabled bool
	// ListenHost is where the transfer node and side channel listen
	// (default 127.0.0.1); AdvertiseHost is what remote_host says.
	ListenHost    string
	AdvertiseHost string
	// TransferBudget is the staging budget in bytes (default: kvtransfer's).
	TransferBudget int64
	// Peers are the side channels a decode leg may pull from
	// (--kv-transfer-peers, vllmpd.ParsePeers; "" is vllmpd.PeersLoopback);
	// this process's own side channels are always among them.
	Peers string
	// ConnLimits bound the transfer node's and the side channel's ports
	// (--conn-* flags; the zero value: connlimit.Defaults()).
	ConnLimits connlimit.Limits
	// MTLS, if set, is the worker's cluster identity: the side channel and
	// the transfer node admit only cluster workers (--mtls-*).
	MTLS authn.Files
}

type vllmpdState struct {
	metrics *kvtransfer.Metrics
	conns   *connlimit.Metrics
	peers   *vllmpd.Peers
	refused prometheus.Counter
	nodes   []*kvtransfer.Node
	workers []*vllmpd.Worker
}

// wrapVLLMPD gives worker id a listening transfer node and a side channel,
// and returns the Generator that plays vLLM's P/D roles for it.
func (s *System) wrapVLLMPD(id string, eng engine.Engine, gen engine.Generator) (engine.Generator, error) {
	c := s.cfg.VLLMPD
	if c.ListenHost == "" {
		c.ListenHost = "127.0.0.1"
	}
	if s.pd == nil {
		spec := c.Peers
		if spec == "" {
			spec = vllmpd.PeersLoopback
		}
		peers, err := vllmpd.ParsePeers(spec)
		if err != nil {
			return nil, fmt.Errorf("serve: --kv-transfer-peers: %w", err)
		}
		refused := prometheus.NewCounter(prometheus.CounterOpts{Name: "tandem_vllmpd_pulls_refused_total",
			Help: "Decode legs whose kv_transfer_params named a side channel outside --kv-transfer-peers (nothing sent; prefilled locally)."})
		if s.Registry != nil {
			s.Registry.MustRegister(refused)
		}
		s.pd = &vllmpdState{metrics: kvtransfer.NewMetrics(s.Registry), conns: connlimit.NewMetrics(s.Registry), peers: peers, refused: refused}
	}
	port, ok := eng.(engine.KVPort)
	if !ok {
		return nil, fmt.Errorf("serve: %s: the %s engine cannot transfer KV", id, eng.Info().Kind)
	}
	if c.ConnLimits == (connlimit.Limits{}) {
		c.ConnLimits = connlimit.Defaults()
	}
	cluster, err := authn.Load(c.MTLS)
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	n, err := kvtransfer.NewNode(kvtransfer.Config{ID: id, Port: port, Budget: kvtransfer.NewBudget(c.TransferBudget),
		Board: s.Board, Metrics: s.pd.metrics, Logger: s.log, RequireToken: true, TLS: cluster,
		ConnLimits: c.ConnLimits, ConnMetrics: s.pd.conns})
	if err != nil {
		return nil, fmt.Errorf("serve: %s: %w", id, err)
	}
	s.pd.nodes = append(s.pd.nodes, n)
	if err := n.Listen(c.ListenHost + ":0"); err != nil {
		return nil, fmt.Errorf("serve: %s: %w", id, err)
	}
	w, err := vllmpd.NewWorker(vllmpd.WorkerConfig{ID: id, Engine: eng, Gen: gen, Node: n,
		SideChannel: c.ListenHost + ":0", AdvertiseHost: c.AdvertiseHost, Logger: s.log, TLS: cluster,
		Peers: s.pd.peers, RefusedPulls: s.pd.refused, ConnLimits: c.ConnLimits, ConnMetrics: s.pd.conns, Board: s.Board})
	if err != nil {
		return nil, fmt.Errorf("serve: %s: %w", id, err)
	}
	s.pd.peers.Add(w.SideChannelAddr())
	s.pd.workers = append(s.pd.workers, w)
	return w, nil
}

func (s *System) stopVLLMPD() {
	if s.pd == nil {
		return
	}
	for _, w := range s.pd.workers {
		_ = w.Close()
	}
	for _, n := range s.pd.nodes {
		_ = n.Close()
	}
}
