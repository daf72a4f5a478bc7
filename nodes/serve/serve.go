package serve

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemllm/tandem/authn"
	"github.com/tandemllm/tandem/control/discovery"
	"github.com/tandemllm/tandem/disagg/vllmpd"
	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/engines"
	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/internal/connlimit"
	"github.com/tandemllm/tandem/nodes/frontend"
	"github.com/tandemllm/tandem/nodes/worker"
	"github.com/tandemllm/tandem/planes/kvtransfer"
	"github.com/tandemllm/tandem/process"
	"github.com/tandemllm/tandem/tokenizer"
)

// Config configures a one-process system.
type Config struct {
	// Config is the frontend node's: --http-addr, --router-mode, the
	// OpenAI server's, dispatch's and the KV router's flags, TLS,
	// --drain-timeout (which also bounds a pool worker's drain), and MTLS,
	// the frontend's end of a loopback gRPC request plane (MTLSWorker).
	// Its Disagg is Disagg.Settings.
	frontend.Config
	Workers      int
	RequestPlane string // "inproc" (default) or "grpc"
	// WorkerIDs names the workers; the default is worker-0, worker-1, ...
	WorkerIDs []string
	// ServedModelName is the model's name on the OpenAI API
	// (--served-model-name). "": the tokenizer's, or for upstream servers
	// the one their /v1/models lists (all of a pool must agree).
	ServedModelName string
	// MTLSWorker, with RequestPlane "grpc" and MTLS, runs the loopback
	// request plane over mutual TLS: the frontend's end presents MTLS (a
	// frontend's certificate), the worker's end MTLSWorker (a worker's),
	// as across processes; it exists to measure what mTLS costs.
	MTLSWorker authn.Files
	// Disagg enables disaggregated prefill (nodes/serve/disagg.go); the zero
	// value is aggregated serving.
	Disagg DisaggConfig
	// VLLMPD makes workers answer vLLM's kv_transfer_params protocol
	// (vllmpd.Host); exclusive with Disagg, which moves KV itself.
	VLLMPD VLLMPDConfig
	// PDPrefillWorkers > 0 puts vLLM's P/D proxy in the router
	// (disagg/vllmpd.Proxy): the factory's engines
	// Workers..Workers+PDPrefillWorkers-1 run the prefill legs, the workers
	// are the decode servers. For upstream vLLM servers (engine/upstream);
	// exclusive with Disagg and VLLMPD.
	PDPrefillWorkers int
}

// DefaultConfig returns the defaults of `tandem serve`.
func DefaultConfig() Config {
	return Config{Config: frontend.DefaultConfig(), Workers: 2, RequestPlane: "inproc"}
}

// VLLMPDConfig makes every worker answer vLLM's P/D protocol.
type VLLMPDConfig = vllmpd.HostConfig

// EngineFactory builds the engine of worker i (0-based).
type EngineFactory func(i int) (engine.Engine, error)

// WorkerInfo describes a started worker.
type WorkerInfo struct {
	ID   string
	Addr string // request-plane address, empty in-process
	Info engine.Info
}

// System is a running one-process Tandem: N worker nodes and one frontend
// node (the same assembly as `tandem worker` and `tandem frontend`) over
// an in-process discovery registry and, by default, the in-process
// transport. The frontend node's fields and methods are the system's:
// Router, Frontend, URL, Addr, Done (nil until Start has started it).
type System struct {
	*frontend.Process
	cfg      Config
	log      *slog.Logger
	Registry *prometheus.Registry
	Board    *health.Board
	Workers  []WorkerInfo

	disc     *discovery.Mem
	model    *tokenizer.Model
	transfer *kvtransfer.Metrics // the transfer nodes' shared series
	pd       *vllmpd.Host        // nil unless VLLMPD is enabled

	mu      sync.Mutex
	routed  []*node   // the routed workers, in start order (Engine(i))
	prefill []*node   // prefill workers (Disagg or PDPrefillWorkers)
	pool    poolState // what runtime workers are built from (pools.go)
}

// node is one worker node of the system.
type node struct {
	id   string
	role discovery.Role
	eng  engine.Engine
	w    *worker.Worker
}

// Start builds and starts the system. On error everything already started
// is stopped.
func Start(cfg Config, model *tokenizer.Model, newEngine EngineFactory, log *slog.Logger) (_ *System, err error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	base := process.New(log, nil, nil)
	s := &System{cfg: cfg, log: log, Registry: base.Registry, Board: base.Board, disc: discovery.NewMem()}
	defer func() {
		if err != nil {
			if s.Process != nil {
				_ = s.Process.Shutdown(context.Background())
			}
			s.stop(context.Background())
		}
	}()
	// One collector gathers the engines' metrics (engine.Metrics).
	_ = s.Registry.Register(engine.Metrics(func() []engine.Engine {
		var engs []engine.Engine
		for _, n := range s.nodes() {
			engs = append(engs, n.eng)
		}
		return engs
	}))
	if cfg.VLLMPD.Enabled {
		if s.pd, err = vllmpd.NewHost(cfg.VLLMPD, s.Board, s.Registry, log); err != nil {
			return nil, fmt.Errorf("serve: %w", err)
		}
	}
	role, ids, prefillN := s.shape(&cfg)
	// Prefill engines come first, with indexes after the routed workers',
	// so seeds and ports never collide.
	for j := range prefillN {
		eng, err := newEngine(cfg.Workers + j)
		if err != nil {
			return nil, fmt.Errorf("serve: prefill-%d: %w", j, err)
		}
		s.prefill = append(s.prefill, &node{id: fmt.Sprintf("prefill-%d", j), role: discovery.RolePrefill, eng: eng})
	}
	var engs []engine.Engine
	for i := range cfg.Workers {
		eng, err := newEngine(i)
		if err != nil {
			return nil, fmt.Errorf("serve: worker %d: %w", i, err)
		}
		engs = append(engs, eng)
		s.routed = append(s.routed, &node{id: ids[i], role: role, eng: eng})
		if model, err = engines.ServedModel(cfg.ServedModelName, model, eng, engs, i); err != nil {
			return nil, err
		}
	}
	s.model = engines.FitContext(model, engs[0])
	for _, n := range s.nodes() {
		if err := s.startNode(n); err != nil {
			return nil, err
		}
	}
	for _, n := range s.routed {
		s.Workers = append(s.Workers, s.workerInfo(n))
	}
	s.pool = poolState{factory: newEngine, next: cfg.Workers, external: engs[0].Info().Kind == "upstream"}
	if err := s.startFrontend(); err != nil {
		return nil, err
	}
	return s, nil
}

// check refuses configurations that cannot run.
func (c *Config) check() error {
	if c.Disagg.DecodeWorkers > 0 && c.Disagg.Enabled() {
		c.Workers = c.Disagg.DecodeWorkers
	}
	switch {
	case c.Workers < 1:
		return fmt.Errorf("serve: need at least one worker, got %d", c.Workers)
	case c.Disagg.Enabled() && c.VLLMPD.Enabled:
		return errors.New("serve: --prefill-workers and the vLLM P/D protocol exclude each other")
	case c.PDPrefillWorkers > 0 && (c.Disagg.Enabled() || c.VLLMPD.Enabled):
		return errors.New("serve: vLLM P/D prefill workers exclude --prefill-workers and the worker side of the vLLM P/D protocol")
	case c.RequestPlane != "inproc" && c.RequestPlane != "grpc" && c.RequestPlane != "":
		return fmt.Errorf("serve: unknown request plane %q (want inproc or grpc)", c.RequestPlane)
	case c.VLLMPD.Enabled && c.RequestPlane == "grpc":
		return errors.New("serve: the vLLM P/D protocol's worker side needs the in-process request plane")
	}
	return nil
}

// shape names the routed workers, their role, and how many prefill workers run.
func (s *System) shape(cfg *Config) (role discovery.Role, ids []string, prefillN int) {
	role = discovery.RoleAggregated
	prefix := "worker"
	switch {
	case cfg.Disagg.Enabled():
		role, prefix, prefillN = discovery.RoleDecode, "decode", cfg.Disagg.PrefillWorkers
		s.transfer = kvtransfer.NewMetrics(s.Registry)
	case cfg.PDPrefillWorkers > 0:
		role, prefillN = discovery.RoleDecode, cfg.PDPrefillWorkers
	}
	for i := range cfg.Workers {
		id := fmt.Sprintf("%s-%d", prefix, i)
		if i < len(cfg.WorkerIDs) {
			id = cfg.WorkerIDs[i]
		}
		ids = append(ids, id)
	}
	return role, ids, prefillN
}

// startNode starts the worker node of n's engine and registers it.
func (s *System) startNode(n *node) error {
	c := s.cfg
	dc := c.Disagg
	wc := worker.DefaultConfig()
	wc.ID, wc.Role, wc.AdvertiseHost, wc.DeregisterDelay, wc.TransferPeers = n.id, string(n.role), "127.0.0.1", 0, worker.PeersAny
	// Loopback ports of one process are not capped.
	wc.ConnLimits, wc.RequestPlaneAddr = connlimit.Limits{}, "127.0.0.1:0"
	wc.KVTransferAddr = cmp.Or(dc.ListenHost, "127.0.0.1") + ":0"
	wc.Transfer = dc.Transfer
	wc.MTLS = c.MTLSWorker
	opts := worker.Options{Registry: s.disc, Board: s.Board, Logger: s.log, Metrics: s.Registry, TransferMetrics: s.transfer,
		InProcess: c.RequestPlane != "grpc"}
	if s.pd != nil {
		opts.Wrap = func(gen engine.Generator) (engine.Generator, error) { return s.pd.Wrap(n.id, n.eng, gen) }
	}
	w, err := worker.Start(context.Background(), wc, n.eng, s.model, opts)
	if err != nil {
		return fmt.Errorf("serve: %s: %w", n.id, err)
	}
	n.w = w
	return nil
}

// startFrontend starts the frontend node over the system's registry and
// waits until it routes to every worker started so far.
func (s *System) startFrontend() error {
	c := s.cfg
	fc := c.Config
	fc.Disagg = c.Disagg.Settings
	fc.Disagg.LegTimeout = cmp.Or(c.Disagg.LegTimeout, c.Disagg.Transfer.Timeout)
	if c.RequestPlane != "grpc" {
		fc.MTLS = authn.Files{}
	}
	if c.VLLMPD.Enabled {
		// A vLLM-compatible worker: its client is the P/D proxy, which
		// builds kv_transfer_params; the worker pulls only from peers it
		// was told to trust (VLLMPDConfig.Peers).
		fc.Frontend.TrustClientKVTransferParams = true
	}
	fe, err := frontend.Start(context.Background(), fc, s.model, frontend.Options{Registry: s.disc, Board: s.Board, Metrics: s.Registry,
		Logger: s.log, OnDecision: c.Disagg.OnDecision, QuietOpenAPI: true})
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	s.Process = fe
	select {
	case <-fe.Synced():
	case <-time.After(time.Minute):
		return errors.New("serve: the frontend never heard of its workers")
	}
	if c.Disagg.Enabled() {
		// The link probes the decode workers started finish before the
		// first request is priced (bounded: a link that cannot be probed
		// now is probed on first use).
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := fe.Disagg.Probed(ctx); err != nil {
			s.log.Warn("KV link probes still running at start-up; they finish in the background", "err", err)
		}
	}
	return nil
}

// workerInfo describes started worker n (its request-plane address only
// over gRPC).
func (s *System) workerInfo(n *node) WorkerInfo {
	wi := WorkerInfo{ID: n.id, Info: n.eng.Info()}
	wi.Info.Model = s.model.Name
	if s.cfg.RequestPlane == "grpc" {
		wi.Addr = n.w.Record().RequestPlane
	}
	return wi
}

// Engine returns the engine of worker i.
func (s *System) Engine(i int) engine.Engine {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.routed[i].eng
}

// Shutdown drains: /health turns 503, the listener stops accepting, and
// in-flight requests get until ctx ends to finish. Then workers stop.
func (s *System) Shutdown(ctx context.Context) error {
	err := s.Process.Shutdown(ctx)
	s.stop(ctx)
	return err
}

// stop stops every worker node (their engines close with them), or closes
// the engines of those never started, then the registry.
func (s *System) stop(ctx context.Context) {
	for _, n := range s.nodes() {
		var err error
		if n.w != nil {
			err = n.w.Shutdown(ctx)
		} else {
			err = n.eng.Close()
		}
		if err != nil {
			s.log.Warn("stopping worker", "worker", n.id, "err", err)
		}
	}
	if s.pd != nil {
		s.pd.Close()
	}
	_ = s.disc.Close()
}

// nodes are the prefill and routed worker nodes.
func (s *System) nodes() []*node {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append(slices.Clone(s.prefill), s.routed...)
}
