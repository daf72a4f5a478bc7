package mocker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/tandemllm/tandem/engine"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// vocab stands in for a tokenized English text.
var vocab = []engine.Token{100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110}

func newTest(t *testing.T, cfg Config) *Engine {
	t.Helper()
	cfg.Logger = quiet()
	if cfg.Vocabulary == nil {
		cfg.Vocabulary = vocab
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func prompt(start, n int) []engine.Token {
	p := make([]engine.Token, n)
	for i := range p {
		p[i] = engine.Token(start + i)
	}
	return p
}

type result struct {
	tokens       []engine.Token
	finish       engine.FinishReason
	prompt, hit  int
	deltas       int
	firstPrompt  bool
	err          error
	firstCarried bool
}

// collect reads a stream to its end.
func collect(t *testing.T, s engine.Stream) result {
	t.Helper()
	var r result
	for {
		d, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return r
		}
		if err != nil {
			r.err = err
			return r
		}
		if r.deltas == 0 {
			r.prompt, r.hit = d.PromptTokens, d.CachedTokens
		}
		r.deltas++
		r.tokens = append(r.tokens, d.Tokens...)
		if d.Finish != engine.FinishNone {
			r.finish = d.Finish
		}
	}
}

// schedState reads scheduler-owned counters on the scheduler goroutine.
func schedState(t *testing.T, e *Engine) (steps uint64, invariantErr error) {
	t.Helper()
	if err := e.do(context.Background(), func() { steps, invariantErr = e.steps, e.validateErr }); err != nil {
		t.Fatal(err)
	}
	return steps, invariantErr
}

func generate(t *testing.T, e *Engine, req *engine.Request) result {
	t.Helper()
	s, err := e.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return collect(t, s)
}

func TestGenerateDeterministic(t *testing.T) {
	cfg := Config{Instant: true, Seed: 7}
	req := &engine.Request{Prompt: prompt(1, 40), MaxTokens: 25}
	a := generate(t, newTest(t, cfg), req)
	b := generate(t, newTest(t, cfg), req)
	if a.err != nil || a.finish != engine.FinishLength || len(a.tokens) != 25 || a.prompt != 40 || a.hit != 0 {
		t.Fatalf("result %+v", a)
	}
	if !slices.Equal(a.tokens, b.tokens) {
		t.Fatalf("not deterministic: %v vs %v", a.tokens, b.tokens)
	}
	// Output cycles through the vocabulary.
	start := slices.Index(vocab, a.tokens[0])
	for i, tok := range a.tokens {
		if tok != vocab[(start+i)%len(vocab)] {
			t.Fatalf("token %d = %d breaks the vocabulary cycle", i, tok)
		}
	}
	// A sampling seed picks the offset; another seed, another offset.
	seeded := func(seed uint64) []engine.Token {
		r := generate(t, newTest(t, cfg), &engine.Request{Prompt: prompt(1, 40), MaxTokens: 5,
			Sampling: engine.Sampling{Seed: seed, HasSeed: true}})
		return r.tokens
	}
	if !slices.Equal(seeded(1), seeded(1)) {
		t.Fatal("same sampling seed, different output")
	}
	if slices.Equal(seeded(1), seeded(2)) && slices.Equal(seeded(2), seeded(3)) {
		t.Fatal("sampling seed ignored")
	}
}

func TestFinishConditions(t *testing.T) {
	eos := engine.Token(999)
	for _, tc := range []struct {
		name       string
		natural    int
		req        engine.Request
		wantLen    int
		wantFinish engine.FinishReason
		lastIs     engine.Token // -1: don't check
	}{
		{"max tokens", 0, engine.Request{MaxTokens: 7}, 7, engine.FinishLength, -1},
		{"context length", 0, engine.Request{}, 128 - 40, engine.FinishLength, -1},
		{"stop token", 0, engine.Request{MaxTokens: 50, StopTokens: []engine.Token{vocab[3]}}, -1, engine.FinishStop, vocab[3]},
		{"natural end emits EOS", 3, engine.Request{MaxTokens: 50}, -1, engine.FinishStop, eos},
		{"ignore eos runs to max", 3, engine.Request{MaxTokens: 50, IgnoreEOS: true}, 50, engine.FinishLength, -1},
		{"min tokens defers natural end", 3, engine.Request{MaxTokens: 50, MinTokens: 20}, 21, engine.FinishStop, eos},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTest(t, Config{Instant: true, ContextLength: 128, EOS: []engine.Token{eos}, MaxNaturalTokens: tc.natural})
			req := tc.req
			req.Prompt = prompt(1, 40)
			r := generate(t, e, &req)
			if r.err != nil || r.finish != tc.wantFinish {
				t.Fatalf("finish %q err %v", r.finish, r.err)
			}
			if tc.wantLen >= 0 && len(r.tokens) != tc.wantLen {
				t.Fatalf("len %d, want %d", len(r.tokens), tc.wantLen)
			}
			if tc.natural > 0 && !req.IgnoreEOS && len(r.tokens) > max(tc.natural, req.MinTokens+1) {
				t.Fatalf("natural end at %d exceeds bound", len(r.tokens))
			}
			if tc.lastIs >= 0 && r.tokens[len(r.tokens)-1] != tc.lastIs {
				t.Fatalf("last token %d, want %d", r.tokens[len(r.tokens)-1], tc.lastIs)
			}
		})
	}
}

func TestRejections(t *testing.T) {
	e := newTest(t, Config{Instant: true, ContextLength: 100, KVCapacityTokens: 1024})
	small := newTest(t, Config{Instant: true, KVCapacityTokens: 64, BlockSize: 16})
	if got := small.Info().ContextLength; got != 64 {
		t.Fatalf("context length not clamped to KV capacity: %d", got)
	}
	for _, tc := range []struct {
		name string
		e    *Engine
		req  engine.Request
		want error
	}{
		{"empty", e, engine.Request{}, ErrEmptyPrompt},
		{"prompt+max over context", e, engine.Request{Prompt: prompt(0, 60), MaxTokens: 41}, engine.ErrPromptTooLong},
		{"prompt fills context", e, engine.Request{Prompt: prompt(0, 100)}, engine.ErrPromptTooLong},
		{"never fits the KV", small, engine.Request{Prompt: prompt(0, 60), MaxTokens: 10}, engine.ErrPromptTooLong},
		// Issue 12, finding 1: n+maxTokens wrapped and the sequence ran
		// past the context until preempted forever.
		{"max tokens 2^63-1", e, engine.Request{Prompt: prompt(0, 10), MaxTokens: math.MaxInt}, engine.ErrPromptTooLong},
		{"negative max tokens", e, engine.Request{Prompt: prompt(0, 10), MaxTokens: -1}, engine.ErrInvalidRequest},
		{"min tokens 2^63-1", e, engine.Request{Prompt: prompt(0, 10), MinTokens: math.MaxInt}, engine.ErrInvalidRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.e.Generate(context.Background(), &tc.req); !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
		})
	}
}

// ttftOf returns the TTFT of the next request from the histogram's sum,
// which under a VirtualClock is exact.
func ttftOf(t *testing.T, e *Engine, req *engine.Request) (time.Duration, result) {
	t.Helper()
	before := math.Float64frombits(e.stats.ttft.sum.Load())
	r := generate(t, e, req)
	after := math.Float64frombits(e.stats.ttft.sum.Load())
	return time.Duration((after - before) * float64(time.Second)), r
}

func TestPrefixHitIsFaster(t *testing.T) {
	for _, tc := range []struct {
		name     string
		timing   TimingModel
		wantMiss time.Duration
		wantHit  time.Duration
	}{
		{"qwen3-0.6b calibration", Qwen3_0_6BTiming(), 80 * time.Millisecond, 15 * time.Millisecond},
		{"dynamo polynomial", DynamoTiming(), 40 * time.Millisecond, 17 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := NewVirtualClock(time.Unix(1_700_000_000, 0))
			e := newTest(t, Config{Clock: clock, Timing: tc.timing, KVCapacityTokens: SeedKVCapacityTokens})
			e.validate = true
			// The seed workload: a ~1,500-token prefix, the last 24 tokens
			// differing per request.
			doc := prompt(1000, 1476)
			miss, r1 := ttftOf(t, e, &engine.Request{Prompt: append(slices.Clone(doc), prompt(5000, 24)...), MaxTokens: 4})
			hit, r2 := ttftOf(t, e, &engine.Request{Prompt: append(slices.Clone(doc), prompt(6000, 24)...), MaxTokens: 4})
			if r1.hit != 0 || r2.hit != 1472 || r2.prompt != 1500 {
				t.Fatalf("cached tokens: miss %d hit %d (prompt %d)", r1.hit, r2.hit, r2.prompt)
			}
			if hit >= miss*6/10 {
				t.Fatalf("hit TTFT %v not below 60%% of miss %v", hit, miss)
			}
			near := func(got, want time.Duration) bool { return math.Abs(float64(got-want)) < float64(want)/10 }
			if !near(miss, tc.wantMiss) || !near(hit, tc.wantHit) {
				t.Fatalf("miss %v (want ≈%v), hit %v (want ≈%v)", miss, tc.wantMiss, hit, tc.wantHit)
			}
			if _, err := schedState(t, e); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestSpeedupAndTimingModel(t *testing.T) {
	m := DynamoTiming()
	for _, tc := range []struct {
		name string
		got  float64
		want float64
	}{
		{"prefill 1024", m.PrefillMs(1024), 32.5},
		{"prefill 8192", m.PrefillMs(8192), 169},
		{"decode empty", m.DecodeMs(0), 5.74},
		{"decode half", m.DecodeMs(0.5), 26.3},
		{"decode full", m.DecodeMs(1), 34.0},
		{"qwen miss", Qwen3_0_6BTiming().PrefillMs(1500), 80},
	} {
		if math.Abs(tc.got-tc.want) > 0.5 {
			t.Errorf("%s: %.2f ms, want ≈%.1f", tc.name, tc.got, tc.want)
		}
	}
	cfg := Config{Speedup: 100}
	if d := cfg.stepDuration(50); d != 500*time.Microsecond {
		t.Fatalf("speedup: %v", d)
	}
	cfg.Instant = true
	if d := cfg.stepDuration(50); d != 0 {
		t.Fatalf("instant: %v", d)
	}
}

// TestCancelStopsMidStep: a cancel frees its blocks while the scheduler
// sleeps through a 10 s step, not after it.
func TestCancelStopsMidStep(t *testing.T) {
	// A step that would take ten seconds of wall time.
	timing := DynamoTiming()
	timing.PrefillC = 10_000
	e := newTest(t, Config{Timing: timing, KVCapacityTokens: 4096})
	ctx, cancel := context.WithCancel(context.Background())
	s, err := e.Generate(ctx, &engine.Request{Prompt: prompt(0, 500), MaxTokens: 10})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for e.Load().UsedBlocks == 0 {
		if time.Now().After(deadline) {
			t.Fatal("sequence never scheduled")
		}
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	cancel()
	r := collect(t, s)
	if !errors.Is(r.err, context.Canceled) && r.finish != engine.FinishCancelled {
		t.Fatalf("stream ended with %+v", r)
	}
	// The scheduler is mid-step (a 10 s sleep); the abort must still
	// release the blocks promptly.
	for {
		st, err := e.CacheStats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if st.Used == 0 {
			break
		}
		// Promptly: well before the step's 10 s sleep ends, with room for
		// a loaded machine under -race.
		if time.Since(start) > 3*time.Second {
			t.Fatalf("blocks not freed after %v: %+v", time.Since(start), st)
		}
		time.Sleep(time.Millisecond)
	}
	if e.stats.success[reasonAbort].Load() != 1 {
		t.Fatal("abort not counted")
	}
}

func TestPreemptionKeepsInvariants(t *testing.T) {
	// 64 blocks of 4 tokens; twelve sequences each growing to 70 tokens
	// (18 blocks) cannot all fit, forcing preemption and recomputation.
	run := func(numBlocks int) ([][]engine.Token, *Engine) {
		e := newTest(t, Config{Instant: true, BlockSize: 4, NumBlocks: numBlocks, MaxNumBatchedTokens: 64})
		e.validate = true
		outs := make([][]engine.Token, 12)
		var wg sync.WaitGroup
		for i := range outs {
			s, err := e.Generate(context.Background(), &engine.Request{
				Prompt: append(prompt(1, 16), prompt(100*(i+1), 14)...), MaxTokens: 40, IgnoreEOS: true})
			if err != nil {
				t.Fatal(err)
			}
			wg.Go(func() {
				r := collect(t, s)
				if r.err != nil || len(r.tokens) != 40 || r.finish != engine.FinishLength {
					t.Errorf("seq %d: %d tokens, finish %q, err %v", i, len(r.tokens), r.finish, r.err)
				}
				outs[i] = r.tokens
			})
		}
		wg.Wait()
		return outs, e
	}
	tight, e := run(64)
	roomy, _ := run(4096)
	if e.stats.preemptions.Load() == 0 {
		t.Fatal("no preemption happened; the test is not testing anything")
	}
	for i := range tight {
		if !slices.Equal(tight[i], roomy[i]) {
			t.Fatalf("seq %d output changed under preemption", i)
		}
	}
	st, err := e.CacheStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, verr := schedState(t, e); st.Used != 0 || verr != nil {
		t.Fatalf("after all finished: %+v, invariant error %v", st, verr)
	}
	if err := e.do(context.Background(), func() { err = e.cache.Validate() }); err != nil {
		t.Fatal(err)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func TestChunkedPrefillAndBatchLimits(t *testing.T) {
	clock := NewVirtualClock(time.Unix(0, 0))
	e := newTest(t, Config{Clock: clock, MaxNumBatchedTokens: 256, MaxNumSeqs: 2, KVCapacityTokens: 8192})
	e.validate = true
	// A 1000-token prompt needs four chunks of at most 256 tokens.
	var wg sync.WaitGroup
	for i := range 3 {
		s, err := e.Generate(context.Background(), &engine.Request{Prompt: prompt(i*10000, 1000), MaxTokens: 3})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			if r := collect(t, s); len(r.tokens) != 3 {
				t.Errorf("seq %d: %+v", i, r)
			}
		})
	}
	wg.Wait()
	// Three sequences of 4 prefill chunks + 2 decode steps, never more than
	// two at once: at least 3*4 chunk-steps shared two ways.
	if steps, err := schedState(t, e); steps < 10 || err != nil {
		t.Fatalf("steps %d, invariant error %v", steps, err)
	}
}

func TestCloseFailsStreams(t *testing.T) {
	timing := DynamoTiming()
	timing.PrefillC = 60_000
	e, err := New(Config{Timing: timing, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	s, err := e.Generate(context.Background(), &engine.Request{Prompt: prompt(0, 10), MaxTokens: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if r := collect(t, s); !errors.Is(r.err, engine.ErrClosed) {
		t.Fatalf("stream after close: %+v", r)
	}
	if _, err := e.Generate(context.Background(), &engine.Request{Prompt: prompt(0, 10)}); !errors.Is(err, engine.ErrClosed) {
		t.Fatalf("generate after close: %v", err)
	}
}

func TestOverloaded(t *testing.T) {
	timing := DynamoTiming()
	timing.PrefillC = 60_000
	e := newTest(t, Config{Timing: timing, MaxWaiting: 1, MaxNumSeqs: 1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var err error
	for range 5 {
		if _, err = e.Generate(ctx, &engine.Request{Prompt: prompt(0, 10), MaxTokens: 1}); err != nil {
			break
		}
	}
	if !errors.Is(err, engine.ErrOverloaded) {
		t.Fatalf("want ErrOverloaded, got %v", err)
	}
}

func TestIdleWorkerDoesNothing(t *testing.T) {
	e := newTest(t, Config{Instant: true})
	generate(t, e, &engine.Request{Prompt: prompt(0, 10), MaxTokens: 2})
	steps, _ := schedState(t, e)
	time.Sleep(50 * time.Millisecond)
	if again, _ := schedState(t, e); again != steps {
		t.Fatalf("idle worker kept stepping: %d -> %d", steps, again)
	}
}

func TestMetrics(t *testing.T) {
	clock := NewVirtualClock(time.Unix(0, 0))
	e := newTest(t, Config{Clock: clock, Model: "qwen", EngineLabel: "3", KVCapacityTokens: 4096})
	generate(t, e, &engine.Request{Prompt: prompt(0, 100), MaxTokens: 5})
	generate(t, e, &engine.Request{Prompt: prompt(0, 100), MaxTokens: 5})
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(e.Collector()); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		got[mf.GetName()] = mf
	}
	value := func(name string, labels ...string) float64 {
		mf := got[name]
		if mf == nil {
			t.Fatalf("metric %s missing", name)
		}
	outer:
		for _, m := range mf.GetMetric() {
			for i := 0; i < len(labels); i += 2 {
				ok := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						ok = true
					}
				}
				if !ok {
					continue outer
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
		t.Fatalf("metric %s%v not found", name, labels)
		return 0
	}
	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"vllm:num_requests_running", []string{"model_name", "qwen", "engine", "3"}, 0},
		{"vllm:num_requests_waiting", nil, 0},
		{"vllm:kv_cache_usage_perc", nil, 0},
		{"vllm:prefix_cache_queries_total", nil, 200},
		{"vllm:prefix_cache_hits_total", nil, 96},
		{"vllm:num_preemptions_total", nil, 0},
		{"vllm:prompt_tokens_total", nil, 200},
		{"vllm:generation_tokens_total", nil, 10},
		{"vllm:request_success_total", []string{"finished_reason", "length"}, 2},
		{"vllm:request_success_total", []string{"finished_reason", "abort"}, 0},
		{"vllm:time_to_first_token_seconds", nil, 2},
		{"vllm:inter_token_latency_seconds", nil, 8},
		{"vllm:e2e_request_latency_seconds", nil, 2},
		{"vllm:cache_config_info", []string{"block_size", "16", "num_gpu_blocks", "256", "engine", "3"}, 1},
	} {
		if v := value(tc.name, tc.labels...); v != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, v, tc.want)
		}
	}
}

func TestRealClockSmoke(t *testing.T) {
	e := newTest(t, Config{Speedup: 100, KVCapacityTokens: SeedKVCapacityTokens, Timing: Qwen3_0_6BTiming()})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			s, err := e.Generate(context.Background(), &engine.Request{Prompt: prompt(i%2*5000, 300), MaxTokens: 20})
			if err != nil {
				t.Error(err)
				return
			}
			if r := collect(t, s); len(r.tokens) != 20 || r.err != nil {
				t.Errorf("seq %d: %+v", i, r)
			}
		})
	}
	wg.Wait()
	// Load is a snapshot refreshed at the end of the step that delivered
	// the last tokens; give that step a moment to end.
	deadline := time.Now().Add(5 * time.Second)
	for l := e.Load(); l.Running != 0 || l.Waiting != 0 || l.UsedBlocks != 0; l = e.Load() {
		if time.Now().After(deadline) {
			t.Fatalf("load after completion %+v", l)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestConfigDefaults(t *testing.T) {
	c, err := Config{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.BlockSize != 16 || c.NumBlocks != 16384 || c.KVBytesPerToken != 114688 || c.Timing != DynamoTiming() ||
		c.KVEvents.Enabled || c.EngineLabel != "0" {
		t.Fatalf("zero config defaults: %+v", c)
	}
	d := DefaultConfig()
	if !d.KVEvents.Enabled || !strings.HasSuffix(d.KVEvents.Endpoint, ":5557") {
		t.Fatalf("flag defaults: %+v", d.KVEvents)
	}
	if _, err := (Config{BlockSize: -1}).withDefaults(); err == nil {
		t.Fatal("negative block size accepted")
	}
	if _, err := (Config{KVCapacityTokens: 8, BlockSize: 16}).withDefaults(); err == nil {
		t.Fatal("capacity below one block accepted")
	}
}

// zmq4Parked counts goroutines zmq4 v0.17 leaves behind on purpose-less
// Cond waits: its PUB socket's writer goroutine is never told to stop
// (socket.Close does not close the writer). Each is parked, costs no CPU,
// and is a library bug we cannot reach; everything else must be gone.
func zmq4Parked() int {
	buf := make([]byte, 1<<20)
	return strings.Count(string(buf[:runtime.Stack(buf, true)]), "zmq4.(*pubMWriter).run")
}

func TestCloseReleasesGoroutines(t *testing.T) {
	for _, events := range []bool{false, true} {
		before := runtime.NumGoroutine() - zmq4Parked()
		cfg := Config{Instant: true, Logger: quiet()}
		if events {
			cfg.KVEvents = KVEventsConfig{Enabled: true, Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0"}
		}
		e, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		generate(t, e, &engine.Request{Prompt: prompt(0, 40), MaxTokens: 3})
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine()-zmq4Parked() > before {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<16)
				t.Fatalf("events=%v: goroutines leaked\n%s", events, buf[:runtime.Stack(buf, true)])
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}
