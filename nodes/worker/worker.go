package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/tandemllm/tandem/authn"
	"github.com/tandemllm/tandem/control/discovery"
	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/internal/connlimit"
	"github.com/tandemllm/tandem/planes/eventplane"
	"github.com/tandemllm/tandem/planes/kvevents"
	"github.com/tandemllm/tandem/planes/kvtransfer"
	"github.com/tandemllm/tandem/planes/requestplane"
	"github.com/tandemllm/tandem/process"
	"github.com/tandemllm/tandem/tokenizer"
)

// Config configures one worker process. Engine settings are not here: the
// caller builds the engine.
type Config struct {
	// ID names the worker in the fleet (--id); it must be unique.
	ID string
	// Role is aggregated, prefill or decode (--role).
	Role string
	// RequestPlaneAddr is where the gRPC request plane listens (--rp-addr);
	// port 0 picks a free one.
	RequestPlaneAddr string
	// AdvertiseHost replaces a wildcard listen host in the addresses the
	// record publishes (--advertise-host; default: the host name).
	AdvertiseHost string
	// MetricsAddr serves /metrics and /health ("" serves nothing).
	MetricsAddr string
	// KVEventsFormat is the encoding the engine publishes ("map" or
	// "array"), copied into the record for subscribers.
	KVEventsFormat string
	// DeregisterDelay is how long the worker keeps serving new requests
	// after revoking its record, so that watchers hear of it first (a
	// request refused meanwhile is retried elsewhere, but costs a retry).
	DeregisterDelay time.Duration
	// DrainTimeout bounds how long in-flight requests may take to finish.
	DrainTimeout time.Duration
	// EventPlane selects how KV events reach routers: zmq (routers dial
	// the engine's PUB socket, published in the record) or nats (the
	// worker relays its batches to the model's subject as well).
	EventPlane eventplane.Config
	// Version is the Tandem version published in the record.
	Version string
	// KVConfig is the deployment's KV configuration fingerprint
	// (--kv-config-fingerprint), published in the record's KV layout.
	KVConfig string
	// KVTransferAddr is where a decode worker's KV transfer node receives
	// blocks (--kv-transfer-addr; port 0 picks one). Prefill workers only
	// send, and aggregated ones take no part.
	KVTransferAddr string
	// Transfer configures the KV transfer node (--transfer-budget,
	// --transfer-timeout).
	Transfer kvtransfer.Settings
	// MTLS is the cluster identity (--mtls-ca, --mtls-cert, --mtls-key):
	// when set, the request plane admits only frontends' certificates and
	// the KV transfer plane only workers', both signed by the cluster CA.
	MTLS authn.Files
	// TransferPeers is where a prefill worker may send KV and probes:
	// "discovery" (the default: only transfer addresses published in
	// discovery) or "any" (whatever address the frontend names).
	TransferPeers string
	// ConnLimits bound every port the worker listens on (the request
	// plane, the KV transfer node, the metrics port): --conn-max,
	// --conn-max-per-source, --conn-handshake-timeout, --conn-idle-timeout.
	ConnLimits connlimit.Limits
}

// DefaultID is the worker id when --id is not given: under the kube
// discovery backend the pod's name (POD_NAME: the backend keys records by
// pod), else host-pid.
func DefaultID(kube bool) (string, error) {
	if id := os.Getenv("POD_NAME"); kube && id != "" {
		return id, nil
	}
	host, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("--id: %w", err)
	}
	return host + "-" + strconv.Itoa(os.Getpid()), nil
}

// Transfer destination policies (Config.TransferPeers).
const (
	PeersDiscovery = "discovery"
	PeersAny       = "any"
)

// DefaultConfig returns the flag defaults.
func DefaultConfig() Config {
	return Config{
		ID: "worker-0", Role: string(discovery.RoleAggregated), RequestPlaneAddr: "127.0.0.1:0", KVTransferAddr: "127.0.0.1:0",
		KVEventsFormat: "map", DeregisterDelay: 500 * time.Millisecond, DrainTimeout: 30 * time.Second,
		EventPlane: eventplane.DefaultConfig(), ConnLimits: connlimit.Defaults(),
	}
}

// Options are a worker's collaborators.
type Options struct {
	Registry discovery.Registry
	// Board receives diagnostics; nil creates one.
	Board  *health.Board
	Logger *slog.Logger
	// Metrics is the registry of the worker's own series (KV transfer,
	// listeners) and, with MetricsAddr, what /metrics serves; nil creates
	// one. Workers of one process share the process's.
	Metrics *prometheus.Registry
	// TransferMetrics, if set, are the KV transfer series the process's
	// workers share on one registry (nil: the worker's own on Metrics).
	TransferMetrics *kvtransfer.Metrics
	// InProcess picks the in-process transport: no listener, the worker is
	// served under an inproc:// address (requestplane.RegisterLocal) that
	// only a frontend node of this process resolves. Otherwise the gRPC
	// request plane listens on RequestPlaneAddr.
	InProcess bool
	// Wrap, if set, wraps what the in-process transport serves (the
	// engine), e.g. to answer vLLM's P/D protocol.
	Wrap func(gen engine.Generator) (engine.Generator, error)
}

// Worker is a running worker process's serving side.
type Worker struct {
	cfg   Config
	log   *slog.Logger
	eng   engine.Engine
	disc  discovery.Registry
	board *health.Board

	mu       sync.Mutex // guards rec and lease (followInfo replaces them)
	rec      discovery.Record
	lease    discovery.Lease
	infoStop context.CancelFunc

	grpc     *requestplane.Server      // nil in process
	local    *requestplane.LocalServer // nil on gRPC
	served   chan error
	reg      *prometheus.Registry
	metrics  *http.Server
	node     *kvtransfer.Node // nil for aggregated workers
	connM    *connlimit.Metrics
	connOnce sync.Once

	tls       *authn.Cluster
	watchStop context.CancelFunc
	relay     *eventplane.Relaying

	stopOnce  sync.Once
	stopErr   error
	deregOnce sync.Once
	deregErr  error
}

// Start serves eng on the request plane and registers it. model is the
// tokenizer the engine's tokens belong to (its fingerprint goes into the
// record's KV layout). On error nothing is left running and eng is not
// closed.
func Start(ctx context.Context, cfg Config, eng engine.Engine, model *tokenizer.Model, opts Options) (_ *Worker, err error) {
	role, err := discovery.ParseRole(cfg.Role)
	if err != nil {
		return nil, err
	}
	if !discovery.ValidID(cfg.ID) {
		return nil, fmt.Errorf("worker: invalid id %q", cfg.ID)
	}
	if err := cfg.EventPlane.Validate(); err != nil {
		return nil, err
	}
	if opts.Registry == nil {
		return nil, errors.New("worker: no discovery registry")
	}
	switch cfg.TransferPeers {
	case "", PeersDiscovery, PeersAny:
	default:
		return nil, fmt.Errorf("worker: transfer peers %q: want discovery or any", cfg.TransferPeers)
	}
	cluster, err := authn.LoadAs(cfg.MTLS, authn.RoleWorker)
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	// The board publishes on the worker's /metrics (--metrics-addr) unless
	// the caller brought its own.
	base := process.New(opts.Logger, opts.Metrics, opts.Board)
	log, board := base.Log, base.Board
	w := &Worker{cfg: cfg, log: log.With("component", "worker", "worker", cfg.ID), eng: eng, disc: opts.Registry, board: board,
		served: make(chan error, 1), reg: base.Registry, tls: cluster}
	host := cfg.AdvertiseHost
	if host == "" {
		if host, err = os.Hostname(); err != nil {
			return nil, fmt.Errorf("worker: host name: %w", err)
		}
	}
	// An upstream server's reachability shows on the worker's /health.
	health.Attach(eng, board, cfg.ID)
	side, err := w.startTransfer(role, opts.TransferMetrics)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			w.stopPlane()
			w.release()
		}
	}()
	var rpAddr string
	if opts.InProcess {
		rpAddr, err = w.serveLocal(side, opts.Wrap)
	} else {
		rpAddr, err = w.serveGRPC(side, model.Tokenizer.VocabSize())
	}
	if err != nil {
		return nil, err
	}
	metricsAddr := ""
	if cfg.MetricsAddr != "" {
		if metricsAddr, err = w.serveMetrics(cfg.MetricsAddr); err != nil {
			return nil, err
		}
		metricsAddr = discovery.Advertise(metricsAddr, host)
	}
	w.rec = discovery.RecordOf(cfg.ID, eng, model, cfg.KVEventsFormat)
	w.rec.Role, w.rec.Version, w.rec.KVLayout.Config = role, cfg.Version, cfg.KVConfig
	w.rec.RequestPlane, w.rec.MetricsAddr = rpAddr, metricsAddr
	if !opts.InProcess {
		// A process's own in-process workers are not planes of their own
		// (tandem serve never raised these).
		w.raiseOpenPlanes(rpAddr, metricsAddr)
		w.rec.RequestPlane = discovery.Advertise(rpAddr, host)
	}
	if w.node != nil {
		w.rec.KVTransfer = discovery.KVTransfer{Addr: discovery.Advertise(w.node.Addr(), host), BlockBytes: eng.(engine.KVPort).KVBlockBytes()}
	} else if p := discovery.TransferProtocol(eng); p != "" && role != discovery.RoleAggregated {
		w.rec.KVTransfer.Protocol = p
	}
	w.rec.KVEvents.Endpoint = discovery.AdvertiseURL(w.rec.KVEvents.Endpoint, host)
	w.rec.KVEvents.ReplayEndpoint = discovery.AdvertiseURL(w.rec.KVEvents.ReplayEndpoint, host)
	if cfg.EventPlane.Plane == "nats" && w.rec.KVEvents.Endpoint != "" {
		if err := w.startRelay(ctx, log); err != nil {
			return nil, err
		}
		w.rec.KVEvents.Subject = w.relay.Subject()
	}
	if w.lease, err = w.disc.Register(ctx, w.rec); err != nil {
		return nil, fmt.Errorf("worker: register: %w", err)
	}
	// Ready: grpc.health.v1 on the request plane says SERVING from here
	// until the drain starts.
	if w.grpc != nil {
		w.grpc.SetServing(true)
	}
	if n, ok := eng.(engine.InfoNotifier); ok {
		ictx, stop := context.WithCancel(context.Background())
		w.infoStop = stop
		go w.followInfo(ictx, n)
	}
	w.log.Info("registered", "role", w.rec.Role, "request_plane", w.rec.RequestPlane, "kv_events", w.rec.KVEvents.Endpoint, "kv_transfer", w.rec.KVTransfer.Addr,
		"kv_layout", w.rec.KVLayout.Fingerprint(), "capacity_blocks", w.rec.CapacityBlocks)
	return w, nil
}

// serveLocal serves the worker in process: a drain gate in front of the
// engine (or of what opts.Wrap made of it) under an inproc:// address.
func (w *Worker) serveLocal(side kvtransfer.Side, wrap func(engine.Generator) (engine.Generator, error)) (string, error) {
	gen := engine.Generator(w.eng)
	if wrap != nil {
		var err error
		if gen, err = wrap(gen); err != nil {
			return "", err
		}
	}
	w.local = requestplane.ServeLocal(w.cfg.ID, gen, side, w.eng)
	return w.local.Addr(), nil
}

// serveGRPC serves the worker on the gRPC request plane (not yet
// SERVING: Start says so once the record is published).
func (w *Worker) serveGRPC(side kvtransfer.Side, vocab int) (string, error) {
	cfg, board := w.cfg, w.board
	lis, err := net.Listen("tcp", cfg.RequestPlaneAddr)
	if err != nil {
		return "", fmt.Errorf("worker: request plane listen %s: %w", cfg.RequestPlaneAddr, err)
	}
	rpLim, gopts := cfg.ConnLimits, requestplane.LimitOptions(cfg.ConnLimits)
	rpLim.Handshake = 0 // gRPC's own
	lis = connlimit.Wrap(lis, PlaneRequest, rpLim, board, w.connMetrics(), w.log)
	if w.tls != nil {
		// Only frontends call a worker: Generate, and the disaggregation
		// calls that make it send or hand out its transfer key.
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(w.tls.Server(authn.RoleFrontend))))
	}
	w.grpc = requestplane.NewServer(w.eng, side, vocab, gopts...)
	health.Attach(w.grpc, board, cfg.ID)
	go func() { w.served <- w.grpc.Serve(lis) }()
	return lis.Addr().String(), nil
}

// stopPlane stops the request plane at once (a failed start).
func (w *Worker) stopPlane() {
	if w.grpc != nil {
		w.grpc.Stop()
	}
	if w.local != nil {
		w.local.Stop()
	}
}

// raiseOpenPlanes raises plane_unauthenticated for each listener bound
// beyond loopback that serves anyone: the request plane, the transfer
// node and the metrics port without mTLS, and a KV event socket whose
// events carry token ids (ZMQ has no authentication; hashes-only events
// give no prompt away).
func (w *Worker) raiseOpenPlanes(rp, metrics string) {
	if w.tls == nil {
		const noMTLS = "listens beyond this host without --mtls-*: anyone who reaches the port is served"
		process.WarnExposed(w.board, "request-plane", rp, noMTLS)
		process.WarnExposed(w.board, "metrics", metrics, noMTLS)
		if w.node != nil {
			process.WarnExposed(w.board, "kv-transfer", w.node.Addr(), noMTLS)
		}
	}
	if te, ok := w.eng.(engine.TokenIDPublisher); ok && te.KVEventsTokenIDs() {
		process.WarnExposed(w.board, "kv-events", strings.TrimPrefix(te.KVEventsEndpoint(), "tcp://"),
			"the KV event socket listens beyond this host and its events carry token ids: any subscriber reads the prompts (--kv-events-token-ids=false, a loopback endpoint, or --event-plane nats)")
	}
}

// startRelay relays the engine's events to the event plane (NATS).
func (w *Worker) startRelay(ctx context.Context, log *slog.Logger) (err error) {
	format, err := kvevents.ParseFormat(w.rec.KVEvents.Format)
	if err != nil {
		format = kvevents.FormatMap
	}
	ee, _ := w.eng.(engine.KVEventsPublisher)
	re, _ := w.eng.(engine.KVEventsReplayer)
	rc := eventplane.RelayConfig{Worker: w.cfg.ID, Model: w.rec.Model, Endpoint: ee.KVEventsEndpoint(), ReplayToken: engine.ReplayToken(w.eng),
		Format: format, Board: w.board, Logger: log}
	if re != nil {
		rc.ReplayEndpoint = re.KVEventsReplayEndpoint()
	}
	if w.relay, err = eventplane.StartRelay(ctx, w.cfg.EventPlane, rc); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	return nil
}

// release stops the event relay, the KV transfer node and the metrics
// listener (Shutdown, or a failed Start).
func (w *Worker) release() {
	if w.relay != nil {
		w.relay.Close()
	}
	w.closeNode()
	if w.metrics != nil {
		_ = w.metrics.Close()
	}
}

// startTransfer gives prefill and decode workers their transfer-plane node
// (a decode worker's listens) and returns the worker's part in
// disaggregation, served on the request plane; nil for aggregated workers.
func (w *Worker) startTransfer(role discovery.Role, metrics *kvtransfer.Metrics) (kvtransfer.Side, error) {
	if role == discovery.RoleAggregated {
		return nil, nil
	}
	if discovery.TransferProtocol(w.eng) != "" {
		// A vLLM server moves its own KV; the frontend drives the
		// protocol through the requests (kv_transfer_params).
		return nil, nil
	}
	port, ok := w.eng.(engine.KVPort)
	if !ok {
		return nil, fmt.Errorf("worker: role %s needs an engine that can move KV; the %s engine cannot", role, w.eng.Info().Kind)
	}
	var allow func(context.Context, string) error
	if role == discovery.RolePrefill && w.cfg.TransferPeers != PeersAny {
		ctx, cancel := context.WithCancel(context.Background())
		w.watchStop = cancel
		allow = discovery.WatchTransferAddrs(ctx, w.disc, w.log).Allow
	}
	if metrics == nil {
		metrics = kvtransfer.NewMetrics(w.reg)
	}
	n, err := kvtransfer.NewNode(kvtransfer.Config{ID: w.cfg.ID, Port: port, Budget: kvtransfer.NewBudget(w.cfg.Transfer.Budget),
		Timeout: w.cfg.Transfer.Timeout, Board: w.board, Metrics: metrics, Logger: w.log,
		TLS: w.tls, RequireToken: true, AllowPeer: allow, Dial: w.cfg.Transfer.Dial, Listen: w.cfg.Transfer.Listen,
		ConnLimits: w.cfg.ConnLimits, ConnMetrics: w.connMetrics()})
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	w.node = n
	if role == discovery.RoleDecode {
		if err := n.Listen(w.cfg.KVTransferAddr); err != nil {
			w.closeNode()
			return nil, fmt.Errorf("worker: %w", err)
		}
	}
	side, err := kvtransfer.NewLocal(kvtransfer.Worker{ID: w.cfg.ID, Engine: w.eng, Node: n})
	if err != nil {
		w.closeNode()
		return nil, fmt.Errorf("worker: %w", err)
	}
	return side, nil
}

func (w *Worker) closeNode() {
	if w.watchStop != nil {
		w.watchStop()
	}
	if w.node != nil {
		_ = w.node.Close()
	}
}

func (w *Worker) serveMetrics(addr string) (string, error) {
	reg := w.reg // process.NewRegistry's: the Go and process collectors are on it
	if c, ok := w.eng.(engine.MetricsCollector); ok {
		if err := reg.Register(c.Collector()); err != nil {
			return "", fmt.Errorf("worker: engine metrics: %w", err)
		}
	}
	raw, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("worker: metrics listen %s: %w", addr, err)
	}
	lis := connlimit.Wrap(raw, PlaneMetrics, w.cfg.ConnLimits, w.board, w.connMetrics(), w.log)
	// /health: the worker's own degraded states (discovery or NATS
	// unreachable, a relay losing batches), for an operator or a probe.
	ops := process.Ops{Gatherer: reg, Board: w.board, Fields: map[string]any{"worker": w.cfg.ID}, ConnState: connlimit.EstablishOnRequest, Logger: w.log}
	if w.tls != nil {
		// With the cluster identity the metrics port is HTTPS and admits
		// only monitors' certificates (tandem certs issue --role monitor)
		// and frontends'.
		ops.TLS = w.tls.Server(authn.RoleMonitor, authn.RoleFrontend)
	}
	w.metrics = ops.Serve(lis)
	return lis.Addr().String(), nil
}

// Planes of the worker's listeners (connlimit's metric label and
// diagnostic subject).
const (
	PlaneRequest = "request-plane"
	PlaneMetrics = "metrics"
)

// connMetrics are the listeners' series on the worker's registry.
func (w *Worker) connMetrics() *connlimit.Metrics {
	w.connOnce.Do(func() { w.connM = connlimit.NewMetrics(w.reg) })
	return w.connM
}

// followInfo publishes the engine's new context length when its Info
// changes (an upstream server that answered after the worker started), so
// every frontend's /v1/models and length check follow the server: the
// record is registered again under a new lease, then the stale one goes.
func (w *Worker) followInfo(ctx context.Context, n engine.InfoNotifier) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.InfoChanged():
		}
		w.mu.Lock()
		rec := w.rec
		rec.ContextLength = w.eng.Info().ContextLength
		if rec != w.rec {
			lease, err := w.disc.Register(ctx, rec)
			if err != nil {
				w.log.Warn("cannot publish the engine's new context length; frontends keep the old one", "context_length", rec.ContextLength, "err", err)
			} else if err := w.lease.Revoke(ctx); err != nil {
				w.log.Warn("revoking the record's previous lease", "err", err)
			}
			if err == nil {
				w.rec, w.lease = rec, lease
				w.log.Info("record registered again with the engine's new context length", "context_length", rec.ContextLength)
			}
		}
		w.mu.Unlock()
	}
}

// Record returns the published record.
func (w *Worker) Record() discovery.Record {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rec
}

// Done yields the request plane's exit error if it stops by itself.
func (w *Worker) Done() <-chan error { return w.served }

// Shutdown drains: revoke the record, wait DeregisterDelay, stop taking
// streams and let in-flight ones finish until ctx ends (then cut them),
// close the engine. The engine is closed even when an earlier step fails.
func (w *Worker) Shutdown(ctx context.Context) error {
	w.stopOnce.Do(func() { w.stopErr = w.shutdown(ctx) })
	return w.stopErr
}

// Deregister revokes the record, so frontends stop routing here while the
// worker still serves (Shutdown begins with it; once is enough).
func (w *Worker) Deregister(ctx context.Context) error {
	w.deregOnce.Do(func() {
		if w.infoStop != nil {
			w.infoStop() // no registration after this one's revocation
		}
		// Health checks hear of the drain first, with the registry.
		if w.grpc != nil {
			w.grpc.SetServing(false)
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if err := w.lease.Revoke(ctx); err != nil {
			w.deregErr = fmt.Errorf("worker: deregister: %w", err)
		}
		w.log.Info("deregistered; draining")
	})
	return w.deregErr
}

func (w *Worker) shutdown(ctx context.Context) error {
	var errs []error
	if err := w.Deregister(ctx); err != nil {
		errs = append(errs, err)
	}
	if w.cfg.DeregisterDelay > 0 {
		t := time.NewTimer(w.cfg.DeregisterDelay)
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	if w.local != nil {
		start := time.Now()
		if cut := w.local.Drain(ctx); cut > 0 {
			// Logged, not raised: the worker is gone from its frontend's
			// board with its record.
			w.log.Warn("worker drain timed out: closing it with streams in flight", "diagnostic_code", process.DiagDrainTimeout,
				"streams", cut, "waited", time.Since(start))
		}
	} else {
		stopped := make(chan struct{})
		go func() { w.grpc.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-ctx.Done():
			w.board.Raise(process.DiagDrainTimeout, w.cfg.ID, health.Warn, "in-flight requests outlived the drain timeout and were cut")
			w.grpc.Stop()
			<-stopped
			errs = append(errs, fmt.Errorf("worker: drain: %w", ctx.Err()))
		}
	}
	w.release()
	if err := w.eng.Close(); err != nil {
		errs = append(errs, fmt.Errorf("worker: close engine: %w", err))
	}
	return errors.Join(errs...)
}
