package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/tandemllm/tandem/authn"
	"github.com/tandemllm/tandem/disagg"
	"github.com/tandemllm/tandem/disagg/vllmpd"
	"github.com/tandemllm/tandem/dispatch"
	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/httpapi"
	"github.com/tandemllm/tandem/kvevents/follow"
	"github.com/tandemllm/tandem/process"
	"github.com/tandemllm/tandem/requestplane"
	"github.com/tandemllm/tandem/router"
	"github.com/tandemllm/tandem/tokenizer"
)

// Config configures a one-process system.
type Config struct {
	HTTPAddr     string
	Workers      int
	RouterMode   string
	RequestPlane string // "inproc" (default) or "grpc"
	// WorkerIDs names the workers; the default is worker-0, worker-1, ...
	WorkerIDs []string
	// ServedModelName is the model's name on the OpenAI API
	// (--served-model-name). "": the tokenizer's, or for upstream servers
	// the one their /v1/models lists (all of a pool must agree).
	ServedModelName string
	DrainTimeout    time.Duration
	Frontend        httpapi.Config
	// Dispatch is the request's life past admission (retries, migration).
	Dispatch dispatch.Config
	// KV configures the kv and kv-approx router modes.
	KV router.KVConfig
	// TLS serves the OpenAI API over HTTPS (--tls-cert, --tls-key).
	TLS httpapi.TLSFiles
	// MTLS and MTLSWorker, with RequestPlane "grpc", run the loopback
	// request plane over mutual TLS: the frontend's end presents MTLS (a
	// frontend's certificate), the worker's end MTLSWorker (a worker's),
	// as across processes; it exists to measure what mTLS costs.
	MTLS, MTLSWorker authn.Files
	// Disagg enables disaggregated prefill (serve/disagg.go); the zero
	// value is aggregated serving.
	Disagg DisaggConfig
	// VLLMPD makes workers answer vLLM's kv_transfer_params protocol
	// (serve/vllmpd.go); exclusive with Disagg, which moves KV itself.
	VLLMPD VLLMPDConfig
	// PDPrefillWorkers > 0 puts vLLM's P/D proxy in the router
	// (disagg/vllmpd.Proxy, serve/vllmpd.go): the factory's engines
	// Workers..Workers+PDPrefillWorkers-1 run the prefill legs, the workers
	// are the decode servers. For upstream vLLM servers (engine/upstream);
	// exclusive with Disagg and VLLMPD.
	PDPrefillWorkers int
}

// DefaultConfig returns the defaults of `tandem serve`.
func DefaultConfig() Config {
	return Config{
		HTTPAddr: "127.0.0.1:8000", Workers: 2, RouterMode: "round-robin", RequestPlane: "inproc",
		DrainTimeout: 30 * time.Second, Frontend: httpapi.DefaultConfig(), Dispatch: dispatch.DefaultConfig(),
	}
}

// EngineFactory builds the engine of worker i (0-based).
type EngineFactory func(i int) (engine.Engine, error)

// WorkerInfo describes a started worker.
type WorkerInfo struct {
	ID   string
	Addr string // request-plane address, empty in-process
	Info engine.Info
}

// System is a running one-process Tandem.
type System struct {
	cfg      Config
	log      *slog.Logger
	Registry *prometheus.Registry
	Board    *health.Board
	Router   *router.Router
	Frontend *httpapi.Server
	Workers  []WorkerInfo

	http    *http.Server
	lis     net.Listener
	scheme  string
	served  chan error
	engines []engine.Engine
	kv      *router.KV // the kv policy, when the router mode is kv or kv-approx
	grpcs   []*requestplane.Server
	clients []*requestplane.Client
	dis     *disaggState    // nil unless Disagg is enabled
	pd      *vllmpdState    // nil unless VLLMPD is enabled
	proxy   *vllmpd.Proxy   // nil unless PDPrefillWorkers > 0
	pdPre   []engine.Engine // the proxy's prefill engines
	pdIDs   []string        // and their worker ids
	pool    *poolState      // the routed workers, resizable at runtime (serve/pools.go)
}

// eventSource is implemented by engines that publish KV events over ZMQ.
type eventSource interface {
	KVEventsEndpoint() string
	KVEventsReplayEndpoint() string
}

// Start builds and starts the system. On error everything already started
// is stopped.
func Start(cfg Config, model *tokenizer.Model, newEngine EngineFactory, log *slog.Logger) (_ *System, err error) {
	if cfg.Workers < 1 {
		return nil, fmt.Errorf("serve: need at least one worker, got %d", cfg.Workers)
	}
	base := process.New(log, nil, nil)
	reg := base.Registry
	s := &System{cfg: cfg, log: log, Registry: reg, served: make(chan error, 1)}
	defer func() {
		if err != nil {
			s.stopWorkers(context.Background())
		}
	}()
	s.Board = base.Board
	kvcfg := cfg.KV
	kvcfg.Board, kvcfg.Logger, kvcfg.Registerer = s.Board, log, reg
	if cfg.RouterMode == "kv" { // the policy follows its workers' KV event streams
		fol, err := follow.New(context.Background(), follow.Config{Topic: kvcfg.Topic, Bind: kvcfg.Bind, BindAllow: kvcfg.BindAllow,
			ReplayTimeout: kvcfg.ReplayTimeout, DialTimeout: kvcfg.DialTimeout, Logger: log, Registerer: reg})
		if err != nil {
			return nil, err
		}
		kvcfg.Streams = fol
	}
	policy, err := router.NewPolicy(context.Background(), cfg.RouterMode, kvcfg)
	if err != nil {
		return nil, err
	}
	s.kv, _ = policy.(*router.KV)
	s.Router = router.New(policy, reg)
	fc := cfg.Frontend
	if cfg.VLLMPD.Enabled {
		// A vLLM-compatible worker: its client is the P/D proxy, which
		// builds kv_transfer_params; the worker pulls only from peers it
		// was told to trust (VLLMPDConfig.Peers).
		fc.TrustClientKVTransferParams = true
	}
	s.Frontend = httpapi.New(fc, dispatch.New(cfg.Dispatch, s.Router, s.Board, reg, log), s.Board, reg, log)

	if cfg.Disagg.Enabled() && cfg.VLLMPD.Enabled {
		return nil, errors.New("serve: --prefill-workers and the vLLM P/D protocol exclude each other")
	}
	if cfg.PDPrefillWorkers > 0 && (cfg.Disagg.Enabled() || cfg.VLLMPD.Enabled) {
		return nil, errors.New("serve: vLLM P/D prefill workers exclude --prefill-workers and the worker side of the vLLM P/D protocol")
	}
	if cfg.Disagg.Enabled() {
		if err := s.startDisagg(&cfg, newEngine); err != nil {
			return nil, err
		}
	}
	if cfg.PDPrefillWorkers > 0 {
		if err := s.startProxy(cfg, newEngine); err != nil {
			return nil, err
		}
	}
	if pw := s.prefillHealth(model.Name); len(pw) > 0 {
		s.Frontend.SetPrefillWorkers(func() []httpapi.PrefillWorker { return pw })
	}
	for i := 0; i < cfg.Workers; i++ {
		eng, err := newEngine(i)
		if err != nil {
			return nil, fmt.Errorf("serve: worker %d: %w", i, err)
		}
		s.engines = append(s.engines, eng)
		if c, ok := eng.(engine.MetricsCollector); ok {
			if err := reg.Register(unchecked{c.Collector()}); err != nil {
				return nil, fmt.Errorf("serve: worker %d metrics: %w", i, err)
			}
		}
		info := eng.Info()
		if model, err = servedModel(cfg.ServedModelName, model, eng, s.engines[0], i); err != nil {
			return nil, err
		}
		if i == 0 {
			// A tokenizer directory may not state the context length
			// (llama2.c has none); the engine knows it.
			if model.ContextLength == 0 || (info.ContextLength > 0 && info.ContextLength < model.ContextLength) {
				m := *model
				m.ContextLength = info.ContextLength
				model = &m
			}
			s.Frontend.AddModel(model)
		}
		info.Model = model.Name
		w := WorkerInfo{ID: fmt.Sprintf("worker-%d", i), Info: info}
		if i < len(cfg.WorkerIDs) {
			w.ID = cfg.WorkerIDs[i]
		}
		health.Attach(eng, s.Board, w.ID)
		gen := engine.Generator(eng)
		if cfg.RequestPlane == "grpc" {
			if gen, w.Addr, err = s.serveGRPC(eng, model.Tokenizer.VocabSize()); err != nil {
				return nil, err
			}
		} else if cfg.RequestPlane != "inproc" && cfg.RequestPlane != "" {
			return nil, fmt.Errorf("serve: unknown request plane %q (want inproc or grpc)", cfg.RequestPlane)
		}
		if s.dis != nil {
			if gen, err = s.wrapDecode(w.ID, eng, gen); err != nil {
				return nil, err
			}
		}
		if cfg.VLLMPD.Enabled {
			if gen, err = s.wrapVLLMPD(w.ID, eng, gen); err != nil {
				return nil, err
			}
		}
		if s.proxy != nil && cfg.Disagg.Mode != string(disagg.Never) {
			gen = s.proxy.Wrap(w.ID, gen, info.BlockSize)
		}
		gen = s.trackWorker(w.ID, eng, gen) // serve/pools.go: removal drains
		s.Workers = append(s.Workers, w)
		if src, ok := eng.(eventSource); ok && s.kv != nil && src.KVEventsEndpoint() != "" {
			// Subscribe before the router may pick the worker: until its
			// stream is connected the policy tracks it by approximation, so
			// even the first requests are routed on what it holds. A worker
			// without an endpoint is never subscribed: the policy routes it
			// by approximation, and raises kv_events_missing once it serves
			// full blocks, in kv mode.
			if t, ok := eng.(engine.ReplayTokener); ok {
				s.kv.SetReplayToken(w.ID, t.KVEventsReplayToken())
			}
			if err := s.kv.AddWorker(w.ID, src.KVEventsEndpoint(), src.KVEventsReplayEndpoint(), info.BlockSize); err != nil {
				return nil, fmt.Errorf("serve: worker %s: %w", w.ID, err)
			}
		}
		timing, _ := eng.(engine.PrefillEstimator)
		queue, _ := eng.(engine.QueueReporter)
		s.Router.AddWorker(router.Worker{ID: w.ID, Model: model.Name, Gen: gen, Info: info, Timing: timing, Queue: queue})
	}
	s.setPoolFactory(newEngine, model, cfg.Workers)

	s.waitProbes()
	tc, err := httpapi.ServerTLS(cfg.TLS)
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	s.lis, err = net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return nil, fmt.Errorf("serve: listen %s: %w", cfg.HTTPAddr, err)
	}
	var lis net.Listener
	s.http, lis = s.Frontend.NewHTTPServer(s.lis)
	s.scheme = "http://"
	if tc != nil {
		s.scheme = "https://"
	}
	go func() { s.served <- httpapi.Serve(s.http, lis, tc) }()
	return s, nil
}

// servedModel names the model: --served-model-name if given, else for an
// upstream server the name it serves (a user asks for the model the server
// lists, not Tandem's tokenizer's), and every upstream of the pool must
// serve the first one's model.
func servedModel(name string, model *tokenizer.Model, eng, first engine.Engine, i int) (*tokenizer.Model, error) {
	info := eng.Info()
	if info.Kind == "upstream" && i > 0 && info.Model != first.Info().Model {
		url := func(e engine.Engine) string {
			if u, ok := e.(engine.URLReporter); ok {
				return u.URL()
			}
			return "?"
		}
		return nil, fmt.Errorf("serve: upstream %s serves model %q but upstream %s serves %q: one pool serves one model (set --upstream-model to pick one)",
			url(first), first.Info().Model, url(eng), info.Model)
	}
	if i > 0 {
		return model, nil
	}
	if name == "" && info.Kind == "upstream" {
		name = info.Model
	}
	if name == "" || name == model.Name {
		return model, nil
	}
	m := *model
	m.Name = name
	return &m, nil
}

func (s *System) serveGRPC(eng engine.Engine, vocab int) (engine.Generator, string, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", fmt.Errorf("serve: request plane listen: %w", err)
	}
	var sopts []grpc.ServerOption
	var copts []grpc.DialOption
	if s.cfg.MTLS.Enabled() {
		cli, err := authn.Load(s.cfg.MTLS)
		if err != nil {
			return nil, "", fmt.Errorf("serve: %w", err)
		}
		srv, err := authn.Load(s.cfg.MTLSWorker)
		if err != nil {
			return nil, "", fmt.Errorf("serve: %w", err)
		}
		sopts = append(sopts, grpc.Creds(credentials.NewTLS(srv.Server(authn.RoleFrontend))))
		copts = append(copts, grpc.WithTransportCredentials(credentials.NewTLS(cli.Client(authn.RoleWorker))))
	}
	srv := requestplane.NewServer(eng, nil, vocab, sopts...)
	srv.SetServing(true)
	s.grpcs = append(s.grpcs, srv)
	go func() { _ = srv.Serve(lis) }()
	c, err := requestplane.Dial(lis.Addr().String(), copts...)
	if err != nil {
		return nil, "", err
	}
	s.clients = append(s.clients, c)
	return c, lis.Addr().String(), nil
}

// Engine returns the engine of worker i.
func (s *System) Engine(i int) engine.Engine { return s.engines[i] }

// URL is the frontend's base URL.
func (s *System) URL() string { return s.scheme + s.lis.Addr().String() }

// Addr is the frontend's listening address.
func (s *System) Addr() net.Addr { return s.lis.Addr() }

// Done yields the HTTP server's exit error once it stops serving.
func (s *System) Done() <-chan error { return s.served }

// Shutdown drains: /health turns 503, the listener stops accepting, and
// in-flight requests get until ctx ends to finish. Then workers stop.
func (s *System) Shutdown(ctx context.Context) error {
	s.Frontend.SetDraining()
	err := process.ShutdownHTTP(ctx, s.http, s.log)
	s.stopWorkers(ctx)
	return err
}

func (s *System) stopWorkers(ctx context.Context) {
	if s.kv != nil {
		s.kv.Close()
	}
	for _, c := range s.clients {
		_ = c.Close()
	}
	s.stopDisagg()
	s.stopVLLMPD()
	for _, e := range s.pdPre {
		if err := e.Close(); err != nil {
			s.log.Warn("closing prefill engine", "err", err)
		}
	}
	for _, g := range s.grpcs {
		stopped := make(chan struct{})
		go func() { g.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-ctx.Done():
			g.Stop()
		}
	}
	s.closePool()
	for _, e := range s.engines {
		if err := e.Close(); err != nil {
			s.log.Warn("closing engine", "err", err)
		}
	}
}

// unchecked registers an engine's collector without its descriptors: every
// worker of a process exports the same vllm: metric families, told apart by
// their engine label, which a checked registration would refuse as
// duplicates.
type unchecked struct{ prometheus.Collector }

func (unchecked) Describe(chan<- *prometheus.Desc) {}
