package mocker

import (
	"context"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/tandemllm/tandem/engine"
)

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchmarkIdleWorkers creates b.N idle workers and reports what each
// costs: heap, goroutine stacks, goroutines, and the CPU the whole idle
// fleet burns per second (which must be ~0: no tickers, no polling).
// Run with -benchtime=1000x for the 1,000-worker figure.
func benchmarkIdleWorkers(b *testing.B, events bool) {
	cfg := Config{Model: "mocker", Vocabulary: vocab, Logger: quiet(), KVCapacityTokens: SeedKVCapacityTokens}
	if events {
		cfg.KVEvents = KVEventsConfig{Enabled: true, Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0"}
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	g0 := runtime.NumGoroutine()
	workers := make([]*Engine, 0, b.N)
	for range b.N {
		e, err := New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		workers = append(workers, e)
	}
	time.Sleep(100 * time.Millisecond) // let every goroutine park
	runtime.GC()
	runtime.ReadMemStats(&after)
	goroutines := runtime.NumGoroutine() - g0
	c0 := cpuTime()
	time.Sleep(time.Second)
	idleCPU := cpuTime() - c0
	n := float64(b.N)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heap-B/worker")
	b.ReportMetric(float64(after.StackInuse-before.StackInuse)/n, "stack-B/worker")
	b.ReportMetric(float64(goroutines)/n, "goroutines/worker")
	b.ReportMetric(float64(idleCPU)/float64(time.Millisecond), "idle-CPU-ms/s")
	b.StopTimer()
	for _, e := range workers {
		e.Close()
	}
	runtime.KeepAlive(workers)
}

func BenchmarkIdleWorkers(b *testing.B)           { benchmarkIdleWorkers(b, false) }
func BenchmarkIdleWorkersWithEvents(b *testing.B) { benchmarkIdleWorkers(b, true) }

// benchmarkStep measures the scheduler's own cost per step in instant mode
// with 64 running sequences (128-token prompts sharing 64-token prefixes,
// 512 output tokens, replaced as they finish): scheduling, block
// allocation and commits (hashing), token emission into the Pipes, metrics
// and, with events on, encoding and queueing the KV event batch.
func benchmarkStep(b *testing.B, events bool) {
	const live = 64
	cfg := Config{Instant: true, Vocabulary: vocab, Logger: quiet(), KVCapacityTokens: 1 << 20}
	if events {
		cfg.KVEvents = KVEventsConfig{Enabled: true, Endpoint: "tcp://127.0.0.1:0"}
	}
	e, err := newEngine(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if e.pub != nil {
			e.pub.Close()
		}
	}()
	ctx := context.Background()
	next := 0
	topUp := func() {
		for int(e.loadRunning.Load()+e.loadWaiting.Load())+len(e.inbox) < live {
			p := append(prompt(1000*(next%8), 64), prompt(1_000_000+128*next, 64)...)
			if _, err := e.Generate(ctx, &engine.Request{Prompt: p, MaxTokens: 512, IgnoreEOS: true}); err != nil {
				b.Fatal(err)
			}
			next++
		}
		e.drain()
	}
	for range 600 { // reach steady state: staggered finishes
		topUp()
		e.step()
	}
	tokens0 := e.stats.generationTokens.Load()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		topUp()
		e.step()
	}
	b.StopTimer()
	tokens := e.stats.generationTokens.Load() - tokens0
	b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tokens/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(tokens), "ns/token")
}

func BenchmarkSchedulerStep64(b *testing.B)           { benchmarkStep(b, false) }
func BenchmarkSchedulerStep64WithEvents(b *testing.B) { benchmarkStep(b, true) }
