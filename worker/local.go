package worker

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tandemllm/tandem/engine"
)

// gate is the in-process transport's server side: it counts the worker's
// streams in flight, which the drain waits for, as gRPC's GracefulStop
// does on the request plane. Once closed it refuses new streams with
// engine.ErrUnavailable: a request the router picked this worker for just
// before it left is retried on another worker by the frontend instead of
// failing.
type gate struct {
	engine.Generator
	n      atomic.Int64
	mu     sync.Mutex
	closed bool
}

// closeIfIdle closes the gate if no stream is in flight.
func (t *gate) closeIfIdle() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n.Load() > 0 {
		return false
	}
	t.closed = true
	return true
}

func (t *gate) Generate(ctx context.Context, req *engine.Request) (engine.Stream, error) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, fmt.Errorf("%w: the worker left its pool", engine.ErrUnavailable)
	}
	t.n.Add(1)
	t.mu.Unlock()
	st, err := t.Generator.Generate(ctx, req)
	if err != nil {
		t.n.Add(-1)
		return nil, err
	}
	ts := &gatedStream{Stream: st}
	ts.release = func() { ts.once.Do(func() { t.n.Add(-1) }) }
	// A client that leaves stops reading: its cancelled context ends the
	// stream as far as the drain is concerned (the engine stops it within
	// its 100 ms contract).
	ts.stop = context.AfterFunc(ctx, ts.release)
	return ts, nil
}

type gatedStream struct {
	engine.Stream
	once    sync.Once
	release func()
	stop    func() bool
}

func (s *gatedStream) Recv() (engine.Delta, error) {
	d, err := s.Stream.Recv()
	if err != nil || d.Finish != engine.FinishNone {
		s.stop()
		s.release()
	}
	return d, err
}

// drainGate waits until the in-process worker's streams have finished,
// or ctx ends (then it closes the gate with streams in flight, which the
// engine's close cuts).
func (w *Worker) drainGate(ctx context.Context) {
	start := time.Now()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !w.gate.closeIfIdle() {
		select {
		case <-ctx.Done():
			// Logged, not raised: the worker is gone from its frontend's
			// board with its record.
			w.log.Warn("worker drain timed out: closing it with streams in flight", "diagnostic_code", DiagDrainTimeout,
				"streams", w.gate.n.Load(), "waited", time.Since(start))
			w.gate.mu.Lock()
			w.gate.closed = true
			w.gate.mu.Unlock()
			return
		case <-tick.C:
		}
	}
}
