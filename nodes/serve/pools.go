package serve

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/tandemllm/tandem/control/discovery"
)

// The in-process pool: `tandem serve` grows and shrinks its workers at
// runtime (the planner's in-process actuator). A worker that leaves is
// deregistered first, so the frontend node takes it out of the router and
// it gets no new request, and is stopped only once its streams in flight
// have finished (or DrainTimeout passed), so scaling down fails no request.
// Scaling to zero keeps the model registered with the frontend: /v1/models
// still lists it and requests get 503 with Retry-After until a worker is
// back.

// poolState is what workers added at runtime are built from.
type poolState struct {
	scale   sync.Mutex // one scale operation at a time
	next    int        // the factory index of the next worker
	factory EngineFactory
	// external: the workers front servers this process does not start
	// (engine/upstream), so the pool cannot grow them.
	external bool
}

// PoolWorkers returns the ids of the routed workers (not those draining).
func (s *System) PoolWorkers() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.routed))
	for _, n := range s.routed {
		out = append(out, n.id)
	}
	return out
}

// PoolSize is how many workers are routed to (draining ones excluded).
func (s *System) PoolSize() int { return len(s.PoolWorkers()) }

// ErrPoolFixed: the system's shape cannot grow or shrink at runtime.
var ErrPoolFixed = errors.New("serve: this system's pool cannot be resized at runtime (only aggregated in-process mocker or native workers can)")

// maxPoolWorkers bounds a runtime pool.
const maxPoolWorkers = 4096

// memberWait bounds how long the pool waits for the frontend node to hear
// of a worker that joined or left (the in-process registry tells it at
// once).
const memberWait = 30 * time.Second

// ScalePool grows or shrinks the routed workers to n. Growth builds
// engines from the factory and routes to each once built; shrinking
// removes the newest workers first, each taken out of the router, drained
// of its streams (up to DrainTimeout, or ctx) and then closed. It returns
// once the pool has its new size and the removed workers are closed.
func (s *System) ScalePool(ctx context.Context, n int) error {
	if n < 0 || n > maxPoolWorkers {
		return fmt.Errorf("serve: pool size %d out of 0..%d", n, maxPoolWorkers)
	}
	p := &s.pool
	if p.factory == nil || p.external || s.cfg.Disagg.Enabled() || s.cfg.VLLMPD.Enabled || s.cfg.PDPrefillWorkers > 0 || s.cfg.RequestPlane == "grpc" {
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
	i := s.pool.next
	s.pool.next++
	eng, err := s.pool.factory(i)
	if err != nil {
		return fmt.Errorf("serve: worker %d: %w", i, err)
	}
	n := &node{id: fmt.Sprintf("worker-%d", i), role: discovery.RoleAggregated, eng: eng}
	if err := s.startNode(n); err != nil {
		_ = eng.Close()
		return err
	}
	s.mu.Lock()
	s.routed, s.Workers = append(s.routed, n), append(s.Workers, s.workerInfo(n))
	s.mu.Unlock()
	if err := s.awaitMember(ctx, n.id, true); err != nil {
		return err
	}
	s.log.Info("pool worker added", "worker", n.id, "pool_size", s.PoolSize())
	return nil
}

func (s *System) removePoolWorker(ctx context.Context) error {
	s.mu.Lock()
	if len(s.routed) == 0 {
		s.mu.Unlock()
		return nil
	}
	n := s.routed[len(s.routed)-1]
	s.routed = s.routed[:len(s.routed)-1]
	s.Workers = slices.DeleteFunc(s.Workers, func(w WorkerInfo) bool { return w.ID == n.id })
	s.mu.Unlock()
	start := time.Now()
	// Out of the router first: from here on no request is routed to it.
	if err := n.w.Deregister(ctx); err != nil {
		s.log.Warn("deregistering a pool worker", "worker", n.id, "err", err)
	}
	if err := s.awaitMember(ctx, n.id, false); err != nil {
		s.log.Warn("the frontend still routes to a removed pool worker; draining it anyway", "worker", n.id, "err", err)
	}
	dctx, cancel := context.WithTimeout(ctx, s.cfg.DrainTimeout)
	defer cancel()
	if err := n.w.Shutdown(dctx); err != nil {
		s.log.Warn("stopping removed worker", "worker", n.id, "err", err)
	}
	s.log.Info("pool worker removed", "worker", n.id, "drained_in", time.Since(start), "pool_size", s.PoolSize())
	return nil
}

// awaitMember waits until the frontend node holds worker id (in) or no
// longer does.
func (s *System) awaitMember(ctx context.Context, id string, in bool) error {
	ctx, cancel := context.WithTimeout(ctx, memberWait)
	defer cancel()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for slices.Contains(s.Members(), id) != in {
		select {
		case <-ctx.Done():
			return fmt.Errorf("serve: worker %s: the frontend did not follow its registration: %w", id, ctx.Err())
		case <-tick.C:
		}
	}
	return nil
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
