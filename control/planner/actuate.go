package planner

import (
	"context"
	"fmt"
	"io"
	"sync"
)

// Actuator reads and sets pool sizes: a TandemDeployment or Deployments
// (control/planner/kube), worker processes on this host (control/planner/local), or the
// in-process pools of `tandem serve`.
type Actuator interface {
	// Replicas returns each pool's current size (workers started and not
	// being removed).
	Replicas(ctx context.Context) (map[string]int, error)
	// Scale sets pool to n workers. Removal must drain: a removed worker
	// takes no new request and finishes its streams before it stops.
	Scale(ctx context.Context, pool string, n int) error
}

// DryRun wraps an actuator: it reads the real sizes but only prints what
// Scale would do.
type DryRun struct {
	Actuator Actuator
	Out      io.Writer
	mu       sync.Mutex
}

// Replicas implements Actuator.
func (d *DryRun) Replicas(ctx context.Context) (map[string]int, error) {
	return d.Actuator.Replicas(ctx)
}

// Scale implements Actuator by printing.
func (d *DryRun) Scale(_ context.Context, pool string, n int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, err := fmt.Fprintf(d.Out, "dry-run: would scale pool %s to %d\n", pool, n)
	return err
}

// Static is an in-memory actuator (tests, and the simulate command's
// bookkeeping): Scale just records the size.
type Static struct {
	mu sync.Mutex
	n  map[string]int
}

// NewStatic returns an actuator holding sizes.
func NewStatic(sizes map[string]int) *Static {
	m := map[string]int{}
	for k, v := range sizes {
		m[k] = v
	}
	return &Static{n: m}
}

// Replicas implements Actuator.
func (s *Static) Replicas(context.Context) (map[string]int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for k, v := range s.n {
		out[k] = v
	}
	return out, nil
}

// Scale implements Actuator.
func (s *Static) Scale(_ context.Context, pool string, n int) error {
	if n < 0 {
		return fmt.Errorf("planner: pool %s: negative size %d", pool, n)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n[pool] = n
	return nil
}
