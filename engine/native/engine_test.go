package native

import (
	"context"
	"errors"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/native/model"
	"github.com/tandemllm/tandem/internal/sharedfiles"
	"github.com/tandemllm/tandem/kvcache"
)

func refDir(t testing.TB) string {
	t.Helper()
	p, err := sharedfiles.Path("models", "stories260K")
	if err != nil {
		t.Skipf("shared directory absent: %v", err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Skipf("reference model absent: %v", err)
	}
	return p
}

func tinyModel(t testing.TB, mut func(c *model.Config)) *model.Model {
	t.Helper()
	c, err := model.Shape("tiny")
	if err != nil {
		t.Fatal(err)
	}
	if mut != nil {
		mut(&c)
	}
	m, err := model.Generate(c, 11)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func newEngine(t testing.TB, m *model.Model, o Options) *Engine {
	t.Helper()
	if o.Threads == 0 {
		o.Threads = 2
	}
	e, err := New(m, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

type result struct {
	tokens []engine.Token
	finish engine.FinishReason
	prompt int
	cached int
}

func collect(t testing.TB, s engine.Stream) result {
	t.Helper()
	var r result
	for {
		d, err := s.Recv()
		if err == io.EOF {
			return r
		}
		if err != nil {
			t.Fatalf("recv: %v", err)
		}
		r.tokens = append(r.tokens, d.Tokens...)
		r.prompt, r.cached = d.PromptTokens, d.CachedTokens
		if d.Finish != engine.FinishNone {
			r.finish = d.Finish
		}
	}
}

func gen(t testing.TB, e *Engine, req engine.Request) result {
	t.Helper()
	s, err := e.Generate(context.Background(), &req)
	if err != nil {
		t.Fatal(err)
	}
	return collect(t, s)
}

func randPrompt(n int, seed uint64, vocab int) []engine.Token {
	r := model.NewRand(seed)
	p := make([]engine.Token, n)
	for i := range p {
		p[i] = engine.Token(3 + r.Uint64()%uint64(vocab-3))
	}
	return p
}

// TestGoldenThroughEngine runs both reference prompts at once (so they are
// batched together) and checks the decoded text byte for byte.
func TestGoldenThroughEngine(t *testing.T) {
	e, l, err := Load(refDir(t), Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	cases := []struct{ prompt, file string }{
		{"Once upon a time", "golden-once-upon-a-time.txt"},
		{"Lily and Tom went to the park", "golden-lily-and-tom.txt"},
	}
	var wg sync.WaitGroup
	got := make([]string, len(cases))
	for i, tc := range cases {
		ids := append([]engine.Token{1}, l.Tokenizer.Encode(tc.prompt)...)
		s, err := e.Generate(context.Background(), &engine.Request{Prompt: ids, MaxTokens: 64 - len(ids) + 1})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := collect(t, s)
			got[i] = l.Tokenizer.Decode(append(ids[1:], r.tokens...))
		}()
	}
	wg.Wait()
	for i, tc := range cases {
		want, err := os.ReadFile(refDir(t) + "/" + tc.file)
		if err != nil {
			t.Fatal(err)
		}
		if g := strings.TrimPrefix(got[i], " ") + "\n"; g != string(want) {
			t.Errorf("%s:\n got %q\nwant %q", tc.file, g, want)
		}
	}
}

type recSink struct {
	mu      sync.Mutex
	stored  int
	removed int
}

func (r *recSink) BlocksStored(_ kvcache.BlockHash, b []kvcache.BlockHash, _ []engine.Token) {
	r.mu.Lock()
	r.stored += len(b)
	r.mu.Unlock()
}
func (r *recSink) BlocksRemoved(b []kvcache.BlockHash) {
	r.mu.Lock()
	r.removed += len(b)
	r.mu.Unlock()
}
func (r *recSink) AllBlocksCleared() {}

// kvTypes runs a test once per KV cache element type.
func kvTypes(t *testing.T, f func(t *testing.T, kvt model.KVType)) {
	for _, kvt := range []model.KVType{model.KVF32, model.KVF16} {
		t.Run(kvt.String(), func(t *testing.T) { f(t, kvt) })
	}
}

func TestPrefixCachingEqualsUncached(t *testing.T) { kvTypes(t, testPrefixCachingEqualsUncached) }

func testPrefixCachingEqualsUncached(t *testing.T, kvt model.KVType) {
	m := tinyModel(t, nil)
	plain := newEngine(t, m, Options{DisablePrefixCaching: true, KVType: kvt})
	sink := &recSink{}
	cached := newEngine(t, m, Options{Sink: sink, MaxBatchTokens: 37, KVType: kvt})
	prompt := randPrompt(100, 1, m.Config.Vocab)
	for _, sp := range []engine.Sampling{{}, {Temperature: 0.9, TopK: 40, TopP: 0.9, Seed: 5, HasSeed: true}} {
		req := engine.Request{Prompt: prompt, MaxTokens: 30, IgnoreEOS: true, Sampling: sp}
		want := gen(t, plain, req)
		first := gen(t, cached, req)
		second := gen(t, cached, req)
		if want.cached != 0 || want.prompt != 100 {
			t.Fatalf("uncached run reports prompt %d cached %d", want.prompt, want.cached)
		}
		if second.cached != 96 {
			t.Fatalf("second run cached %d tokens, want 96", second.cached)
		}
		for name, r := range map[string]result{"first": first, "second": second} {
			if !slices.Equal(r.tokens, want.tokens) || r.finish != engine.FinishLength {
				t.Fatalf("%v %s: %v (%s), uncached %v", sp, name, r.tokens, r.finish, want.tokens)
			}
		}
		// A longer prompt sharing the prefix reuses it too.
		long := append(slices.Clone(prompt), randPrompt(40, 2, m.Config.Vocab)...)
		a := gen(t, plain, engine.Request{Prompt: long, MaxTokens: 10, Sampling: sp})
		b := gen(t, cached, engine.Request{Prompt: long, MaxTokens: 10, Sampling: sp})
		if b.cached < 96 || !slices.Equal(a.tokens, b.tokens) {
			t.Fatalf("extended prompt: cached %d, tokens %v vs %v", b.cached, b.tokens, a.tokens)
		}
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if sink.stored == 0 {
		t.Fatal("no BlocksStored events")
	}
}

// TestKVExportImport: with either cache type the payload is fp32 (an fp16
// cache widens exactly, and narrowing the widened values back is exact),
// so an fp16 importer continues bitwise as the exporter would have.
func TestKVExportImport(t *testing.T) { kvTypes(t, testKVExportImport) }

func testKVExportImport(t *testing.T, kvt model.KVType) {
	m := tinyModel(t, nil)
	a := newEngine(t, m, Options{KVType: kvt})
	b := newEngine(t, m, Options{KVType: kvt})
	prompt := randPrompt(70, 3, m.Config.Vocab)
	want := gen(t, newEngine(t, m, Options{KVType: kvt}), engine.Request{Prompt: prompt, MaxTokens: 25, IgnoreEOS: true})
	// "Prefill worker": one token, then export.
	gen(t, a, engine.Request{Prompt: prompt, MaxTokens: 1})
	ctx := context.Background()
	payload, err := a.ExportKV(ctx, prompt)
	if err != nil {
		t.Fatal(err)
	}
	n, err := b.ImportKV(ctx, payload)
	if err != nil || n != 64 {
		t.Fatalf("import: %d tokens, %v", n, err)
	}
	got := gen(t, b, engine.Request{Prompt: prompt, MaxTokens: 25, IgnoreEOS: true})
	if got.cached != 64 || !slices.Equal(got.tokens, want.tokens) {
		t.Fatalf("after import: cached %d, tokens %v, want %v", got.cached, got.tokens, want.tokens)
	}
	// Importing again is a no-op; a re-export is byte-identical.
	if _, err := b.ImportKV(ctx, payload); err != nil {
		t.Fatal(err)
	}
	again, err := b.ExportKV(ctx, prompt)
	if err != nil || !slices.Equal(again, payload) {
		t.Fatalf("re-export differs (%v)", err)
	}
	// Damaged or foreign payloads are refused.
	bad := slices.Clone(payload)
	bad[len(bad)/2] ^= 1
	other := newEngine(t, tinyModel(t, func(c *model.Config) { c.Tied = false }), Options{})
	for name, tc := range map[string]struct {
		e *Engine
		p []byte
	}{"corrupt": {b, bad}, "truncated": {b, payload[:100]}, "other-model": {other, payload}} {
		if _, err := tc.e.ImportKV(ctx, tc.p); !errors.Is(err, ErrKVMismatch) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}

func TestContinuousBatchingEqualsSolo(t *testing.T) {
	m := tinyModel(t, nil)
	solo := newEngine(t, m, Options{})
	batched := newEngine(t, m, Options{MaxSeqs: 8, MaxBatchTokens: 64})
	var reqs []engine.Request
	for i := range 8 {
		reqs = append(reqs, engine.Request{Prompt: randPrompt(5+13*i, uint64(10+i), m.Config.Vocab), MaxTokens: 12 + i,
			IgnoreEOS: true, Sampling: engine.Sampling{Temperature: float32(i%2) * 0.7, Seed: uint64(i), HasSeed: true}})
	}
	var wg sync.WaitGroup
	got := make([]result, len(reqs))
	for i := range reqs {
		s, err := batched.Generate(context.Background(), &reqs[i])
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); got[i] = collect(t, s) }()
	}
	wg.Wait()
	for i, r := range reqs {
		want := gen(t, solo, r)
		if !slices.Equal(got[i].tokens, want.tokens) {
			t.Errorf("request %d: batched %v, solo %v", i, got[i].tokens, want.tokens)
		}
	}
}

func TestStopsAndLimits(t *testing.T) {
	m := tinyModel(t, nil)
	e := newEngine(t, m, Options{})
	prompt := randPrompt(9, 4, m.Config.Vocab)
	free := gen(t, e, engine.Request{Prompt: prompt, MaxTokens: 20, IgnoreEOS: true})
	if len(free.tokens) != 20 || free.finish != engine.FinishLength {
		t.Fatalf("max tokens: %d tokens, %s", len(free.tokens), free.finish)
	}
	stop := free.tokens[5]
	r := gen(t, e, engine.Request{Prompt: prompt, MaxTokens: 20, StopTokens: []engine.Token{stop}, IgnoreEOS: true})
	if i := slices.Index(free.tokens, stop); len(r.tokens) != i+1 || r.finish != engine.FinishStop {
		t.Fatalf("stop token: %v (%s)", r.tokens, r.finish)
	}
	r = gen(t, e, engine.Request{Prompt: prompt, MaxTokens: 20, StopTokens: []engine.Token{stop}, MinTokens: 20, IgnoreEOS: true})
	if len(r.tokens) != 20 {
		t.Fatalf("min tokens: %d", len(r.tokens))
	}
	if _, err := e.Generate(context.Background(), &engine.Request{Prompt: prompt, MaxTokens: m.Config.SeqLen}); !errors.Is(err, engine.ErrPromptTooLong) {
		t.Fatalf("too long: %v", err)
	}
	if _, err := e.Generate(context.Background(), &engine.Request{Prompt: []engine.Token{-1}}); err == nil {
		t.Fatal("bad token accepted")
	}
	seeded := engine.Request{Prompt: prompt, MaxTokens: 15, IgnoreEOS: true, Sampling: engine.Sampling{Temperature: 1, Seed: 9, HasSeed: true}}
	if a, b := gen(t, e, seeded), gen(t, e, seeded); !slices.Equal(a.tokens, b.tokens) {
		t.Fatal("same seed, different tokens")
	}
	topk1 := engine.Request{Prompt: prompt, MaxTokens: 20, IgnoreEOS: true, Sampling: engine.Sampling{Temperature: 1, TopK: 1}}
	if r := gen(t, e, topk1); !slices.Equal(r.tokens, free.tokens) {
		t.Fatal("top-k 1 differs from greedy")
	}
}

func TestCancellation(t *testing.T) {
	m := tinyModel(t, nil)
	e := newEngine(t, m, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	s, err := e.Generate(ctx, &engine.Request{Prompt: randPrompt(8, 5, m.Config.Vocab), IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	cancel()
	start := time.Now()
	for {
		d, err := s.Recv()
		if err != nil || d.Finish != engine.FinishNone {
			break
		}
	}
	if el := time.Since(start); el > 100*time.Millisecond {
		t.Fatalf("cancellation took %v", el)
	}
	// The engine is still healthy and its blocks were released.
	gen(t, e, engine.Request{Prompt: randPrompt(8, 6, m.Config.Vocab), MaxTokens: 3})
	st, err := e.CacheStats(context.Background())
	if err != nil || st.Used != 0 {
		t.Fatalf("blocks still used after cancel: %+v %v", st, err)
	}
}

func TestPreemptionUnderPressure(t *testing.T) {
	m := tinyModel(t, nil)
	// Room for barely more than one context: sequences must take turns.
	blockBytes := int64(16 * m.Config.KVDim() * m.Config.Layers * 8)
	e := newEngine(t, m, Options{KVBytes: blockBytes * 40, MaxSeqs: 4})
	solo := newEngine(t, m, Options{})
	var wg sync.WaitGroup
	for i := range 4 {
		req := engine.Request{Prompt: randPrompt(150, uint64(20+i), m.Config.Vocab), MaxTokens: 60, IgnoreEOS: true}
		want := gen(t, solo, req)
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := e.Generate(context.Background(), &req)
			if err != nil {
				t.Error(err)
				return
			}
			if got := collect(t, s); !slices.Equal(got.tokens, want.tokens) {
				t.Errorf("request %d differs under preemption", i)
			}
		}()
	}
	wg.Wait()
}

func abs32(v float32) float32 {
	if v < 0 {
		return -v
	}
	return v
}

func float32frombits(b uint32) float32 { return math.Float32frombits(b) }

// TestPrefillEstimate: the engine prices prefill from its own measured
// steps (for the disaggregation decider), and cannot before it has run one.
func TestPrefillEstimate(t *testing.T) {
	m := tinyModel(t, nil)
	e := newEngine(t, m, Options{})
	if est := e.EstimatePrefill(100); est >= 0 {
		t.Fatalf("estimate %v before any step, want negative", est)
	}
	gen(t, e, engine.Request{Prompt: randPrompt(200, 3, m.Config.Vocab), MaxTokens: 2, IgnoreEOS: true})
	a, b := e.EstimatePrefill(100), e.EstimatePrefill(200)
	if a <= 0 || math.Abs(b-2*a) > 1e-12 {
		t.Fatalf("estimates %v for 100 and %v for 200 tokens", a, b)
	}
}
