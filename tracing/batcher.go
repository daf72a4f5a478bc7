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

// batcher is the span processor NewProvider installs in place of the SDK's
// batch span processor. The SDK's hands every ended span to its export
// goroutine over a channel, waking that goroutine once per span (eight
// to nine per request); on a loaded machine those wake-ups showed up in
// the request's latency (BenchmarkTracingCost, docs/benchmarks/tracing.md).
// Here an ended span is appended to a slice under a mutex, and the export
// goroutine wakes once per interval or once per full batch.
//
// The queue is bounded: beyond maxQueue spans waiting, new ones are
// dropped and counted, and the next export logs how many (the collector
// is slower than the traffic, or down).
type batcher struct {
	exp      sdktrace.SpanExporter
	interval time.Duration
	maxBatch int
	maxQueue int
	log      *slog.Logger

	mu      sync.Mutex
	queue   []sdktrace.ReadOnlySpan
	stopped bool

	full    chan struct{} // a batch is ready (capacity 1)
	stop    chan struct{}
	done    chan struct{}
	dropped atomic.Int64
	export  sync.Mutex // one export at a time (the loop, ForceFlush)
}

func newBatcher(exp sdktrace.SpanExporter, interval time.Duration, log *slog.Logger) *batcher {
	return newBatcherSized(exp, interval, 512, 8192, log)
}

func newBatcherSized(exp sdktrace.SpanExporter, interval time.Duration, maxBatch, maxQueue int, log *slog.Logger) *batcher {
	b := &batcher{exp: exp, interval: interval, maxBatch: maxBatch, maxQueue: maxQueue, log: log,
		full: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go b.loop()
	return b
}

func (b *batcher) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

func (b *batcher) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	b.mu.Lock()
	switch {
	case b.stopped:
	case len(b.queue) >= b.maxQueue:
		b.dropped.Add(1)
	default:
		b.queue = append(b.queue, s)
		if len(b.queue) == b.maxBatch {
			select {
			case b.full <- struct{}{}:
			default:
			}
		}
	}
	b.mu.Unlock()
}

func (b *batcher) loop() {
	defer close(b.done)
	t := time.NewTicker(b.interval)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
		case <-b.full:
		}
		_ = b.flush(context.Background())
	}
}

// flush exports everything queued, in batches of maxBatch, each bounded
// by ctx and a 10 s timeout (an exporter that hangs costs dropped spans,
// never a stuck process).
func (b *batcher) flush(ctx context.Context) error {
	b.export.Lock()
	defer b.export.Unlock()
	b.mu.Lock()
	q := b.queue
	b.queue = make([]sdktrace.ReadOnlySpan, 0, min(len(q), b.maxBatch))
	b.mu.Unlock()
	if n := b.dropped.Swap(0); n > 0 && b.log != nil {
		b.log.Warn("dropped spans: the trace collector is slower than the traffic, or down", "spans", n)
	}
	var errs error
	for len(q) > 0 {
		n := min(len(q), b.maxBatch)
		ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := b.exp.ExportSpans(ectx, q[:n]); err != nil {
			errs = errors.Join(errs, err)
		}
		cancel()
		q = q[n:]
	}
	return errs
}

func (b *batcher) ForceFlush(ctx context.Context) error { return b.flush(ctx) }

func (b *batcher) Shutdown(ctx context.Context) error {
	b.mu.Lock()
	if b.stopped {
		b.mu.Unlock()
		return nil
	}
	b.stopped = true
	b.mu.Unlock()
	close(b.stop)
	select {
	case <-b.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return errors.Join(b.flush(ctx), b.exp.Shutdown(ctx))
}
