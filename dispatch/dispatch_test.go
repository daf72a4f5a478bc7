package dispatch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/spf13/pflag"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/enginetest"
	"github.com/tandemllm/tandem/engine/mocker"
	"github.com/tandemllm/tandem/engine/routed"
	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/router"
)

// recorder is a policy that picks the candidates in id order, predicts a
// fixed cached prefix, and records the router's callbacks.
type recorder struct {
	predicted int
	mu        sync.Mutex
	calls     []string
}

func (p *recorder) Name() string { return "recorder" }

func (p *recorder) Pick(_ *router.Request, cands []router.Candidate) (router.Decision, error) {
	ids := make([]string, len(cands))
	for i, c := range cands {
		ids[i] = c.ID
	}
	slices.Sort(ids)
	return router.Decision{WorkerID: ids[0], PredictedCachedTokens: p.predicted}, nil
}

func (p *recorder) note(f string, a ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, fmt.Sprintf(f, a...))
}

func (p *recorder) Routed(_ *router.Request, d router.Decision) { p.note("routed %s", d.WorkerID) }
func (p *recorder) FirstToken(_ *router.Request, w string, cached int) {
	p.note("first %s %d", w, cached)
}
func (p *recorder) Finished(_ *router.Request, w string) { p.note("finished %s", w) }
func (p *recorder) WorkerRemoved(string)                 {}
func (p *recorder) CachedTokensLate(_ *router.Request, w string, cached int) {
	p.note("late %s %d", w, cached)
}

func (p *recorder) got() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.calls)
}

type fixture struct {
	d      *Dispatcher
	router *router.Router
	board  *health.Board
	reg    *prometheus.Registry
	policy *recorder
}

// newFixture routes model "m" over workers, named by their keys.
func newFixture(t *testing.T, cfg Config, workers map[string]engine.Generator) *fixture {
	t.Helper()
	reg := prometheus.NewRegistry()
	log := slog.New(slog.DiscardHandler)
	board := health.NewBoard(log, reg)
	p := &recorder{}
	r := router.New(p, reg)
	d := New(cfg, r, board, reg, log)
	d.AddModel("m")
	for id, g := range workers {
		r.AddWorker(router.Worker{ID: id, Model: "m", Gen: g, Info: engine.Info{Kind: "test"}})
	}
	return &fixture{d: d, router: r, board: board, reg: reg, policy: p}
}

// drain reads a stream to its end.
func drain(t *testing.T, s *Stream) ([]engine.Token, error) {
	t.Helper()
	var out []engine.Token
	for {
		d, err := s.Recv()
		out = append(out, d.Tokens...)
		if err == io.EOF || err == nil && d.Finish != engine.FinishNone {
			return out, nil
		}
		if err != nil {
			return out, err
		}
	}
}

// dead fails like a worker whose process died.
type dead struct{ calls int }

func (d *dead) Generate(context.Context, *engine.Request) (engine.Stream, error) {
	d.calls++
	return nil, fmt.Errorf("dial: %w", engine.ErrUnavailable)
}

// stalled takes requests and sends nothing until their context ends.
type stalled struct{}

func (stalled) Generate(ctx context.Context, _ *engine.Request) (engine.Stream, error) {
	p := engine.NewPipe(ctx)
	context.AfterFunc(ctx, func() { p.Fail(ctx.Err()) })
	return p, nil
}

// breaks runs its engine and cuts the stream after n deltas, as a worker
// killed mid-stream does.
type breaks struct {
	engine.Generator
	n int
}

func (b breaks) Generate(ctx context.Context, req *engine.Request) (engine.Stream, error) {
	st, err := b.Generator.Generate(ctx, req)
	if err != nil {
		return nil, err
	}
	return &breaking{Stream: st, left: b.n}, nil
}

type breaking struct {
	engine.Stream
	left int
}

func (b *breaking) Recv() (engine.Delta, error) {
	if b.left == 0 {
		return engine.Delta{}, fmt.Errorf("connection reset: %w", engine.ErrUnavailable)
	}
	b.left--
	return b.Stream.Recv()
}

func req(prompt string, maxTokens int) *Request {
	p := make([]engine.Token, len(prompt))
	for i := range prompt {
		p[i] = engine.Token(prompt[i])
	}
	return &Request{Engine: &engine.Request{ID: "r1", Model: "m", Prompt: p, MaxTokens: maxTokens}}
}

// Before the first token an unreachable worker is quarantined and the
// request moves on, up to MaxRetries other workers; past them the caller
// gets the worker's own error.
func TestRetryBeforeFirstToken(t *testing.T) {
	for _, tc := range []struct {
		name       string
		maxRetries int
		wantWorker string // "": the request fails
	}{
		{"retried", 2, "b-live"},
		{"no retries", 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.MaxRetries = tc.maxRetries
			dw := &dead{}
			f := newFixture(t, cfg, map[string]engine.Generator{"a-dead": dw, "b-live": &enginetest.Scripted{Name: "m", Output: []engine.Token{7}}})
			s, err := f.d.Generate(context.Background(), req("hello", 3))
			if dw.calls != 1 {
				t.Fatalf("dead worker tried %d times, want 1", dw.calls)
			}
			if !f.board.IsActive(DiagWorkerUnreachable, "a-dead") {
				t.Fatalf("no %s for the dead worker: %v", DiagWorkerUnreachable, f.board.Active())
			}
			if tc.wantWorker == "" {
				var we *WorkerError
				if !errors.As(err, &we) || we.Worker != "a-dead" || !errors.Is(err, engine.ErrUnavailable) {
					t.Fatalf("err %v, want the dead worker's ErrUnavailable", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if s.Worker() != tc.wantWorker {
				t.Fatalf("served by %s, want %s", s.Worker(), tc.wantWorker)
			}
			if got, err := drain(t, s); err != nil || len(got) != 3 {
				t.Fatalf("tokens %v err %v", got, err)
			}
			if n := testutil.ToFloat64(f.d.retries.WithLabelValues("m")); n != 1 {
				t.Fatalf("retries counter %v, want 1", n)
			}
		})
	}
}

// A worker that sends no first token within FirstTokenTimeout is given up
// on: the request moves to another worker, or fails with
// ErrFirstTokenTimeout when none is left.
func TestFirstTokenTimeout(t *testing.T) {
	cfg := DefaultConfig()
	cfg.FirstTokenTimeout = 100 * time.Millisecond
	f := newFixture(t, cfg, map[string]engine.Generator{"a-stalled": stalled{}, "b-live": &enginetest.Scripted{Name: "m", Output: []engine.Token{7}}})
	s, err := f.d.Generate(context.Background(), req("hi", 1))
	if err != nil {
		t.Fatal(err)
	}
	if s.Worker() != "b-live" {
		t.Fatalf("served by %s", s.Worker())
	}
	s.Close()

	only := newFixture(t, cfg, map[string]engine.Generator{"a-stalled": stalled{}})
	start := time.Now()
	_, err = only.d.Generate(context.Background(), req("hi", 1))
	if !errors.Is(err, ErrFirstTokenTimeout) {
		t.Fatalf("err %v, want a first token timeout", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("gave up after %v", el)
	}
}

// A request no worker can take fails with ErrNotRouted, and with
// ErrUnknownModel for a model nobody ever registered.
func TestNotRouted(t *testing.T) {
	f := newFixture(t, DefaultConfig(), nil)
	r := req("x", 1)
	if _, err := f.d.Generate(context.Background(), r); !errors.Is(err, ErrNotRouted) || !errors.Is(err, ErrUnknownModel) {
		t.Fatalf("err %v", err)
	}
	f.router.AddWorker(router.Worker{ID: "w", Model: "m", Gen: &enginetest.Scripted{Name: "m"}})
	f.router.RemoveWorker("w")
	if _, err := f.d.Generate(context.Background(), r); !errors.Is(err, ErrNotRouted) || errors.Is(err, ErrUnknownModel) {
		t.Fatalf("err %v", err)
	}
}

// After its first token a stream whose worker breaks continues on another
// worker (MigrationLimit), asked for the prompt plus the tokens already
// sent and for what is left of max_tokens: the caller reads one unbroken
// stream, and usage stays that of its own prompt.
func TestMigration(t *testing.T) {
	out := []engine.Token{'a', 'b', 'c', 'd', 'e', 'f'}
	for _, tc := range []struct {
		name  string
		limit int
		want  []engine.Token
		err   bool
	}{
		{"migrated", 1, out, false},
		{"limit 0", 0, out[:3], true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.MigrationLimit = tc.limit
			// b continues the sequence from where its prompt ends.
			b := &continues{out: out, prompt: 2}
			f := newFixture(t, cfg, map[string]engine.Generator{
				"a": breaks{scripted(out), 3}, "b": b})
			s, err := f.d.Generate(context.Background(), req("pq", len(out)))
			if err != nil {
				t.Fatal(err)
			}
			got, err := drain(t, s)
			s.Close()
			if !slices.Equal(got, tc.want) || (err != nil) != tc.err {
				t.Fatalf("tokens %q err %v, want %q (error %v)", got, err, tc.want, tc.err)
			}
			if !tc.err {
				seen := b.requests()
				if len(seen) != 1 || !slices.Equal(seen[0].Prompt, []engine.Token{'p', 'q', 'a', 'b', 'c'}) || seen[0].MaxTokens != 3 {
					t.Fatalf("migrated request %+v", seen)
				}
				if n := testutil.ToFloat64(f.d.migrations.WithLabelValues("m", "ok")); n != 1 {
					t.Fatalf("migrations ok %v", n)
				}
				if s.Worker() != "b" {
					t.Fatalf("worker now %s", s.Worker())
				}
			}
			if b := f.busy(); b != nil {
				t.Fatalf("load left after Close: %v", b)
			}
		})
	}
}

// continues is an engine that continues out from position len(prompt)-prompt.
type continues struct {
	out    []engine.Token
	prompt int // the original prompt's length
	mu     sync.Mutex
	seen   []*engine.Request
}

func (c *continues) Generate(ctx context.Context, req *engine.Request) (engine.Stream, error) {
	c.mu.Lock()
	c.seen = append(c.seen, req)
	c.mu.Unlock()
	p := engine.NewPipe(ctx)
	from := len(req.Prompt) - c.prompt
	for i := from; i < len(c.out); i++ {
		d := engine.Delta{Tokens: []engine.Token{c.out[i]}, PromptTokens: len(req.Prompt), CachedTokens: len(req.Prompt)}
		if i == len(c.out)-1 {
			d.Finish = engine.FinishLength
		}
		p.Send(d)
	}
	return p, nil
}

func (c *continues) requests() []*engine.Request {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.seen)
}

// active is the router's count of requests on worker (its
// tandem_router_worker_active_requests gauge).
func (f *fixture) active(worker string) float64 {
	mfs, _ := f.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "tandem_router_worker_active_requests" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "worker" && l.GetValue() == worker {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return 0
}

// busy returns the workers the router still counts requests on.
func (f *fixture) busy() []string {
	var busy []string
	for _, w := range f.router.Workers() {
		if a := f.active(w.ID); a != 0 {
			busy = append(busy, fmt.Sprintf("%s=%v", w.ID, a))
		}
	}
	return busy
}

// predictions records the routed requests a disaggregation wrapper would
// read.
type predictions struct {
	engine.Generator
	mu   sync.Mutex
	seen []int
}

func (p *predictions) GenerateRouted(ctx context.Context, r routed.Request) (engine.Stream, error) {
	p.mu.Lock()
	p.seen = append(p.seen, r.PredictedCachedTokens)
	p.mu.Unlock()
	return p.Generator.Generate(ctx, r.Req)
}

// The router's predicted prefix reaches a routed.Generator beside the
// engine request; a pinned choice (n > 1) runs on the first choice's
// worker, predicted to find the whole prompt cached, without being routed
// or counted again.
func TestPredictionAndPin(t *testing.T) {
	w := &predictions{Generator: &enginetest.Scripted{Name: "m", Output: []engine.Token{1, 2}}}
	f := newFixture(t, DefaultConfig(), map[string]engine.Generator{"a": w, "b": &enginetest.Scripted{Name: "m"}})
	f.policy.predicted = 3
	first, err := f.d.Generate(context.Background(), req("hello", 4))
	if err != nil {
		t.Fatal(err)
	}
	r2 := req("hello", 4)
	r2.Pin = first
	second, err := f.d.Generate(context.Background(), r2)
	if err != nil {
		t.Fatal(err)
	}
	if second.Worker() != "a" || f.active("a") != 1 {
		t.Fatalf("pinned on %s, a holds %v requests", second.Worker(), f.active("a"))
	}
	if _, err := drain(t, second); err != nil {
		t.Fatal(err)
	}
	second.Close()
	if _, err := drain(t, first); err != nil {
		t.Fatal(err)
	}
	first.Close()
	w.mu.Lock()
	defer w.mu.Unlock()
	if !slices.Equal(w.seen, []int{3, 5}) {
		t.Fatalf("predictions seen %v, want [3 5]", w.seen)
	}
	if got := f.policy.got(); !slices.Equal(got, []string{"routed a", "first a 0", "finished a"}) {
		t.Fatalf("router callbacks %q", got)
	}
}

// A first delta without usage (an upstream server that reports
// cached_tokens only at the end) tells the router "unknown" at the first
// token and the engine's count at the end.
func TestLateUsage(t *testing.T) {
	f := newFixture(t, DefaultConfig(), map[string]engine.Generator{"a": lateUsage{}})
	s, err := f.d.Generate(context.Background(), req("hello", 2))
	if err != nil {
		t.Fatal(err)
	}
	if !s.LateUsage() {
		t.Fatal("first delta has no usage, LateUsage false")
	}
	if _, err := drain(t, s); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if got := f.policy.got(); !slices.Equal(got, []string{"routed a", "first a -1", "finished a", "late a 4"}) {
		t.Fatalf("router callbacks %q", got)
	}
}

type lateUsage struct{}

func (lateUsage) Generate(_ context.Context, req *engine.Request) (engine.Stream, error) {
	return &deltas{ds: []engine.Delta{{Tokens: []engine.Token{1}},
		{Tokens: []engine.Token{2}, Finish: engine.FinishLength, PromptTokens: len(req.Prompt), CachedTokens: 4}}}, nil
}

// deltas is a stream of given deltas, one per Recv (an engine.Pipe would
// join those queued before a Recv).
type deltas struct{ ds []engine.Delta }

func (d *deltas) Recv() (engine.Delta, error) {
	if len(d.ds) == 0 {
		return engine.Delta{}, io.EOF
	}
	x := d.ds[0]
	d.ds = d.ds[1:]
	return x, nil
}

// scripted emits out one token per delta, with usage.
type scripted []engine.Token

func (s scripted) Generate(_ context.Context, req *engine.Request) (engine.Stream, error) {
	st := &deltas{}
	for i, t := range s[:min(len(s), req.MaxTokens)] {
		d := engine.Delta{Tokens: []engine.Token{t}, PromptTokens: len(req.Prompt)}
		if i == len(s)-1 || i == req.MaxTokens-1 {
			d.Finish = engine.FinishLength
		}
		st.ds = append(st.ds, d)
	}
	return st, nil
}

// A real engine behind the dispatcher: the mocker serves a request end to
// end and reports its cached prefix on the second one.
func TestMocker(t *testing.T) {
	eng, err := mocker.New(mocker.Config{Model: "m", Instant: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	f := newFixture(t, DefaultConfig(), map[string]engine.Generator{"w": eng})
	prompt := make([]engine.Token, 64)
	for i := range prompt {
		prompt[i] = engine.Token(i + 1)
	}
	var cached int
	for range 2 {
		s, err := f.d.Generate(context.Background(), &Request{Engine: &engine.Request{ID: "r", Model: "m", Prompt: prompt, MaxTokens: 4}})
		if err != nil {
			t.Fatal(err)
		}
		got, err := drain(t, s)
		cached = s.First().CachedTokens
		s.Close()
		if err != nil || len(got) != 4 {
			t.Fatalf("tokens %v err %v", got, err)
		}
	}
	if cached == 0 {
		t.Fatal("the second request found nothing cached")
	}
	if b := f.busy(); b != nil {
		t.Fatalf("load left: %v", b)
	}
}

// AddFlags registers exactly the flags the frontend commands had, with
// their types and defaults.
func TestAddFlags(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	c := DefaultConfig()
	c.AddFlags(fs)
	want := map[string][2]string{
		"max-retries":         {"int", "2"},
		"migration-limit":     {"int", "0"},
		"stuck-after":         {"duration", "30s"},
		"first-token-timeout": {"duration", "5m0s"},
	}
	n := 0
	fs.VisitAll(func(f *pflag.Flag) {
		n++
		w, ok := want[f.Name]
		if !ok || f.Value.Type() != w[0] || f.DefValue != w[1] {
			t.Errorf("flag --%s %s default %q; want %v", f.Name, f.Value.Type(), f.DefValue, w)
		}
	})
	if n != len(want) {
		t.Fatalf("%d flags, want %d", n, len(want))
	}
	if err := fs.Parse([]string{"--max-retries=5", "--first-token-timeout=1s"}); err != nil || c.MaxRetries != 5 || c.FirstTokenTimeout != time.Second {
		t.Fatalf("parsed %+v err %v", c, err)
	}
}
