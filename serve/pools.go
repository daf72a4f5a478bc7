package serve

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/routed"
	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/process"
	"github.com/tandemllm/tandem/router"
	"github.com/tandemllm/tandem/tokenizer"
)

// The in-process pool: `tandem serve` grows and shrinks its workers at
// runtime (the planner's in-process actuator). A worker that leaves is
// taken out of the router first, so it gets no new request, and is closed
// only once its streams in flight have finished (or DrainTimeout passed),
// so scaling down fails no request. Scaling to zero keeps the model
// registered with the frontend: /v1/models still lists it and requests get
// 503 with Retry-After until a worker is back.

// poolState is the runtime pool: every routed worker with its stream
// counter, the factory and model that new workers are built from.
type poolState struct {
	scale sync.Mutex // one scale operation at a time

	mu      sync.Mutex
	members []*member
	next    int // the factory index of the next worker
	factory EngineFactory
	model   *tokenizer.Model
	// external: the workers front servers this process does not start
	// (engine/upstream), so the pool cannot grow them.
	external bool
}

type member struct {
	id  string
	eng engine.Engine
	gen *tracked
	// coll is the engine's collector when it was added at runtime (the
	// started workers' are registered directly).
	coll prometheus.Collector
}

// tracked counts a worker's streams in flight, which removal waits for.
// Once closed it refuses new streams with engine.ErrUnavailable: a
// request the router picked this worker for just before it left is
// retried on another worker by the frontend instead of failing.
type tracked struct {
	engine.Generator
	n      atomic.Int64
	mu     sync.Mutex
	closed bool
}

// closeIfIdle closes the gate if no stream is in flight.
func (t *tracked) closeIfIdle() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n.Load() > 0 {
		return false
	}
	t.closed = true
	return true
}

func (t *tracked) Generate(ctx context.Context, req *engine.Request) (engine.Stream, error) {
	return t.GenerateRouted(ctx, routed.Request{Req: req})
}

// GenerateRouted passes the router's decision on to the wrapped Generator.
func (t *tracked) GenerateRouted(ctx context.Context, req routed.Request) (engine.Stream, error) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, fmt.Errorf("%w: the worker left its pool", engine.ErrUnavailable)
	}
	t.n.Add(1)
	t.mu.Unlock()
	st, err := routed.Generate(ctx, t.Generator, req)
	if err != nil {
		t.n.Add(-1)
		return nil, err
	}
	ts := &trackedStream{Stream: st}
	ts.release = func() { ts.once.Do(func() { t.n.Add(-1) }) }
	// A client that leaves stops reading: its cancelled context ends the
	// stream as far as the drain is concerned (the engine stops it within
	// its 100 ms contract).
	ts.stop = context.AfterFunc(ctx, ts.release)
	return ts, nil
}

type trackedStream struct {
	engine.Stream
	once    sync.Once
	release func()
	stop    func() bool
}

func (s *trackedStream) Recv() (engine.Delta, error) {
	d, err := s.Stream.Recv()
	if err != nil || d.Finish != engine.FinishNone {
		s.stop()
		s.release()
	}
	return d, err
}

// trackWorker wraps a started worker's generator so that its removal can
// wait for its streams, and records it in the pool.
func (s *System) trackWorker(id string, eng engine.Engine, gen engine.Generator) engine.Generator {
	if s.pool == nil {
		s.pool = &poolState{}
	}
	t := &tracked{Generator: gen}
	s.pool.mu.Lock()
	s.pool.members = append(s.pool.members, &member{id: id, eng: eng, gen: t})
	s.pool.mu.Unlock()
	return t
}

// setPoolFactory records what workers added at runtime are built from: the
// factory (indices after the started workers) and the frontend's model.
func (s *System) setPoolFactory(f EngineFactory, model *tokenizer.Model, next int) {
	if s.pool == nil {
		s.pool = &poolState{}
	}
	s.pool.factory, s.pool.model, s.pool.next = f, model, next
	s.pool.external = len(s.engines) > 0 && s.engines[0].Info().Kind == "upstream"
	if s.Registry != nil {
		// Collectors of runtime workers are gathered through one
		// registered collector, since an unchecked collector cannot be
		// unregistered when its worker leaves.
		_ = s.Registry.Register(unchecked{poolCollector{s.pool}})
	}
}

type poolCollector struct{ p *poolState }

func (c poolCollector) Describe(chan<- *prometheus.Desc) {}

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	c.p.mu.Lock()
	var cs []prometheus.Collector
	for _, m := range c.p.members {
		if m.coll != nil {
			cs = append(cs, m.coll)
		}
	}
	c.p.mu.Unlock()
	for _, x := range cs {
		x.Collect(ch)
	}
}

// PoolWorkers returns the ids of the routed workers (not those draining).
func (s *System) PoolWorkers() []string {
	if s.pool == nil {
		return nil
	}
	s.pool.mu.Lock()
	defer s.pool.mu.Unlock()
	out := make([]string, 0, len(s.pool.members))
	for _, m := range s.pool.members {
		out = append(out, m.id)
	}
	return out
}

// PoolSize is how many workers are routed to (draining ones excluded).
func (s *System) PoolSize() int { return len(s.PoolWorkers()) }

// ErrPoolFixed: the system's shape cannot grow or shrink at runtime.
var ErrPoolFixed = errors.New("serve: this system's pool cannot be resized at runtime (only aggregated in-process mocker or native workers can)")

// maxPoolWorkers bounds a runtime pool.
const maxPoolWorkers = 4096

// ScalePool grows or shrinks the routed workers to n. Growth builds
// engines from the factory and routes to each once built; shrinking
// removes the newest workers first, each taken out of the router, drained
// of its streams (up to DrainTimeout, or ctx) and then closed. It returns
// once the pool has its new size and the removed workers are closed.
func (s *System) ScalePool(ctx context.Context, n int) error {
	if n < 0 || n > maxPoolWorkers {
		return fmt.Errorf("serve: pool size %d out of 0..%d", n, maxPoolWorkers)
	}
	p := s.pool
	if p == nil || p.factory == nil {
		return ErrPoolFixed
	}
	if p.external || s.dis != nil || s.pd != nil || s.proxy != nil || (s.cfg.RequestPlane != "" && s.cfg.RequestPlane != "inproc") {
		return ErrPoolFixed
	}
	p.scale.Lock()
	defer p.scale.Unlock()
	for s.PoolSize() < n {
		if err := s.addPoolWorker(ctx); err != nil {
			return err
		}
	}
	for s.PoolSize() > n {
		if err := s.removePoolWorker(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (s *System) addPoolWorker(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("serve: add worker: %w", err)
	}
	p := s.pool
	p.mu.Lock()
	i := p.next
	p.next++
	p.mu.Unlock()
	eng, err := p.factory(i)
	if err != nil {
		return fmt.Errorf("serve: worker %d: %w", i, err)
	}
	info := eng.Info()
	info.Model = p.model.Name
	id := fmt.Sprintf("worker-%d", i)
	health.Attach(eng, s.Board, id)
	if src, ok := eng.(eventSource); ok && s.kv != nil && src.KVEventsEndpoint() != "" {
		if t, ok := eng.(engine.ReplayTokener); ok {
			s.kv.SetReplayToken(id, t.KVEventsReplayToken())
		}
		if err := s.kv.AddWorker(id, src.KVEventsEndpoint(), src.KVEventsReplayEndpoint(), info.BlockSize); err != nil {
			_ = eng.Close()
			return fmt.Errorf("serve: worker %s: %w", id, err)
		}
	}
	gen := s.trackWorker(id, eng, eng)
	if c, ok := eng.(engine.MetricsCollector); ok {
		p.mu.Lock()
		p.members[len(p.members)-1].coll = c.Collector()
		p.mu.Unlock()
	}
	timing, _ := eng.(engine.PrefillEstimator)
	queue, _ := eng.(engine.QueueReporter)
	s.Router.AddWorker(router.Worker{ID: id, Model: p.model.Name, Gen: gen, Info: info, Timing: timing, Queue: queue})
	s.log.Info("pool worker added", "worker", id, "pool_size", s.PoolSize())
	return nil
}

func (s *System) removePoolWorker(ctx context.Context) error {
	p := s.pool
	p.mu.Lock()
	if len(p.members) == 0 {
		p.mu.Unlock()
		return nil
	}
	m := p.members[len(p.members)-1]
	p.members = p.members[:len(p.members)-1]
	p.mu.Unlock()
	// Out of the router first: from here on no request is routed to it.
	s.Router.RemoveWorker(m.id)
	if s.kv != nil {
		s.kv.RemoveWorker(m.id)
	}
	dctx, cancel := context.WithTimeout(ctx, s.cfg.DrainTimeout)
	defer cancel()
	start := time.Now()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
drain:
	for !m.gen.closeIfIdle() {
		select {
		case <-dctx.Done():
			s.log.Warn("pool worker drain timed out: closing it with streams in flight", "diagnostic_code", process.DiagDrainTimeout,
				"worker", m.id, "streams", m.gen.n.Load(), "waited", time.Since(start))
			m.gen.mu.Lock()
			m.gen.closed = true
			m.gen.mu.Unlock()
			break drain
		case <-tick.C:
		}
	}
	s.forgetEngine(m)
	if err := m.eng.Close(); err != nil {
		s.log.Warn("closing removed worker's engine", "worker", m.id, "err", err)
	}
	s.log.Info("pool worker removed", "worker", m.id, "drained_in", time.Since(start), "pool_size", s.PoolSize())
	return nil
}

// forgetEngine drops a started worker's engine from the list Shutdown
// closes, so it is closed once.
func (s *System) forgetEngine(m *member) {
	s.pool.mu.Lock()
	defer s.pool.mu.Unlock()
	s.engines = slices.DeleteFunc(s.engines, func(x engine.Engine) bool { return x == m.eng })
	s.Workers = slices.DeleteFunc(s.Workers, func(w WorkerInfo) bool { return w.ID == m.id })
}

// closePool closes the engines of workers added at runtime (Shutdown).
func (s *System) closePool() {
	if s.pool == nil {
		return
	}
	s.pool.mu.Lock()
	ms := slices.Clone(s.pool.members)
	s.pool.mu.Unlock()
	for _, m := range ms {
		if slices.Contains(s.engines, m.eng) {
			continue // closed with the started workers
		}
		if err := m.eng.Close(); err != nil {
			s.log.Warn("closing engine", "err", err)
		}
	}
}

// PoolActuator is the pool as the planner's Actuator (`tandem serve
// --autoscale`): one pool, named Pool.
type PoolActuator struct {
	System *System
	Pool   string
}

// Replicas returns the pool's routed workers.
func (a PoolActuator) Replicas(context.Context) (map[string]int, error) {
	return map[string]int{a.Pool: a.System.PoolSize()}, nil
}

// Scale resizes the pool (ScalePool: removal drains).
func (a PoolActuator) Scale(ctx context.Context, pool string, n int) error {
	if pool != a.Pool {
		return fmt.Errorf("serve: no pool %q (this process has one, %q)", pool, a.Pool)
	}
	return a.System.ScalePool(ctx, n)
}
