package serve

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"time"

	"github.com/tandemllm/tandem/disagg"
	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/kvtransfer"
)

// DisaggConfig configures disaggregated prefill in one process: prefill
// workers outside the router, decode workers inside it, and a transfer-
// plane node per worker speaking real TCP on loopback, so the bytes move
// exactly as they would between hosts.
type DisaggConfig struct {
	// PrefillWorkers > 0 enables disaggregation (--prefill-workers).
	PrefillWorkers int
	// DecodeWorkers replaces Config.Workers when > 0 (--decode-workers).
	DecodeWorkers int
	// Mode is --disagg: auto (default), always or never.
	Mode string
	// TransferBudget is each worker's staging budget in bytes
	// (--transfer-budget, default 512 MiB).
	TransferBudget int64
	// TransferTimeout bounds one KV transfer (default 60 s).
	TransferTimeout time.Duration
	// LegTimeout bounds a remote prefill leg, transfer included
	// (--disagg-leg-timeout, the name tandem frontend uses too); 0 means
	// TransferTimeout, serve's bound before the flag existed.
	LegTimeout time.Duration
	// ListenHost is where transfer nodes listen (default 127.0.0.1).
	ListenHost string
	// InterferenceWeight is the decider's w (default 1).
	InterferenceWeight float64
	// OnDecision hears every decision (tests, benchmarks).
	OnDecision func(disagg.Decision)
	// TransferListen and TransferDial, if set, create the transfer nodes'
	// listeners and outgoing connections (nil: plain TCP), e.g. to put
	// the sockets in other network namespaces (tests).
	TransferListen func(network, addr string) (net.Listener, error)
	TransferDial   func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Enabled reports whether any prefill worker is configured.
func (c DisaggConfig) Enabled() bool { return c.PrefillWorkers > 0 }

type disaggState struct {
	orch    *disagg.Orchestrator
	metrics *kvtransfer.Metrics
	board   *health.Board
	cfg     DisaggConfig
	nodes   []*kvtransfer.Node
	prefill []engine.Engine
	// Prefill are the prefill workers, for tests and banners.
	ids []string
}

// PrefillWorkers lists the ids of the prefill workers (none when
// disaggregation is off).
func (s *System) PrefillWorkers() []string {
	if s.dis == nil {
		return nil
	}
	return append([]string(nil), s.dis.ids...)
}

// PrefillEngine returns prefill worker i's engine.
func (s *System) PrefillEngine(i int) engine.Engine { return s.dis.prefill[i] }

// startDisagg starts the prefill workers (engine indexes after the decode
// workers', so seeds and ports never collide) and prepares cfg for the
// decode workers.
func (s *System) startDisagg(cfg *Config, newEngine EngineFactory) error {
	dc := cfg.Disagg
	mode, err := disagg.ParseMode(dc.Mode)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if dc.DecodeWorkers > 0 {
		cfg.Workers = dc.DecodeWorkers
	}
	if len(cfg.WorkerIDs) == 0 {
		for i := range cfg.Workers {
			cfg.WorkerIDs = append(cfg.WorkerIDs, fmt.Sprintf("decode-%d", i))
		}
	}
	if dc.ListenHost == "" {
		dc.ListenHost = "127.0.0.1"
	}
	d := &disaggState{cfg: dc, metrics: kvtransfer.NewMetrics(s.Registry), board: s.Board}
	s.dis = d
	d.orch = disagg.New(disagg.Config{Mode: mode, InterferenceWeight: dc.InterferenceWeight, OnDecision: dc.OnDecision, LegTimeout: cmp.Or(dc.LegTimeout, dc.TransferTimeout),
		Board: s.Board, Logger: s.log, Registerer: s.Registry})
	for j := range dc.PrefillWorkers {
		id := fmt.Sprintf("prefill-%d", j)
		eng, err := newEngine(cfg.Workers + j)
		if err != nil {
			return fmt.Errorf("serve: %s: %w", id, err)
		}
		d.prefill = append(d.prefill, eng)
		d.ids = append(d.ids, id)
		if c, ok := eng.(engine.MetricsCollector); ok {
			if err := s.Registry.Register(unchecked{c.Collector()}); err != nil {
				return fmt.Errorf("serve: %s metrics: %w", id, err)
			}
		}
		node, err := d.node(id, eng, false)
		if err != nil {
			return err
		}
		side, err := kvtransfer.NewLocal(kvtransfer.Worker{ID: id, Engine: eng, Node: node})
		if err != nil {
			return fmt.Errorf("serve: %w", err)
		}
		d.orch.AddPrefill(side)
	}
	return nil
}

func (d *disaggState) node(id string, eng engine.Engine, listen bool) (*kvtransfer.Node, error) {
	port, ok := eng.(engine.KVPort)
	if !ok {
		return nil, fmt.Errorf("serve: %s: the %s engine cannot transfer KV", id, eng.Info().Kind)
	}
	n, err := kvtransfer.NewNode(kvtransfer.Config{ID: id, Port: port, Budget: kvtransfer.NewBudget(d.cfg.TransferBudget),
		Timeout: d.cfg.TransferTimeout, Board: d.board, Metrics: d.metrics, Listen: d.cfg.TransferListen, Dial: d.cfg.TransferDial,
		RequireToken: true})
	if err != nil {
		return nil, fmt.Errorf("serve: %s: %w", id, err)
	}
	d.nodes = append(d.nodes, n)
	if listen {
		if err := n.Listen(d.cfg.ListenHost + ":0"); err != nil {
			return nil, fmt.Errorf("serve: %s: %w", id, err)
		}
	}
	return n, nil
}

// wrapDecode gives decode worker id a listening transfer node and returns
// the Generator the router holds for it. The orchestrator probes the link
// from every prefill worker in the background; Start waits for those
// probes, so the first request is priced on a measurement.
func (s *System) wrapDecode(id string, eng engine.Engine, gen engine.Generator) (engine.Generator, error) {
	d := s.dis
	n, err := d.node(id, eng, true)
	if err != nil {
		return nil, err
	}
	side, err := kvtransfer.NewLocal(kvtransfer.Worker{ID: id, Engine: eng, Node: n})
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	return d.orch.Wrap(side, gen), nil
}

// waitProbes lets the link probes the decode workers started finish
// (bounded: a link that cannot be probed now is probed on first use).
func (s *System) waitProbes() {
	if s.dis == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.dis.orch.Probed(ctx); err != nil {
		s.log.Warn("KV link probes still running at start-up; they finish in the background", "err", err)
	}
}

func (s *System) stopDisagg() {
	if s.dis == nil {
		return
	}
	s.dis.orch.Close()
	for _, n := range s.dis.nodes {
		_ = n.Close()
	}
	for _, e := range s.dis.prefill {
		if err := e.Close(); err != nil {
			s.log.Warn("closing prefill engine", "err", err)
		}
	}
}
