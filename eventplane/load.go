package eventplane

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/router"
)

// Lifecycle message kinds on a load subject.
const (
	kindRouted   = "routed"
	kindFirst    = "first"
	kindFinished = "finished"
	hdrKind      = "Tandem-Kind"
	hdrRequest   = "Tandem-Request"
	hdrPredicted = "Tandem-Predicted"
	hdrCached    = "Tandem-Cached"
	hdrLen       = "Tandem-Prompt-Len"
	hdrBlockSize = "Tandem-Block-Size"
)

// prompter is a policy that indexes prompts by block hashes (router.KV):
// replicas exchange those hashes, never the prompt's tokens.
type prompter interface {
	BlockSize() int
	PromptHashes(tokens []engine.Token) []uint64
}

// maxLoadHashes bounds the hashes a peer's Routed message may carry.
const maxLoadHashes = 1 << 20

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
// It implements router.Policy and router.Observer; hand it to router.New.
type LoadShare struct {
	inner  router.Policy
	obs    router.Observer // inner, if it observes
	nc     *nats.Conn
	prefix string
	id     string // this router, to skip its own messages
	ttl    time.Duration
	log    *slog.Logger

	mu        sync.Mutex
	lastSweep time.Time
	remote    map[string]*remoteReq  // router/request → request
	load      map[string]*remoteLoad // worker → peers' load
	subs      map[string]*nats.Subscription
	closed    bool

	published, applied, dropped atomic.Uint64
}

type remoteReq struct {
	req    *router.Request
	worker string
	first  bool
	at     time.Time
}

type remoteLoad struct{ active, prefilling, prefillTokens int }

// NewLoadShare wraps inner. routerID must be unique among the replicas
// (the host name and pid do).
func NewLoadShare(inner router.Policy, nc *nats.Conn, prefix, routerID string, log *slog.Logger) *LoadShare {
	if log == nil {
		log = slog.Default()
	}
	s := &LoadShare{
		inner: inner, nc: nc, prefix: prefix, id: routerID, ttl: DefaultRemoteTTL,
		log:    log.With("component", "eventplane.load"),
		remote: map[string]*remoteReq{}, load: map[string]*remoteLoad{}, subs: map[string]*nats.Subscription{},
	}
	s.obs, _ = inner.(router.Observer)
	return s
}

// Name implements router.Policy.
func (s *LoadShare) Name() string { return s.inner.Name() }

// Inner returns the wrapped policy.
func (s *LoadShare) Inner() router.Policy { return s.inner }

// Pick implements router.Policy.
func (s *LoadShare) Pick(req *router.Request, cands []router.Candidate) (router.Decision, error) {
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

func (s *LoadShare) publish(kind string, req *router.Request, worker string, set func(nats.Header), data []byte) {
	m := nats.NewMsg(LoadSubject(s.prefix, req.Model))
	m.Header.Set(hdrRouter, s.id)
	m.Header.Set(hdrKind, kind)
	m.Header.Set(hdrRequest, req.ID)
	m.Header.Set(hdrWorker, worker)
	m.Header.Set(hdrModel, req.Model)
	if set != nil {
		set(m.Header)
	}
	m.Data = data
	if err := s.nc.PublishMsg(m); err != nil {
		s.dropped.Add(1) // peers will see less load than there is; the TTL bounds the opposite error
		return
	}
	s.published.Add(1)
}

// Routed implements router.Observer.
func (s *LoadShare) Routed(req *router.Request, d router.Decision) {
	if s.obs != nil {
		s.obs.Routed(req, d)
	}
	// The message carries the prompt's length and, for a kv policy, its
	// block hashes: NATS subscribers never see the prompt itself.
	var data []byte
	bs := 0
	if p, ok := s.inner.(prompter); ok {
		bs = p.BlockSize()
		hs := p.PromptHashes(req.Tokens)
		data = make([]byte, 8*len(hs))
		for i, v := range hs {
			binary.LittleEndian.PutUint64(data[8*i:], v)
		}
	}
	s.publish(kindRouted, req, d.WorkerID, func(h nats.Header) {
		h.Set(hdrPredicted, strconv.Itoa(d.PredictedCachedTokens))
		h.Set(hdrLen, strconv.Itoa(req.Len()))
		h.Set(hdrBlockSize, strconv.Itoa(bs))
	}, data)
}

// FirstToken implements router.Observer.
func (s *LoadShare) FirstToken(req *router.Request, worker string, cached int) {
	if s.obs != nil {
		s.obs.FirstToken(req, worker, cached)
	}
	s.publish(kindFirst, req, worker, func(h nats.Header) { h.Set(hdrCached, strconv.Itoa(cached)) }, nil)
}

// Finished implements router.Observer.
func (s *LoadShare) Finished(req *router.Request, worker string) {
	if s.obs != nil {
		s.obs.Finished(req, worker)
	}
	s.publish(kindFinished, req, worker, nil, nil)
}

// WorkerAdded implements router.WorkerObserver for the wrapped policy
// (the kv policy's timing models).
func (s *LoadShare) WorkerAdded(w router.Worker) {
	if wo, ok := s.inner.(router.WorkerObserver); ok {
		wo.WorkerAdded(w)
	}
}

// WorkerRemoved implements router.Observer: peers' requests on the worker
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

// Follow subscribes to model's load subject.
func (s *LoadShare) Follow(ctx context.Context, model string) error {
	s.mu.Lock()
	if s.closed || s.subs[model] != nil {
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()
	sub, err := s.nc.Subscribe(LoadSubject(s.prefix, model), func(m *nats.Msg) { s.apply(model, m) })
	if err != nil {
		return fmt.Errorf("eventplane: load subject of %s: %w", model, err)
	}
	s.mu.Lock()
	s.subs[model] = sub
	s.mu.Unlock()
	context.AfterFunc(ctx, func() { _ = sub.Unsubscribe() })
	return nil
}

// apply replays one peer message into the local view.
func (s *LoadShare) apply(model string, m *nats.Msg) {
	h := m.Header
	peer := h.Get(hdrRouter)
	if peer == s.id || h.Get(hdrModel) != model {
		return
	}
	key := peer + "/" + h.Get(hdrRequest)
	worker := h.Get(hdrWorker)
	now := time.Now()
	s.mu.Lock()
	s.expireLocked(now)
	var (
		r    *remoteReq
		call func()
	)
	switch h.Get(hdrKind) {
	case kindRouted:
		n, err := strconv.Atoi(h.Get(hdrLen))
		bs, err2 := strconv.Atoi(h.Get(hdrBlockSize))
		if err != nil || err2 != nil || n < 0 || n > 1<<30 || bs < 0 || len(m.Data)%8 != 0 || len(m.Data)/8 > maxLoadHashes {
			s.dropped.Add(1)
			s.mu.Unlock()
			return
		}
		rp := &router.RemotePrompt{Len: n, BlockSize: bs, Hashes: make([]uint64, len(m.Data)/8)}
		for i := range rp.Hashes {
			rp.Hashes[i] = binary.LittleEndian.Uint64(m.Data[8*i:])
		}
		r = &remoteReq{req: &router.Request{ID: key, Model: model, Remote: rp}, worker: worker, at: now}
		if old := s.remote[key]; old != nil {
			s.unloadLocked(old)
		}
		s.remote[key] = r
		l := s.loadLocked(worker)
		l.active++
		l.prefilling++
		l.prefillTokens += n
		predicted, _ := strconv.Atoi(h.Get(hdrPredicted))
		call = func() {
			if s.obs != nil {
				s.obs.Routed(r.req, router.Decision{WorkerID: worker, PredictedCachedTokens: predicted})
			}
		}
	case kindFirst:
		if r = s.remote[key]; r == nil || r.first {
			break
		}
		r.first = true
		l := s.loadLocked(r.worker)
		l.prefilling--
		l.prefillTokens -= r.req.Len()
		cached, _ := strconv.Atoi(h.Get(hdrCached))
		call = func() {
			if s.obs != nil {
				s.obs.FirstToken(r.req, r.worker, cached)
			}
		}
	case kindFinished:
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
// and publications NATS refused.
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
	for _, sub := range s.subs {
		_ = sub.Unsubscribe()
	}
	s.subs = map[string]*nats.Subscription{}
}
