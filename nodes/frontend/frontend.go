package frontend

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemllm/tandem/authn"
	"github.com/tandemllm/tandem/control/discovery"
	"github.com/tandemllm/tandem/disagg"
	"github.com/tandemllm/tandem/disagg/vllmpd"
	"github.com/tandemllm/tandem/dispatch"
	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/httpapi"
	"github.com/tandemllm/tandem/planes/eventplane"
	"github.com/tandemllm/tandem/planes/kvevents/follow"
	"github.com/tandemllm/tandem/planes/requestplane"
	"github.com/tandemllm/tandem/process"
	"github.com/tandemllm/tandem/router"
	"github.com/tandemllm/tandem/tokenizer"
)

// Config configures a frontend process.
type Config struct {
	// HTTPAddr is the OpenAI API's listen address (--http-addr).
	HTTPAddr string
	// RouterMode is one of router.Modes (--router-mode).
	RouterMode string
	// KV configures the kv and kv-approx modes; its Board, Logger and
	// Registerer are the frontend's.
	KV       router.KVConfig
	Frontend httpapi.Config
	// Dispatch is the request's life past admission (retries, migration).
	Dispatch dispatch.Config
	// EventPlane selects how the kv mode receives KV events: zmq (dial
	// each worker's PUB socket) or nats (subscribe to each model's
	// subject).
	EventPlane eventplane.Config
	// ShareLoad, with the nats event plane, publishes the load this
	// frontend routes and counts its peers' (router replicas behind one
	// load balancer), so that replicas see the same fleet load.
	ShareLoad bool
	// DrainTimeout bounds in-flight requests on shutdown.
	DrainTimeout time.Duration
	// Disagg is how requests to decode workers use the prefill workers.
	Disagg disagg.Settings
	// TLS serves the OpenAI API over HTTPS (--tls-cert, --tls-key).
	TLS httpapi.TLSFiles
	// MTLS is the cluster identity (--mtls-ca, --mtls-cert, --mtls-key):
	// workers' request planes are dialled over mutual TLS with it, and
	// only servers with a worker's certificate of the cluster CA are
	// trusted.
	MTLS authn.Files
}

// DefaultConfig returns the flag defaults.
func DefaultConfig() Config {
	return Config{HTTPAddr: "127.0.0.1:8000", RouterMode: "round-robin", Frontend: httpapi.DefaultConfig(), Dispatch: dispatch.DefaultConfig(),
		EventPlane: eventplane.DefaultConfig(), ShareLoad: true, DrainTimeout: 30 * time.Second, Disagg: disagg.DefaultSettings()}
}

// Diagnostic codes raised by the frontend about workers it refuses (with
// discovery.Refuse's: discovery.DiagKVLayoutMismatch, DiagModelUnserved,
// DiagTokenizer).
const (
	DiagWorkerRefused = "worker_refused"
	// DiagNoTransferAddr: a decode worker publishes no KV transfer
	// address, so it prefills every prompt itself.
	DiagNoTransferAddr = "disagg_no_transfer_addr"
	// DiagNoPrefill: decode workers are present but no prefill worker is,
	// so every decode worker prefills its own prompts.
	DiagNoPrefill = "disagg_no_prefill_worker"
)

// Options are a frontend's collaborators.
type Options struct {
	Registry discovery.Registry
	Board    *health.Board
	// Metrics is the registry /metrics serves; nil creates one.
	Metrics *prometheus.Registry
	Logger  *slog.Logger
	// OnDecision, if set, hears every disaggregation decision (tests,
	// benchmarks).
	OnDecision func(disagg.Decision)
	// QuietOpenAPI raises no plane_unauthenticated for an OpenAI API
	// exposed without API keys (tandem serve, which never raised it).
	QuietOpenAPI bool
}

// Process is a running frontend process.
type Process struct {
	cfg   Config
	model *tokenizer.Model
	tok   string // tokenizer fingerprint
	reg   discovery.Registry
	evs   follow.Source // the KV policy fed from the event plane (NATS)
	log   *slog.Logger

	nats  *eventplane.Conn  // nil on zmq
	share *router.LoadShare // nil unless load is shared

	Metrics  *prometheus.Registry
	Board    *health.Board
	Router   *router.Router
	KV       *router.KV // nil unless the mode is kv or kv-approx
	Frontend *httpapi.Server
	// Disagg prices and runs remote prefills for the decode workers.
	Disagg *disagg.Orchestrator
	// PD drives vLLM's P/D protocol for workers that are vLLM servers
	// (record kv_transfer.protocol "vllm").
	PD *vllmpd.Proxy

	ctx     context.Context
	cancel  context.CancelFunc
	watched chan error
	synced  chan struct{}
	http    *http.Server
	lis     net.Listener
	scheme  string
	cluster *authn.Cluster // nil: plaintext request planes
	served  chan error
	done    chan error // Done's

	mu      sync.Mutex
	members map[string]*member
	refused map[string]discovery.Record
	ctxLen  int
}

type member struct {
	rec  discovery.Record
	conn *requestplane.Conn
}

// Start serves the frontend for model and follows the registry. It
// returns once the HTTP listener is up; workers arrive as the registry
// reports them.
func Start(ctx context.Context, cfg Config, model *tokenizer.Model, opts Options) (_ *Process, err error) {
	if opts.Registry == nil {
		return nil, errors.New("fleet: no discovery registry")
	}
	base := process.New(opts.Logger, opts.Metrics, opts.Board)
	log, reg, board := base.Log, base.Registry, base.Board
	if c, ok := opts.Registry.(engine.MetricsCollector); ok {
		// The file backend's junk-file count.
		_ = reg.Register(c.Collector())
	}
	f := &Process{
		cfg: cfg, model: model, tok: model.Tokenizer.Fingerprint(), reg: opts.Registry,
		log: log.With("component", "fleet"), Metrics: reg, Board: board,
		watched: make(chan error, 1), synced: make(chan struct{}), served: make(chan error, 1), done: make(chan error, 1),
		members: map[string]*member{}, refused: map[string]discovery.Record{},
		ctxLen: model.ContextLength,
	}
	if f.cluster, err = authn.LoadAs(cfg.MTLS, authn.RoleFrontend); err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	tc, err := httpapi.ServerTLS(cfg.TLS)
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	f.ctx, f.cancel = context.WithCancel(ctx)
	mode, err := disagg.ParseMode(cfg.Disagg.Mode)
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	f.Disagg = disagg.New(disagg.Config{Mode: mode, InterferenceWeight: cfg.Disagg.InterferenceWeight, LegTimeout: cfg.Disagg.LegTimeout, Board: board,
		Logger: f.log, Registerer: reg, OnDecision: opts.OnDecision})
	f.PD = vllmpd.NewProxy(vllmpd.ProxyConfig{Always: mode == disagg.Always, Logger: f.log, Registerer: reg})
	defer func() {
		if err != nil {
			f.stop()
		}
	}()
	if err := cfg.EventPlane.Validate(); err != nil {
		return nil, err
	}
	if cfg.EventPlane.Plane == "nats" {
		if f.nats, err = eventplane.Open(f.ctx, cfg.EventPlane, "tandem-frontend", board, log); err != nil {
			return nil, fmt.Errorf("fleet: %w", err)
		}
	}
	policy, err := f.policy(log)
	if err != nil {
		return nil, err
	}
	f.Router = router.New(policy, reg)
	f.Frontend = httpapi.New(cfg.Frontend, dispatch.New(cfg.Dispatch, f.Router, board, reg, log), board, reg, log)
	f.Frontend.SetPrefillWorkers(f.prefillWorkers)
	f.Frontend.AddModel(model)

	f.lis, err = net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return nil, fmt.Errorf("fleet: listen %s: %w", cfg.HTTPAddr, err)
	}
	if cfg.Frontend.APIKeys == nil && !opts.QuietOpenAPI {
		process.WarnExposed(board, "openai-api", f.lis.Addr().String(), "the OpenAI API listens beyond this host without --api-key-file: anyone who reaches it is served")
	}
	var lis net.Listener
	f.http, lis = f.Frontend.NewHTTPServer(f.lis)
	f.scheme = "http://"
	if tc != nil {
		f.scheme = "https://"
	}
	go func() { f.served <- httpapi.Serve(f.http, lis, tc) }()
	go func() { f.watched <- f.reg.Watch(f.ctx, f.apply) }()
	go f.wait()
	return f, nil
}

func (f *Process) policy(log *slog.Logger) (router.Policy, error) {
	kc := f.cfg.KV
	kc.Board, kc.Logger, kc.Registerer = f.Board, log, f.Metrics
	if f.cfg.RouterMode == "kv" { // the policy follows its workers' KV event streams
		fol, err := follow.New(f.ctx, follow.Config{Topic: kc.Topic, Bind: kc.Bind, BindAllow: kc.BindAllow,
			ReplayTimeout: kc.ReplayTimeout, DialTimeout: kc.DialTimeout, Logger: log, Registerer: f.Metrics})
		if err != nil {
			return nil, fmt.Errorf("fleet: %w", err)
		}
		kc.Streams = fol
	}
	p, err := router.NewPolicy(f.ctx, f.cfg.RouterMode, kc)
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	f.KV, _ = p.(*router.KV)
	if f.KV != nil && f.KV.Name() == "kv" && f.nats != nil {
		f.evs = eventplane.NewSource(f.nats.Conn, f.cfg.EventPlane.SubjectPrefix, log)
	}
	if f.nats != nil && f.cfg.ShareLoad {
		f.share = router.NewLoadShare(p, eventplane.NewLoadBus(f.nats.Conn, f.cfg.EventPlane.SubjectPrefix), router.ReplicaID(), log)
		return f.share, nil
	}
	return p, nil
}

// NATSURL is the event plane's server URL ("" on zmq): the embedded
// server's when the frontend runs one.
func (f *Process) NATSURL() string {
	switch {
	case f.nats != nil && f.nats.Embedded() != nil:
		return f.nats.Embedded().URL()
	case f.nats != nil:
		return f.cfg.EventPlane.NATS
	}
	return ""
}

// apply is the registry watcher's callback.
func (f *Process) apply(e discovery.Event) {
	switch e.Type {
	case discovery.EventPut:
		f.admit(e.Record)
	case discovery.EventDelete:
		f.remove(e.Record.ID, "deregistered or expired")
	case discovery.EventSynced:
		close(f.synced)
	}
}

// admit adds or updates a worker after checking it can serve here.
func (f *Process) admit(rec discovery.Record) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.admitLocked(rec)
}

func (f *Process) admitLocked(rec discovery.Record) {
	if old, ok := f.members[rec.ID]; ok {
		was := old.rec
		was.ContextLength = rec.ContextLength
		if was == rec {
			// Only the context changed (an upstream server that answered
			// after its worker registered): the worker stays routed as it is.
			old.rec = rec
			f.narrowContextLocked(rec.ContextLength)
			return
		}
	}
	if reason := f.refuseLocked(rec); reason != "" {
		if _, was := f.members[rec.ID]; was {
			f.removeLocked(rec.ID, "its new record is refused")
		}
		f.refused[rec.ID] = rec
		return
	}
	delete(f.refused, rec.ID)
	f.clearRefusalsLocked(rec.ID)

	old := f.members[rec.ID]
	m := &member{rec: rec}
	if old != nil && old.rec.RequestPlane == rec.RequestPlane {
		m.conn = old.conn
	} else if old != nil && old.conn != nil {
		old.conn.Retire()
	}
	if m.conn == nil {
		c, err := requestplane.Connect(rec.RequestPlane, f.cluster)
		if err != nil {
			f.Board.Raise(DiagWorkerRefused, rec.ID, health.Error, "cannot set up the worker's request plane: "+err.Error())
			return
		}
		m.conn = c
	}
	f.members[rec.ID] = m
	defer f.checkPrefillLocked()
	if old != nil && (old.rec.Role != rec.Role || old.rec.KVTransfer.Protocol != rec.KVTransfer.Protocol) {
		f.forgetPairingLocked(rec.ID)
	}
	vllm := rec.KVTransfer.Protocol == discovery.ProtocolVLLM
	if rec.Role == discovery.RolePrefill {
		// Prefill workers are not routed to: the orchestrator (or, for
		// vLLM servers, the P/D proxy) sends them prefill legs for the
		// decode workers the router picks.
		f.Router.RemoveWorker(rec.ID)
		if vllm {
			f.PD.AddPrefill(rec.ID, m.conn)
		} else {
			f.Disagg.AddPrefill(m.conn.Side(rec))
		}
		f.log.Info("prefill worker added", "worker", rec.ID, "kv_layout", rec.KVLayout.Fingerprint(), "kv_protocol", rec.KVTransfer.Protocol)
		return
	}
	var gen engine.Generator = m.conn
	switch {
	case rec.Role == discovery.RoleDecode && vllm:
		// vLLM servers cannot be asked what they cache or priced: like
		// vLLM's own proxy, every request takes the prefill leg, except
		// (auto) when the router predicts a full cache hit, and unless
		// --disagg never.
		if f.Disagg.Mode() != disagg.Never {
			gen = f.PD.Wrap(rec.ID, m.conn, rec.KVLayout.BlockSize)
		}
	case rec.Role == discovery.RoleDecode:
		if rec.KVTransfer.Addr == "" {
			f.Board.Raise(DiagNoTransferAddr, rec.ID, health.Warn,
				"decode worker publishes no KV transfer address; it prefills every prompt itself")
		} else {
			f.Board.Clear(DiagNoTransferAddr, rec.ID, "", "")
			gen = f.Disagg.Wrap(m.conn.Side(rec), m.conn)
		}
	}
	if f.KV != nil {
		f.followLocked(rec)
	}
	if f.share != nil {
		if err := f.share.Follow(f.ctx, rec.Model); err != nil {
			f.log.Error("cannot follow the model's load subject; peers' load is not counted", "model", rec.Model, "err", err)
		}
	}
	f.narrowContextLocked(rec.ContextLength)
	info, timing := m.conn.Info(rec)
	f.Router.AddWorker(router.Worker{ID: rec.ID, Model: rec.Model, Gen: gen, Queue: m.conn.QueueReport(f.ctx, rec), Timing: timing, Info: info})
	f.log.Info("worker added", "worker", rec.ID, "role", rec.Role, "request_plane", rec.RequestPlane,
		"kv_events", rec.KVEvents.Endpoint, "kv_layout", rec.KVLayout.Fingerprint(), "engine", rec.Engine, "version", rec.Version)
}

// narrowContextLocked lowers the context length the frontend checks prompts
// against and /v1/models reports to n, if n is smaller (or none was known).
func (f *Process) narrowContextLocked(n int) {
	if n > 0 && (f.ctxLen == 0 || n < f.ctxLen) {
		// The frontend checks prompts against the smallest context of the
		// model's workers, so no worker gets one it must refuse.
		f.ctxLen = n
		mm := *f.model
		mm.ContextLength = f.ctxLen
		f.Frontend.AddModel(&mm)
	}
}

// followLocked has the KV policy follow the worker's events: from its
// model's subject on the event plane, else from its own sockets.
func (f *Process) followLocked(rec discovery.Record) {
	if f.evs != nil {
		if err := f.evs.Follow(f.ctx, rec.Model, f.KV.Ingest); err != nil {
			f.log.Error("cannot follow the model's KV event subject; its workers are routed by approximation",
				"model", rec.Model, "err", err)
		}
	}
	if err := follow.Record(f.KV, rec, f.evs != nil); err != nil {
		f.log.Warn("KV events of the worker not followed", "worker", rec.ID, "err", err)
	}
}

// refuseLocked returns why rec cannot join ("" if it can), raising the
// matching diagnostic.
func (f *Process) refuseLocked(rec discovery.Record) string {
	r := discovery.Refuse(rec, f.model.Name, f.tok, f.recordsLocked())
	if r == nil {
		return ""
	}
	r.Raise(f.Board, rec.ID)
	return r.Msg
}

// prefillWorkers lists the prefill members for /health.
func (f *Process) prefillWorkers() []httpapi.PrefillWorker {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []httpapi.PrefillWorker
	for _, m := range f.members {
		if m.rec.Role != discovery.RolePrefill {
			continue
		}
		p := cmp.Or(m.rec.KVTransfer.Protocol, "tandem")
		out = append(out, httpapi.PrefillWorker{ID: m.rec.ID, Model: m.rec.Model, Engine: m.rec.Engine, Protocol: p})
	}
	slices.SortFunc(out, func(a, b httpapi.PrefillWorker) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// forgetPairingLocked drops worker id from both disaggregation drivers.
func (f *Process) forgetPairingLocked(id string) {
	f.Disagg.RemovePrefill(id)
	f.Disagg.RemoveDecode(id)
	f.PD.RemovePrefill(id)
}

// checkPrefillLocked raises DiagNoPrefill while decode workers have no
// prefill worker of their KV protocol to pair with, and clears it once
// they do.
func (f *Process) checkPrefillLocked() {
	if alone := discovery.Unpaired(f.recordsLocked()); alone > 0 {
		f.Board.Raise(DiagNoPrefill, "fleet", health.Warn, "decode workers are registered but no prefill worker of their KV protocol is; they prefill their own prompts",
			"decode_workers", alone)
	} else {
		f.Board.Clear(DiagNoPrefill, "fleet", "", "")
	}
}

// recordsLocked are the members' records.
func (f *Process) recordsLocked() []discovery.Record {
	recs := make([]discovery.Record, 0, len(f.members))
	for _, m := range f.members {
		recs = append(recs, m.rec)
	}
	return recs
}

func (f *Process) clearRefusalsLocked(id string) {
	for _, code := range []string{discovery.DiagModelUnserved, discovery.DiagTokenizer, discovery.DiagKVLayoutMismatch, DiagWorkerRefused} {
		f.Board.Clear(code, id, "", "")
	}
}

func (f *Process) remove(id, why string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.refused, id)
	f.clearRefusalsLocked(id)
	if _, ok := f.members[id]; !ok {
		return
	}
	f.removeLocked(id, why)
	// A worker refused for its layout may pair with the ones left.
	for _, rid := range slices.Sorted(maps.Keys(f.refused)) {
		f.admitLocked(f.refused[rid])
	}
}

func (f *Process) removeLocked(id, why string) {
	m, ok := f.members[id]
	if !ok {
		return
	}
	delete(f.members, id)
	f.forgetPairingLocked(id)
	f.checkPrefillLocked()
	// The router tells the KV policy (Observer.WorkerRemoved), which drops
	// the worker's subscription and index entries.
	f.Router.RemoveWorker(id)
	if f.KV != nil {
		f.KV.RemoveWorker(id) // also for workers the router never had
	}
	f.Board.ClearSubject(id)
	if m.conn != nil {
		m.conn.Retire()
	}
	f.log.Info("worker removed", "worker", id, "reason", why)
}

// Synced is closed once every worker live at start has been seen.
func (f *Process) Synced() <-chan struct{} { return f.synced }

// Members returns the ids of the workers the frontend holds (routed or
// not), sorted.
func (f *Process) Members() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Sorted(maps.Keys(f.members))
}

// URL is the frontend's base URL.
func (f *Process) URL() string { return f.scheme + f.lis.Addr().String() }

// Addr is the OpenAI API's listening address.
func (f *Process) Addr() net.Addr { return f.lis.Addr() }

// Done yields the HTTP server's error if it stops, or the registry watch's
// if that fails for good (one channel, whoever asks).
func (f *Process) Done() <-chan error { return f.done }

// wait feeds Done until the frontend shuts down.
func (f *Process) wait() {
	select {
	case err := <-f.served:
		f.done <- err
	case err := <-f.watched:
		if err == nil {
			err = errors.New("fleet: discovery watch ended")
		}
		f.done <- fmt.Errorf("fleet: discovery: %w", err)
	case <-f.ctx.Done():
	}
}

// Shutdown drains: /health turns 503, the listener closes, in-flight
// requests get until ctx ends; then the watch, the event subscriptions and
// every connection stop.
func (f *Process) Shutdown(ctx context.Context) error {
	f.Frontend.SetDraining()
	err := process.ShutdownHTTP(ctx, f.http, f.log)
	f.stop()
	return err
}

// stop ends the watch, the orchestrator, the KV policy, the event plane
// and every worker connection (Shutdown, or a failed Start).
func (f *Process) stop() {
	f.cancel()
	f.Disagg.Close()
	if f.KV != nil {
		f.KV.Close()
	}
	if f.share != nil {
		f.share.Close()
	}
	if f.evs != nil {
		_ = f.evs.Close()
	}
	if f.nats != nil {
		f.nats.Close()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range f.members {
		if m.conn != nil {
			m.conn.Close()
		}
	}
}
