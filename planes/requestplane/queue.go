package requestplane

import (
	"context"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/internal/backoff"
	rpv1 "github.com/tandemllm/tandem/planes/requestplane/proto/tandem/requestplane/v1"
)

// QueueInterval is how often a worker sends its engine's queue report on a
// WatchQueue stream: half the upstream engine's default scrape interval,
// so a report is never more than one scrape behind.
const QueueInterval = time.Second

// WatchQueue implements the Worker service: the engine's own queue report
// (engine.QueueReporter) every QueueInterval until the caller goes away.
func (h *handler) WatchQueue(_ *rpv1.WatchQueueRequest, stream grpc.ServerStreamingServer[rpv1.QueueReport]) error {
	q, ok := h.eng.(engine.QueueReporter)
	if !ok {
		return status.Errorf(codes.Unimplemented, "requestplane: engine %s reports no queue of its own", h.eng.Info().Kind)
	}
	t := time.NewTicker(QueueInterval)
	defer t.Stop()
	for {
		running, waiting, at, known := q.EngineQueue()
		m := &rpv1.QueueReport{Known: known}
		if known {
			m.Running, m.Waiting = clampInt32(running), clampInt32(waiting)
			m.AgeMs = max(time.Since(at).Milliseconds(), 0)
		}
		if err := stream.Send(m); err != nil {
			return err
		}
		select {
		case <-stream.Context().Done():
			return nil
		case <-t.C:
		}
	}
}

func clampInt32(v int) int32 { return int32(min(max(v, 0), 1<<31-1)) }

// QueueWatch follows a worker's WatchQueue stream and answers
// engine.QueueReporter from the last report, so the frontend's router can
// count an upstream server's other clients. It reconnects with jittered
// backoff while the worker is reachable, and stops for good when the
// worker's engine has no queue report (UNIMPLEMENTED) or Close is called.
type QueueWatch struct {
	cancel context.CancelFunc
	done   chan struct{}
	// last is the latest report (nil: unknown). A pointer swap, because
	// the router reads it for every candidate of every decision.
	last atomic.Pointer[queueReport]
}

type queueReport struct {
	running, waiting int
	at               time.Time
}

// WatchQueue starts following c's worker.
func (c *Client) WatchQueue(ctx context.Context) *QueueWatch {
	ctx, cancel := context.WithCancel(ctx)
	q := &QueueWatch{cancel: cancel, done: make(chan struct{})}
	go q.run(ctx, c.w)
	return q
}

// EngineQueue implements engine.QueueReporter. A report the stream has
// not refreshed for three intervals is unknown: the worker or its link is
// gone, and its last word no longer describes it.
func (q *QueueWatch) EngineQueue() (running, waiting int, at time.Time, ok bool) {
	r := q.last.Load()
	if r == nil {
		return 0, 0, time.Time{}, false
	}
	return r.running, r.waiting, r.at, true
}

// Close stops the watch and waits for its goroutine.
func (q *QueueWatch) Close() {
	q.cancel()
	<-q.done
}

func (q *QueueWatch) run(ctx context.Context, w rpv1.WorkerClient) {
	defer close(q.done)
	bo := backoff.Backoff{Base: 250 * time.Millisecond, Max: 10 * time.Second}
	for ctx.Err() == nil {
		err := q.follow(ctx, w, &bo)
		q.set(nil, time.Time{})
		if status.Code(err) == codes.Unimplemented {
			return
		}
		if !backoff.Sleep(ctx, bo.Next()) {
			return
		}
	}
}

// follow reads one stream until it breaks; a stream that stays silent for
// three intervals is dropped (every receive has a deadline).
func (q *QueueWatch) follow(ctx context.Context, w rpv1.WorkerClient, bo *backoff.Backoff) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := w.WatchQueue(sctx, &rpv1.WatchQueueRequest{})
	if err != nil {
		return err
	}
	silent := time.AfterFunc(3*QueueInterval, cancel)
	defer silent.Stop()
	for {
		m, err := st.Recv()
		if err != nil {
			return err
		}
		silent.Reset(3 * QueueInterval)
		bo.Reset()
		q.set(m, time.Now())
	}
}

func (q *QueueWatch) set(m *rpv1.QueueReport, now time.Time) {
	if m == nil || !m.GetKnown() {
		q.last.Store(nil)
		return
	}
	q.last.Store(&queueReport{running: int(m.GetRunning()), waiting: int(m.GetWaiting()), at: now.Add(-time.Duration(min(max(m.GetAgeMs(), 0), int64(time.Hour/time.Millisecond))) * time.Millisecond)})
}
