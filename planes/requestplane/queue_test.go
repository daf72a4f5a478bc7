package requestplane

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/enginetest"
)

// queueEngine is a Scripted engine that reports its own queue, as an
// upstream server's /metrics does (engine/upstream); waiting is set by
// the test.
type queueEngine struct {
	enginetest.Scripted
	waiting atomic.Int32
}

func (e *queueEngine) EngineQueue() (int, int, time.Time, bool) {
	return 3, int(e.waiting.Load()), time.Now().Add(-200 * time.Millisecond), true
}

var _ engine.QueueReporter = (*queueEngine)(nil)

// TestWatchQueue: a worker's engine queue report reaches the frontend's
// side over the real request plane, follows changes, goes unknown when
// the worker stops, and a worker whose engine has none ends the watch.
func TestWatchQueue(t *testing.T) {
	eng := &queueEngine{Scripted: enginetest.Scripted{Name: "m"}}
	eng.waiting.Store(7)
	srv := NewServer(eng, nil, 0)
	c := listen(t, srv)
	q := c.WatchQueue(t.Context())
	defer q.Close()
	wait := func(what string, ok func(running, waiting int, at time.Time, known bool) bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			r, w, at, known := q.EngineQueue()
			if ok(r, w, at, known) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s: last report %d running, %d waiting, at %v, known %v", what, r, w, at, known)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	wait("the first report", func(r, w int, at time.Time, known bool) bool {
		// The measurement's age travels, so its time is the worker's
		// minus the age, not the arrival.
		return known && r == 3 && w == 7 && time.Since(at) >= 150*time.Millisecond
	})
	eng.waiting.Store(0)
	wait("the queue to drain", func(_, w int, _ time.Time, known bool) bool { return known && w == 0 })
	srv.Stop()
	wait("the report to go unknown", func(_, _ int, _ time.Time, known bool) bool { return !known })

	plain := listen(t, NewServer(&enginetest.Scripted{Name: "m"}, nil, 0))
	pq := plain.WatchQueue(t.Context())
	defer pq.Close()
	select {
	case <-pq.done: // UNIMPLEMENTED ended it, without Close
	case <-time.After(30 * time.Second):
		t.Fatal("a watch of a worker without a queue report did not end")
	}
	if _, _, _, known := pq.EngineQueue(); known {
		t.Fatal("a worker without a queue report reported one")
	}
}
