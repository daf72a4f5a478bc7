package mocker

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tandemllm/tandem/control/planner"
	"github.com/tandemllm/tandem/engine"
)

type stepRecorder struct {
	mu    sync.Mutex
	steps []engine.StepStats
}

func (r *stepRecorder) ObserveStep(s engine.StepStats) {
	r.mu.Lock()
	r.steps = append(r.steps, s)
	r.mu.Unlock()
}

func (r *stepRecorder) take() []engine.StepStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.steps
	r.steps = nil
	return s
}

// TestStepObserver checks the reported shapes and durations step by step
// on a VirtualClock, where a step's duration is exactly the timing model's:
// a miss, a prefix hit, a chunked prompt, and two decoding sequences.
func TestStepObserver(t *testing.T) {
	clock := NewVirtualClock(time.Unix(0, 0))
	rec := &stepRecorder{}
	tm := Qwen3_0_6BTiming()
	const capacity = 4096
	e := newTest(t, Config{Clock: clock, Timing: tm, KVCapacityTokens: capacity, MaxNumBatchedTokens: 256, StepObserver: rec})
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	decode := func(usedBlocks int) time.Duration {
		return ms(tm.DecodeMs(float64(usedBlocks) / float64(capacity/DefaultBlockSize)))
	}

	doc := prompt(100, 96)
	generate(t, e, &engine.Request{Prompt: doc, MaxTokens: 2})
	// 96 tokens = 6 blocks; the decode of the 97th token needs a 7th.
	want := []engine.StepStats{
		{PrefillTokens: 96, PrefillSeqs: 1, Duration: ms(tm.PrefillMs(96))},
		{DecodeSeqs: 1, DecodeContextTokens: 97, Duration: decode(7)},
	}
	if got := rec.take(); !slices.Equal(got, want) {
		t.Fatalf("miss: steps\n%+v\nwant\n%+v", got, want)
	}

	// The same 96 tokens and 32 more: 96 hit (6 whole blocks).
	generate(t, e, &engine.Request{Prompt: append(slices.Clone(doc), prompt(900, 32)...), MaxTokens: 1})
	want = []engine.StepStats{{PrefillTokens: 32, PrefillCachedTokens: 96, PrefillSeqs: 1, Duration: ms(tm.PrefillMs(32))}}
	if got := rec.take(); !slices.Equal(got, want) {
		t.Fatalf("hit: steps\n%+v\nwant\n%+v", got, want)
	}

	// 300 new tokens in a budget of 256: two chunks.
	generate(t, e, &engine.Request{Prompt: prompt(2000, 300), MaxTokens: 1})
	want = []engine.StepStats{
		{PrefillTokens: 256, PrefillSeqs: 1, Duration: ms(tm.PrefillMs(256))},
		{PrefillTokens: 44, PrefillCachedTokens: 256, PrefillSeqs: 1, Duration: ms(tm.PrefillMs(44))},
	}
	if got := rec.take(); !slices.Equal(got, want) {
		t.Fatalf("chunked: steps\n%+v\nwant\n%+v", got, want)
	}
}

// TestStepObserverBatch: two sequences submitted together prefill in one
// step and then decode together, reported as one decode step of two.
func TestStepObserverBatch(t *testing.T) {
	rec := &stepRecorder{}
	e := newTest(t, Config{Clock: NewVirtualClock(time.Unix(0, 0)), StepObserver: rec})
	// Hold the scheduler inside a command so both requests are in its
	// inbox before its next step.
	started, gate := make(chan struct{}), make(chan struct{})
	go func() { _ = e.do(t.Context(), func() { close(started); <-gate }) }()
	<-started
	streams := make([]engine.Stream, 2)
	for i := range streams {
		s, err := e.Generate(t.Context(), &engine.Request{Prompt: prompt(1000*(i+1), 64), MaxTokens: 3})
		if err != nil {
			t.Fatal(err)
		}
		streams[i] = s
	}
	close(gate)
	for _, s := range streams {
		collect(t, s)
	}
	want := []engine.StepStats{
		{PrefillTokens: 128, PrefillSeqs: 2},
		{DecodeSeqs: 2, DecodeContextTokens: 2 * 65},
		{DecodeSeqs: 2, DecodeContextTokens: 2 * 66},
	}
	got := rec.take()
	for i := range got {
		if got[i].Duration <= 0 {
			t.Errorf("step %+v: no duration", got[i])
		}
		got[i].Duration = 0
	}
	if !slices.Equal(got, want) {
		t.Fatalf("steps\n%+v\nwant\n%+v", got, want)
	}
}

type nopObserver struct{}

func (nopObserver) ObserveStep(engine.StepStats) {}

// BenchmarkStepObserver is the scheduler's cost per step (an instant
// mocker: no simulated time) with no observer, a no-op one, and a
// planner.ProfileLearner, each run against the others in the same run:
// compare the ns/step columns.
func BenchmarkStepObserver(b *testing.B) {
	base := &planner.Profile{Version: planner.ProfileVersion, KVCapacityTokens: DefaultKVCapacityTokens,
		Prefill: planner.PrefillGrid{ISL: []float64{64, 512}, CachedFraction: []float64{0, 0.5}, TTFTMs: [][]float64{{10, 8}, {30, 20}}},
		Decode:  planner.DecodeGrid{Concurrency: []float64{1, 8}, Context: []float64{128, 1024}, ITLMs: [][]float64{{5, 6}, {7, 9}}}}
	learner, err := planner.NewProfileLearner(planner.LearnConfig{Base: base})
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		obs  engine.StepObserver
	}{{"none", nil}, {"nop", nopObserver{}}, {"learner", learner}} {
		b.Run(tc.name, func(b *testing.B) {
			e := newTestB(b, Config{Instant: true, StepObserver: tc.obs})
			const out = 128
			steps := 0
			for i := 0; b.Loop(); i++ {
				s, err := e.Generate(context.Background(), &engine.Request{Prompt: prompt(1000+i%1000*64, 64), MaxTokens: out, IgnoreEOS: true})
				if err != nil {
					b.Fatal(err)
				}
				for {
					if _, err := s.Recv(); err != nil {
						break
					}
				}
				steps += out
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(steps), "ns/step")
		})
	}
}

func newTestB(b *testing.B, cfg Config) *Engine {
	cfg.Logger = quiet()
	cfg.Vocabulary = vocab
	e, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close() })
	return e
}
