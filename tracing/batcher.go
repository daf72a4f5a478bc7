package tracing

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// queue is the export queue behind both span pipelines: the SDK's (the
// sdkBatcher below, NewProvider) and the lean one (Provider, lean.go). The
// SDK's own batch span processor hands every ended span to its export
// goroutine over a channel, waking that goroutine once per span (eight to
// nine per request); on a loaded machine those wake-ups showed up in the
// request's latency (BenchmarkTracingCost, docs/benchmarks/tracing.md).
// Here an ended span is appended to a slice under a mutex, and the export
// goroutine wakes once per interval or once per full batch.
//
// The queue is bounded: beyond maxQueue spans waiting, new ones are
// dropped and counted, and the next export logs how many (the collector
// is slower than the traffic, or down).
type queue[S any] struct {
	exp      func(context.Context, []S) error
	interval time.Duration
	maxBatch int
	maxQueue int
	log      *slog.Logger

	mu      sync.Mutex
	spans   []S
	stopped bool

	full    chan struct{} // a batch is ready (capacity 1)
	stop    chan struct{}
	done    chan struct{}
	dropped atomic.Int64
	export  sync.Mutex // one export at a time (the loop, ForceFlush)
}

func newQueue[S any](exp func(context.Context, []S) error, interval time.Duration, maxBatch, maxQueue int, log *slog.Logger) *queue[S] {
	q := &queue[S]{exp: exp, interval: interval, maxBatch: maxBatch, maxQueue: maxQueue, log: log,
		full: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go q.loop()
	return q
}

// add queues one ended span.
func (q *queue[S]) add(s S) {
	q.mu.Lock()
	switch {
	case q.stopped:
	case len(q.spans) >= q.maxQueue:
		q.dropped.Add(1)
	default:
		q.spans = append(q.spans, s)
		if len(q.spans) == q.maxBatch {
			select {
			case q.full <- struct{}{}:
			default:
			}
		}
	}
	q.mu.Unlock()
}

func (q *queue[S]) loop() {
	defer close(q.done)
	t := time.NewTicker(q.interval)
	defer t.Stop()
	for {
		select {
		case <-q.stop:
			return
		case <-t.C:
		case <-q.full:
		}
		if err := q.flush(context.Background()); err != nil && q.log != nil {
			q.log.Warn("exporting spans failed; they are dropped", "err", err)
		}
	}
}

// flush exports everything queued, in batches of maxBatch, each bounded
// by ctx and a 10 s timeout (an exporter that hangs costs dropped spans,
// never a stuck process).
func (q *queue[S]) flush(ctx context.Context) error {
	q.export.Lock()
	defer q.export.Unlock()
	q.mu.Lock()
	batch := q.spans
	q.spans = make([]S, 0, min(len(batch), q.maxBatch))
	q.mu.Unlock()
	if n := q.dropped.Swap(0); n > 0 && q.log != nil {
		q.log.Warn("dropped spans: the trace collector is slower than the traffic, or down", "spans", n)
	}
	var errs error
	for len(batch) > 0 {
		n := min(len(batch), q.maxBatch)
		ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := q.exp(ectx, batch[:n]); err != nil {
			errs = errors.Join(errs, err)
		}
		cancel()
		batch = batch[n:]
	}
	return errs
}

// shutdown stops the loop and exports what is left.
func (q *queue[S]) shutdown(ctx context.Context) error {
	q.mu.Lock()
	if q.stopped {
		q.mu.Unlock()
		return nil
	}
	q.stopped = true
	q.mu.Unlock()
	close(q.stop)
	select {
	case <-q.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return q.flush(ctx)
}

// sdkBatcher is the SDK span processor NewProvider installs in place of
// the SDK's batch span processor.
type sdkBatcher struct {
	*queue[sdktrace.ReadOnlySpan]
	exp sdktrace.SpanExporter
}

func newBatcher(exp sdktrace.SpanExporter, interval time.Duration, log *slog.Logger) *sdkBatcher {
	return newBatcherSized(exp, interval, 512, 8192, log)
}

func newBatcherSized(exp sdktrace.SpanExporter, interval time.Duration, maxBatch, maxQueue int, log *slog.Logger) *sdkBatcher {
	return &sdkBatcher{queue: newQueue(exp.ExportSpans, interval, maxBatch, maxQueue, log), exp: exp}
}

func (b *sdkBatcher) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

func (b *sdkBatcher) OnEnd(s sdktrace.ReadOnlySpan) {
	if s.SpanContext().IsSampled() {
		b.add(s)
	}
}

func (b *sdkBatcher) ForceFlush(ctx context.Context) error { return b.flush(ctx) }

func (b *sdkBatcher) Shutdown(ctx context.Context) error {
	return errors.Join(b.shutdown(ctx), b.exp.Shutdown(ctx))
}
