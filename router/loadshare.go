package router

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tandemllm/tandem/engine"
)

// LoadKind is the lifecycle step a LoadMessage reports.
type LoadKind string

// Lifecycle steps router replicas exchange.
const (
	LoadRouted   LoadKind = "routed"
	LoadFirst    LoadKind = "first"
	LoadFinished LoadKind = "finished"
)

// LoadMessage is one step of a request's lifecycle as router replicas
// share it. It carries the prompt's length and, for a kv policy, its block
// hashes: peers never see the prompt itself.
type LoadMessage struct {
	Kind    LoadKind
	Router  string // the replica that routed the request
	Request string // the request's id at that replica
	Model   string
	Worker  string
	// Routed only.
	Predicted int
	Len       int
	BlockSize int
	Hashes    []uint64
	// First only.
	Cached int
}

// LoadBus carries LoadMessages between router replicas (eventplane's NATS
// load subjects). Publish is best effort; Subscribe delivers one model's
// messages, in order, from one goroutine, until unsubscribe is called.
type LoadBus interface {
	Publish(m *LoadMessage) error
	Subscribe(model string, deliver func(*LoadMessage)) (unsubscribe func(), err error)
}

// MaxLoadHashes bounds the hashes a peer's Routed message may carry.
const MaxLoadHashes = 1 << 20

// maxLoadLen bounds a peer's prompt length.
const maxLoadLen = 1 << 30

// prompter is a policy that indexes prompts by block hashes (KV):
// replicas exchange those hashes, never the prompt's tokens.
type prompter interface {
	BlockSize() int
	PromptHashes(tokens []engine.Token) []uint64
}

// DefaultRemoteTTL bounds how long a peer's request counts as load without
// finishing: a router that died mid-request never sends its Finished.
const DefaultRemoteTTL = 10 * time.Minute

// LoadShare wraps a routing policy so that router replicas share their
// load. It publishes this router's request lifecycle on the model's load
// subject and replays its peers' lifecycles into the wrapped policy's
// Observer as if it had routed them itself (so the kv policy's active
// blocks and approximate index include the peers' requests), and adds the
// peers' in-flight counts to the candidates of load-only policies.
//
// It implements Policy and Observer; hand it to New.
type LoadShare struct {
	inner Policy
	obs   Observer // inner, if it observes
	bus   LoadBus
	id    string // this router, to skip its own messages
	ttl   time.Duration
	log   *slog.Logger

	mu        sync.Mutex
	lastSweep time.Time
	remote    map[string]*remoteReq  // router/request → request
	load      map[string]*remoteLoad // worker → peers' load
	subs      map[string]func()      // model → unsubscribe
	closed    bool

	published, applied, dropped atomic.Uint64
}

type remoteReq struct {
	req    *Request
	worker string
	first  bool
	at     time.Time
}

type remoteLoad struct{ active, prefilling, prefillTokens int }

// ReplicaID names this router replica among its peers: the host name and
// six random bytes.
func ReplicaID() string {
	var id [6]byte
	_, _ = rand.Read(id[:])
	host, _ := os.Hostname()
	return host + "-" + hex.EncodeToString(id[:])
}

// NewLoadShare wraps inner. routerID must be unique among the replicas
// (ReplicaID).
func NewLoadShare(inner Policy, bus LoadBus, routerID string, log *slog.Logger) *LoadShare {
	if log == nil {
		log = slog.Default()
	}
	s := &LoadShare{
		inner: inner, bus: bus, id: routerID, ttl: DefaultRemoteTTL,
		log:    log.With("component", "router.load"),
		remote: map[string]*remoteReq{}, load: map[string]*remoteLoad{}, subs: map[string]func(){},
	}
	s.obs, _ = inner.(Observer)
	return s
}

// Name implements Policy.
func (s *LoadShare) Name() string { return s.inner.Name() }

// Inner returns the wrapped policy.
func (s *LoadShare) Inner() Policy { return s.inner }

// Pick implements Policy.
func (s *LoadShare) Pick(req *Request, cands []Candidate) (Decision, error) {
	s.mu.Lock()
	if len(s.load) > 0 {
		// The router's slice is rebuilt for every request; adding to it
		// in place changes nothing the router keeps.
		for i := range cands {
			if l := s.load[cands[i].ID]; l != nil {
				cands[i].Active += l.active
				cands[i].Prefilling += l.prefilling
				cands[i].PrefillTokens += l.prefillTokens
			}
		}
	}
	s.mu.Unlock()
	return s.inner.Pick(req, cands)
}

func (s *LoadShare) publish(m *LoadMessage, req *Request, worker string) {
	m.Router, m.Request, m.Worker, m.Model = s.id, req.ID, worker, req.Model
	if err := s.bus.Publish(m); err != nil {
		s.dropped.Add(1) // peers will see less load than there is; the TTL bounds the opposite error
		return
	}
	s.published.Add(1)
}

// Routed implements Observer.
func (s *LoadShare) Routed(req *Request, d Decision) {
	if s.obs != nil {
		s.obs.Routed(req, d)
	}
	// The message carries the prompt's length and, for a kv policy, its
	// block hashes: peers never see the prompt itself.
	m := &LoadMessage{Kind: LoadRouted, Predicted: d.PredictedCachedTokens, Len: req.Len()}
	if p, ok := s.inner.(prompter); ok {
		m.BlockSize = p.BlockSize()
		m.Hashes = p.PromptHashes(req.Tokens)
	}
	s.publish(m, req, d.WorkerID)
}

// FirstToken implements Observer.
func (s *LoadShare) FirstToken(req *Request, worker string, cached int) {
	if s.obs != nil {
		s.obs.FirstToken(req, worker, cached)
	}
	s.publish(&LoadMessage{Kind: LoadFirst, Cached: cached}, req, worker)
}

// Finished implements Observer.
func (s *LoadShare) Finished(req *Request, worker string) {
	if s.obs != nil {
		s.obs.Finished(req, worker)
	}
	s.publish(&LoadMessage{Kind: LoadFinished}, req, worker)
}

// WorkerAdded implements WorkerObserver for the wrapped policy
// (the kv policy's timing models).
func (s *LoadShare) WorkerAdded(w Worker) {
	if wo, ok := s.inner.(WorkerObserver); ok {
		wo.WorkerAdded(w)
	}
}

// WorkerRemoved implements Observer: peers' requests on the worker
// are forgotten with it.
func (s *LoadShare) WorkerRemoved(worker string) {
	s.mu.Lock()
	for k, r := range s.remote {
		if r.worker == worker {
			delete(s.remote, k)
		}
	}
	delete(s.load, worker)
	s.mu.Unlock()
	if s.obs != nil {
		s.obs.WorkerRemoved(worker)
	}
}

// Follow subscribes to model's load messages.
func (s *LoadShare) Follow(ctx context.Context, model string) error {
	s.mu.Lock()
	if s.closed || s.subs[model] != nil {
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()
	unsub, err := s.bus.Subscribe(model, func(m *LoadMessage) { s.apply(model, m) })
	if err != nil {
		return fmt.Errorf("router: load messages of %s: %w", model, err)
	}
	s.mu.Lock()
	s.subs[model] = unsub
	s.mu.Unlock()
	context.AfterFunc(ctx, unsub)
	return nil
}

// apply replays one peer message into the local view.
func (s *LoadShare) apply(model string, m *LoadMessage) {
	if m.Router == s.id || m.Model != model {
		return
	}
	key := m.Router + "/" + m.Request
	worker := m.Worker
	now := time.Now()
	s.mu.Lock()
	s.expireLocked(now)
	var (
		r    *remoteReq
		call func()
	)
	switch m.Kind {
	case LoadRouted:
		n, bs := m.Len, m.BlockSize
		if n < 0 || n > maxLoadLen || bs < 0 || len(m.Hashes) > MaxLoadHashes {
			s.dropped.Add(1)
			s.mu.Unlock()
			return
		}
		rp := &RemotePrompt{Len: n, BlockSize: bs, Hashes: m.Hashes}
		r = &remoteReq{req: &Request{ID: key, Model: model, Remote: rp}, worker: worker, at: now}
		if old := s.remote[key]; old != nil {
			s.unloadLocked(old)
		}
		s.remote[key] = r
		l := s.loadLocked(worker)
		l.active++
		l.prefilling++
		l.prefillTokens += n
		predicted := m.Predicted
		call = func() {
			if s.obs != nil {
				s.obs.Routed(r.req, Decision{WorkerID: worker, PredictedCachedTokens: predicted})
			}
		}
	case LoadFirst:
		if r = s.remote[key]; r == nil || r.first {
			break
		}
		r.first = true
		l := s.loadLocked(r.worker)
		l.prefilling--
		l.prefillTokens -= r.req.Len()
		cached := m.Cached
		call = func() {
			if s.obs != nil {
				s.obs.FirstToken(r.req, r.worker, cached)
			}
		}
	case LoadFinished:
		if r = s.remote[key]; r == nil {
			break
		}
		delete(s.remote, key)
		s.unloadLocked(r)
		call = func() {
			if s.obs != nil {
				s.obs.Finished(r.req, r.worker)
			}
		}
	}
	s.mu.Unlock()
	if call != nil {
		// One subscription delivers in order from one goroutine, so a
		// request's calls reach the policy in lifecycle order.
		call()
		s.applied.Add(1)
	}
}

func (s *LoadShare) loadLocked(worker string) *remoteLoad {
	l := s.load[worker]
	if l == nil {
		l = &remoteLoad{}
		s.load[worker] = l
	}
	return l
}

func (s *LoadShare) unloadLocked(r *remoteReq) {
	l := s.loadLocked(r.worker)
	l.active--
	if !r.first {
		l.prefilling--
		l.prefillTokens -= r.req.Len()
	}
	if l.active <= 0 {
		delete(s.load, r.worker)
	}
}

// expireLocked forgets peers' requests older than the TTL: their router
// died, or their Finished was lost.
func (s *LoadShare) expireLocked(now time.Time) {
	if now.Sub(s.lastSweep) < time.Second {
		return
	}
	s.lastSweep = now
	for k, r := range s.remote {
		if now.Sub(r.at) > s.ttl {
			delete(s.remote, k)
			s.unloadLocked(r)
			if s.obs != nil {
				go s.obs.Finished(r.req, r.worker)
			}
		}
	}
}

// Stats returns the lifecycle messages published, peers' messages applied,
// and messages dropped (publications the bus refused, malformed peers').
func (s *LoadShare) Stats() (published, applied, dropped uint64) {
	return s.published.Load(), s.applied.Load(), s.dropped.Load()
}

// PeerRequests is the number of peers' requests in flight as seen here.
func (s *LoadShare) PeerRequests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.remote)
}

// Close unsubscribes.
func (s *LoadShare) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, unsub := range s.subs {
		unsub()
	}
	s.subs = map[string]func(){}
}
