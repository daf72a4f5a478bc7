package httpapi

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/openai"
)

// DiagSaturated: a model's admission limit and queue are full; requests
// past them get 429 with Retry-After. Cleared once its queue drains.
const DiagSaturated = "frontend_saturated"

// admission is one model's concurrency limit and bounded queue. Requests
// past maxInflight wait (FIFO through the semaphore) up to queueTimeout;
// past maxQueue they are refused at once. Both bounds keep one client's
// burst from making every other request wait without an answer.
type admission struct {
	model        string
	sem          chan struct{} // nil: no limit
	maxQueue     int
	queueTimeout time.Duration
	board        *health.Board
	rejected     func(reason string)
	// wait is how long a request may wait for a slot (the shorter of
	// --admission-wait and --queue-timeout).
	wait time.Duration

	mu        sync.Mutex
	waiting   int
	saturated bool
	done      completions // under mu
}

// completionWindow is how far back the completion rate looks: long enough
// to count a few completions of long streams, short enough to follow a
// change of load.
const completionWindow = 10

// completions counts released slots per second over the last
// completionWindow seconds, for Retry-After.
type completions struct {
	sec    [completionWindow]int64 // unix second of each bucket
	counts [completionWindow]int
}

func (c *completions) add(now int64) {
	i := now % completionWindow
	if c.sec[i] != now {
		c.sec[i], c.counts[i] = now, 0
	}
	c.counts[i]++
}

// rate is completions per second over the window ending at now.
func (c *completions) rate(now int64) float64 {
	n := 0
	for i := range c.sec {
		if now-c.sec[i] < completionWindow {
			n += c.counts[i]
		}
	}
	return float64(n) / completionWindow
}

// retryAfterLocked is when a slot is likely to be free for a request that
// would queue behind a.waiting others: (waiting+1) / completion rate,
// rounded up, between 1 s and 60 s; with no completion in the window,
// the window's length (nothing finished for that long, so sooner would be
// a guess).
func (a *admission) retryAfterLocked(floor int) int {
	r := a.done.rate(time.Now().Unix())
	secs := completionWindow
	if r > 0 {
		secs = int(math.Ceil(float64(a.waiting+1) / r))
	}
	return min(max(secs, floor, 1), 60)
}

func newAdmission(model string, cfg Config, board *health.Board, rejected func(string)) *admission {
	a := &admission{model: model, maxQueue: cfg.MaxQueue, queueTimeout: cfg.QueueTimeout, board: board, rejected: rejected}
	if cfg.MaxInflight > 0 {
		a.sem = make(chan struct{}, cfg.MaxInflight)
	}
	if a.queueTimeout <= 0 {
		a.queueTimeout = 30 * time.Second
	}
	a.wait = a.queueTimeout
	if cfg.AdmissionWait > 0 && cfg.AdmissionWait < a.wait {
		a.wait = cfg.AdmissionWait
	}
	return a
}

// acquire admits one request or answers why not; release must be called
// once for every admitted request.
func (a *admission) acquire(ctx context.Context, retryAfter int) (release func(), e *openai.Error) {
	if a.sem == nil {
		return func() {}, nil
	}
	select {
	case a.sem <- struct{}{}:
		return a.release, nil
	default:
	}
	a.mu.Lock()
	if a.waiting >= a.maxQueue {
		a.raiseLocked()
		ra := a.retryAfterLocked(0)
		a.mu.Unlock()
		a.rejected("queue_full")
		return nil, tooMany(ra, "model %q is at its limit of %d requests in flight and %d queued; retry later", a.model, cap(a.sem), a.maxQueue)
	}
	a.waiting++
	a.mu.Unlock()
	t := time.NewTimer(a.wait)
	defer t.Stop()
	var err *openai.Error
	select {
	case a.sem <- struct{}{}:
	case <-t.C:
		a.rejected("queue_timeout")
		a.mu.Lock()
		ra := a.retryAfterLocked(0)
		a.mu.Unlock()
		err = tooMany(ra, "model %q: no capacity freed within %v (--admission-wait); retry after %d s", a.model, a.wait, ra)
	case <-ctx.Done():
		a.rejected("client_gone")
		err = &openai.Error{Status: 499, Type: "cancelled", Code: "client_closed_request", Message: "the client closed the request"}
	}
	a.mu.Lock()
	a.waiting--
	if err != nil && err.Status == 429 {
		a.raiseLocked()
	}
	a.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return a.release, nil
}

func (a *admission) release() {
	<-a.sem
	a.mu.Lock()
	a.done.add(time.Now().Unix())
	clear := a.saturated && a.waiting == 0 && len(a.sem) < cap(a.sem)
	if clear {
		a.saturated = false
	}
	a.mu.Unlock()
	if clear && a.board != nil {
		a.board.Clear(DiagSaturated, a.model, DiagUnsaturated, "the model's admission queue drained")
	}
}

func (a *admission) raiseLocked() {
	if a.saturated {
		return
	}
	a.saturated = true
	if a.board != nil {
		a.board.Raise(DiagSaturated, a.model, health.Warn,
			fmt.Sprintf("model at its admission limit (%d in flight, %d queued): new requests get 429", cap(a.sem), a.maxQueue))
	}
}

// state is what /health shows of the model's admission.
func (a *admission) state() (inflight, queued int, saturated bool) {
	if a.sem == nil {
		return 0, 0, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.sem), a.waiting, a.saturated
}

func tooMany(retryAfter int, format string, args ...any) *openai.Error {
	return &openai.Error{Status: 429, Type: "requests", Code: "rate_limit_exceeded",
		Message: fmt.Sprintf(format, args...), RetryAfter: max(retryAfter, 1)}
}
