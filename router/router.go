package router

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/internal/backoff"
)

// Worker is a live worker as the router knows it.
type Worker struct {
	ID    string
	Model string
	Gen   engine.Generator
	Info  engine.Info
	// Timing is the engine's own prefill estimate when the engine runs in
	// this process (engine/mocker, engine/native; nil otherwise). The ttft
	// cost prices the worker with it, and learns the rates of workers
	// without one from their TTFTs.
	Timing engine.PrefillEstimator
	// Queue is the engine's own account of its queue, other clients'
	// requests included (an upstream server's /metrics; a worker in
	// another process relays its engine's). Nil: the router counts only
	// what it routed.
	Queue engine.QueueReporter
}

type workerState struct {
	Worker
	active, prefilling, prefillTokens int
	// failures counts requests in a row the worker could not be reached
	// for; while now < quarantined it gets no new requests. quarantine
	// hands out the windows.
	failures    int
	quarantined time.Time
	quarantine  backoff.Backoff
	// progress is when the worker last showed progress (a token, a
	// finish) or took work while idle, in Unix nanoseconds; written per
	// token without the router's lock. stuck is set while it holds
	// requests and progress is older than the stuck threshold.
	progress atomic.Int64
	stuck    atomic.Bool
}

// Quarantine bounds: a worker that cannot be reached is left alone for
// quarantineBase, the window's ceiling doubling with every further failure
// up to quarantineMax, so a dead worker whose record has not expired yet
// costs one failed attempt per window instead of one per request. Windows
// are jittered (internal/backoff) so the frontends that lost a worker
// together do not all retry it at the same instant.
const (
	quarantineBase = 250 * time.Millisecond
	quarantineMax  = 30 * time.Second
)

// DefaultStuckAfter is how long a worker may hold requests without
// producing a token before it counts as stuck. It is well above the
// longest prefill step of the engines Tandem runs (the mocker's 32k-token
// prefill at the seeds' timing; docs/benchmarks.md).
const DefaultStuckAfter = 30 * time.Second

// StuckHook hears a worker become stuck (holding requests, no progress for
// idle) or progress again (or leave, or hold no more work).
type StuckHook func(worker string, stuck bool, idle time.Duration)

// ReachabilityHook hears a worker become unreachable (with its quarantine)
// or reachable again.
type ReachabilityHook func(worker string, reachable bool, quarantine time.Duration)

// Router is safe for concurrent use.
type Router struct {
	policy   Policy
	observer Observer // policy, if it observes; nil otherwise

	decisions *prometheus.CounterVec
	inflight  *prometheus.GaugeVec

	hook       ReachabilityHook
	stuckHook  StuckHook
	stuckAfter time.Duration
	now        func() time.Time
	jitter     func(n int64) int64 // quarantine jitter in [0, n); nil is math/rand (tests fix it)

	mu      sync.Mutex
	workers map[string]*workerState
	byModel map[string][]*workerState // sorted by id
	known   map[string]bool           // every model ever registered
}

// New returns a Router using p. Metrics go to reg when it is not nil.
func New(p Policy, reg prometheus.Registerer) *Router {
	r := &Router{
		policy: p,
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_router_decisions_total",
			Help: "Routing decisions by policy and chosen worker.",
		}, []string{"policy", "worker"}),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tandem_router_worker_active_requests",
			Help: "Requests routed to the worker and not yet finished.",
		}, []string{"worker"}),
		workers:    map[string]*workerState{},
		byModel:    map[string][]*workerState{},
		known:      map[string]bool{},
		now:        time.Now,
		stuckAfter: DefaultStuckAfter,
	}
	r.observer, _ = p.(Observer)
	if reg != nil {
		reg.MustRegister(r.decisions, r.inflight)
	}
	return r
}

// jitterN draws the quarantine's jitter (under r.mu, as Next runs there).
func (r *Router) jitterN(n int64) int64 {
	if r.jitter != nil {
		return r.jitter(n)
	}
	return rand.Int64N(n)
}

// SetReachabilityHook installs h (before the router is used).
func (r *Router) SetReachabilityHook(h ReachabilityHook) { r.hook = h }

// SetStuckHook installs h (before the router is used).
func (r *Router) SetStuckHook(h StuckHook) { r.stuckHook = h }

// SetStuckAfter sets the stuck threshold (before the router is used; 0
// disables stuck detection).
func (r *Router) SetStuckAfter(d time.Duration) { r.stuckAfter = d }

// checkStuckLocked flags s stuck when it holds requests and has shown no
// progress for the threshold; it returns true on the transition, for the
// caller to report outside the lock.
func (r *Router) checkStuckLocked(s *workerState, now time.Time) (idle time.Duration, raised bool) {
	if r.stuckAfter <= 0 || s.active == 0 || s.stuck.Load() {
		return 0, false
	}
	idle = now.Sub(time.Unix(0, s.progress.Load()))
	if idle < r.stuckAfter {
		return 0, false
	}
	s.stuck.Store(true)
	return idle, true
}

// CheckStuck evaluates every worker now (Route does so for the workers it
// considers; /health calls this so that a stuck worker shows even when no
// request arrives) and returns the stuck ones.
func (r *Router) CheckStuck() []string {
	now := r.now()
	type ev struct {
		id   string
		idle time.Duration
	}
	var raised []ev
	var out []string
	r.mu.Lock()
	for _, s := range r.workers {
		if idle, ok := r.checkStuckLocked(s, now); ok {
			raised = append(raised, ev{s.ID, idle})
		}
		if s.stuck.Load() {
			out = append(out, s.ID)
		}
	}
	r.mu.Unlock()
	for _, e := range raised {
		r.reportStuck(e.id, true, e.idle)
	}
	slices.Sort(out)
	return out
}

func (r *Router) reportStuck(id string, stuck bool, idle time.Duration) {
	if r.stuckHook != nil {
		r.stuckHook(id, stuck, idle)
	}
}

// unflag clears s's stuck flag and reports it, if it was set.
func (r *Router) unflag(s *workerState) {
	if s.stuck.CompareAndSwap(true, false) {
		r.reportStuck(s.ID, false, 0)
	}
}

// Policy returns the routing policy.
func (r *Router) Policy() Policy { return r.policy }

// AddWorker registers w, replacing any worker with the same id.
func (r *Router) AddWorker(w Worker) {
	r.mu.Lock()
	old, replaced := r.workers[w.ID]
	if replaced {
		r.dropLocked(old)
	}
	s := &workerState{Worker: w, quarantine: backoff.Backoff{Base: quarantineBase, Max: quarantineMax, Rand: r.jitterN}}
	s.progress.Store(r.now().UnixNano())
	r.workers[w.ID] = s
	list := append(r.byModel[w.Model], s)
	slices.SortFunc(list, func(a, b *workerState) int { return strings.Compare(a.ID, b.ID) })
	r.byModel[w.Model] = list
	r.known[w.Model] = true
	r.mu.Unlock()
	r.inflight.WithLabelValues(w.ID).Set(0)
	if replaced {
		// The new registration starts with a clean record: flags raised
		// against the old one clear.
		r.forget(old)
	}
	if wo, ok := r.policy.(WorkerObserver); ok {
		wo.WorkerAdded(w)
	}
}

// RemoveWorker forgets the worker. Requests already routed to it keep their
// Route; their Done is harmless.
func (r *Router) RemoveWorker(id string) {
	r.mu.Lock()
	s, ok := r.workers[id]
	if ok {
		r.dropLocked(s)
	}
	r.mu.Unlock()
	if ok {
		r.inflight.DeleteLabelValues(id)
		r.forget(s)
		if r.observer != nil {
			r.observer.WorkerRemoved(id)
		}
	}
}

// forget clears the flags a departed worker state carried: a worker that
// left is neither unreachable nor stuck any more.
func (r *Router) forget(s *workerState) {
	r.mu.Lock()
	failed := s.failures > 0
	s.failures, s.quarantined = 0, time.Time{}
	s.quarantine.Reset()
	r.mu.Unlock()
	if failed && r.hook != nil {
		r.hook(s.ID, true, 0)
	}
	r.unflag(s)
}

func (r *Router) dropLocked(s *workerState) {
	delete(r.workers, s.ID)
	r.byModel[s.Model] = slices.DeleteFunc(r.byModel[s.Model], func(x *workerState) bool { return x == s })
}

// Workers returns the live workers, sorted by model then id.
func (r *Router) Workers() []Worker {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Worker, 0, len(r.workers))
	for _, s := range r.workers {
		out = append(out, s.Worker)
	}
	slices.SortFunc(out, func(a, b Worker) int {
		return cmp.Or(strings.Compare(a.Model, b.Model), strings.Compare(a.ID, b.ID))
	})
	return out
}

// Models returns the models with at least one live worker.
func (r *Router) Models() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for m, ws := range r.byModel {
		if len(ws) > 0 {
			out = append(out, m)
		}
	}
	slices.Sort(out)
	return out
}

// KnownModel reports whether any worker ever registered model; a known model
// without live workers is a 503, an unknown one a 404.
func (r *Router) KnownModel(model string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.known[model]
}

// Route picks a worker for req, excluding the ids in exclude (workers that
// already failed this request). The returned Route must be finished with
// Done.
func (r *Router) Route(req *Request, exclude ...string) (*Route, error) {
	r.mu.Lock()
	ws := r.byModel[req.Model]
	if len(ws) == 0 {
		known := r.known[req.Model]
		r.mu.Unlock()
		if !known {
			return nil, fmt.Errorf("%w: %q", ErrUnknownModel, req.Model)
		}
		return nil, fmt.Errorf("%w: %q", ErrNoWorker, req.Model)
	}
	cands := make([]Candidate, 0, len(ws))
	now := r.now()
	var stuck []string
	var idles []time.Duration
	for _, s := range ws {
		if idle, ok := r.checkStuckLocked(s, now); ok {
			stuck, idles = append(stuck, s.ID), append(idles, idle)
		}
	}
	for pass := 0; pass < 2 && len(cands) == 0; pass++ {
		for _, s := range ws {
			// Quarantined and stuck workers are skipped, unless every
			// other one is excluded too: trying one beats refusing the
			// request.
			if slices.Contains(exclude, s.ID) || (pass == 0 && (now.Before(s.quarantined) || s.stuck.Load())) {
				continue
			}
			cands = append(cands, Candidate{ID: s.ID, Active: s.active, Prefilling: s.prefilling, PrefillTokens: s.prefillTokens})
		}
	}
	r.mu.Unlock()
	for i, id := range stuck {
		r.reportStuck(id, true, idles[i])
	}
	if len(cands) == 0 {
		return nil, fmt.Errorf("%w: %q (all excluded)", ErrNoWorker, req.Model)
	}
	// Pick runs outside the lock: kv policies do real work here and must not
	// serialize the whole frontend. Load may move meanwhile; that is the same
	// staleness any distributed router lives with.
	d, err := r.policy.Pick(req, cands)
	if err != nil {
		return nil, fmt.Errorf("router %s: %w", r.policy.Name(), err)
	}
	d.Candidates = len(cands)
	r.mu.Lock()
	s, ok := r.workers[d.WorkerID]
	if !ok {
		r.mu.Unlock()
		if r.observer != nil {
			// The policy may have placed the request's load already.
			r.observer.Finished(req, d.WorkerID)
		}
		return nil, fmt.Errorf("%w: policy chose unknown worker %q", ErrNoWorker, d.WorkerID)
	}
	if s.active == 0 {
		// Idle until now: the stuck clock starts with this request.
		s.progress.Store(r.now().UnixNano())
	}
	s.active++
	s.prefilling++
	s.prefillTokens += len(req.Tokens)
	active := s.active
	r.mu.Unlock()
	r.decisions.WithLabelValues(r.policy.Name(), s.ID).Inc()
	r.inflight.WithLabelValues(s.ID).Set(float64(active))
	if r.observer != nil {
		r.observer.Routed(req, d)
	}
	return &Route{r: r, s: s, req: req, Decision: d, Worker: s.Worker}, nil
}

// Route is one routed request. FirstToken and Done may each be called more
// than once; only the first call counts.
type Route struct {
	Worker   Worker
	Decision Decision

	r              *Router
	s              *workerState
	req            *Request
	mu             sync.Mutex
	gotFirst, done bool
}

// Progress records that the worker produced something for this request at
// now. It is called per delta: one atomic store, no lock, unless the worker
// was flagged stuck.
func (rt *Route) Progress(now time.Time) {
	if rt == nil {
		return
	}
	rt.s.progress.Store(now.UnixNano())
	if rt.s.stuck.Load() {
		rt.r.unflag(rt.s)
	}
}

// CachedTokens reports the engine's cached tokens after a FirstToken(-1)
// (they were not known at the first token).
func (rt *Route) CachedTokens(cachedTokens int) {
	if lo, ok := rt.r.observer.(LateObserver); ok {
		lo.CachedTokensLate(rt.req, rt.s.ID, cachedTokens)
	}
}

// FirstToken records that prefill finished, with the engine's cached
// tokens (-1: not known yet; CachedTokens brings them later).
func (rt *Route) FirstToken(cachedTokens int) {
	rt.mu.Lock()
	if rt.gotFirst || rt.done {
		rt.mu.Unlock()
		return
	}
	rt.gotFirst = true
	rt.mu.Unlock()
	rt.r.mu.Lock()
	rt.s.prefilling--
	rt.s.prefillTokens -= len(rt.req.Tokens)
	recovered := rt.s.failures > 0
	rt.s.failures, rt.s.quarantined = 0, time.Time{}
	rt.s.quarantine.Reset()
	rt.r.mu.Unlock()
	rt.Progress(rt.r.now())
	if recovered && rt.r.hook != nil {
		rt.r.hook(rt.s.ID, true, 0)
	}
	if rt.r.observer != nil {
		rt.r.observer.FirstToken(rt.req, rt.s.ID, cachedTokens)
	}
}

// Unreachable records that the worker could not be reached for this
// request (before its first token): it is quarantined, longer with every
// failure in a row, until a request gets a first token from it again.
func (rt *Route) Unreachable() {
	rt.r.mu.Lock()
	if rt.r.workers[rt.s.ID] != rt.s {
		// The worker left (or re-registered) while this request failed:
		// nothing to quarantine, and a flag raised now would never clear.
		rt.r.mu.Unlock()
		return
	}
	rt.s.failures++
	d := rt.s.quarantine.Next()
	rt.s.quarantined = rt.r.now().Add(d)
	rt.r.mu.Unlock()
	if rt.r.hook != nil {
		rt.r.hook(rt.s.ID, false, d)
	}
}

// Done releases the request's load.
func (rt *Route) Done() {
	rt.mu.Lock()
	if rt.done {
		rt.mu.Unlock()
		return
	}
	rt.done = true
	first := rt.gotFirst
	rt.mu.Unlock()
	rt.r.mu.Lock()
	rt.s.active--
	if !first {
		rt.s.prefilling--
		rt.s.prefillTokens -= len(rt.req.Tokens)
	}
	active := rt.s.active
	_, live := rt.r.workers[rt.s.ID]
	rt.r.mu.Unlock()
	if active == 0 {
		rt.r.unflag(rt.s) // holds no work: nothing to be stuck on
	}
	if live {
		rt.r.inflight.WithLabelValues(rt.s.ID).Set(float64(active))
	}
	if rt.r.observer != nil {
		rt.r.observer.Finished(rt.req, rt.s.ID)
	}
}
