package upstream

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/upstream/standin"
	"github.com/tandemllm/tandem/health"
)

func drain(t *testing.T, st engine.Stream) (toks []engine.Token, last engine.Delta) {
	t.Helper()
	for {
		d, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return toks, last
		}
		if err != nil {
			t.Fatal(err)
		}
		toks = append(toks, d.Tokens...)
		last = d
	}
}

// TestLlamaCpp: /completion with token prompts through a llama-server
// look-alike: comment pings skipped, cached tokens from the stop event,
// slot affinity (the prefix's slot asked for again with id_slot), the
// error shape mapped, /health's 503 while loading, and the no-events
// diagnostic on /health.
func TestLlamaCpp(t *testing.T) {
	srv, err := standin.StartLlamaCpp(standin.LlamaCppOptions{Model: "qwen.gguf", Slots: 4, NCtx: 4096, SlotSimilarity: -1,
		LoadTime: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := Config{URL: srv.URL(), API: APILlamaCpp, BlockSize: 16, HealthInterval: -1, Logger: quiet}
	// A loading server (503) is a worker that joins when it answers, even
	// with no model named (issue 34: start in any order).
	if e, err := New(t.Context(), cfg); err != nil || !e.Pending() {
		t.Fatalf("a loading server: %v", err)
	} else {
		e.Close()
	}
	probe := &Engine{cfg: Config{URL: srv.URL(), Client: http.DefaultClient}}
	if err := probe.healthy(t.Context()); err == nil || !strings.Contains(err.Error(), "Loading model") {
		t.Fatalf("health while loading: %v", err)
	}
	resp, err := http.Get(srv.URL() + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("/health while loading: %d", resp.StatusCode)
	}
	var e *Engine
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if e, err = New(t.Context(), cfg); err == nil && !e.Pending() {
			break
		}
		if err == nil {
			e.Close()
			err = errors.New("still pending")
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { e.Close() })
	if e.Info().Model != "qwen.gguf" {
		t.Fatalf("model %q", e.Info().Model)
	}
	b := health.NewBoard(quiet, nil)
	e.AttachBoard(b, "w0")
	if !b.IsActive(DiagNoKVEvents, "w0") {
		t.Fatalf("no %s on /health", DiagNoKVEvents)
	}
	prompt := func(p int) []engine.Token {
		s := make([]engine.Token, 64)
		for i := range s {
			s[i] = engine.Token(p*1000 + i)
		}
		return s
	}
	gen := func(p []engine.Token) ([]engine.Token, engine.Delta) {
		st, err := e.Generate(context.Background(), &engine.Request{Prompt: p, MaxTokens: 5})
		if err != nil {
			t.Fatal(err)
		}
		return drain(t, st)
	}
	// Four prefixes fill four slots; with similarity off, only id_slot
	// brings each prefix back to the slot that holds it.
	for p := range 4 {
		toks, last := gen(prompt(p))
		if len(toks) != 5 || last.Finish != engine.FinishLength || last.CachedTokens != 0 || last.PromptTokens != 64 {
			t.Fatalf("prefix %d: %d tokens, last %+v", p, len(toks), last)
		}
	}
	for p := range 4 {
		again := append(prompt(p), 7, 7, 7)
		if _, last := gen(again); last.CachedTokens != 64 {
			t.Fatalf("prefix %d again: cached %d, want 64 (slot affinity)", p, last.CachedTokens)
		}
	}
	long := make([]engine.Token, 5000)
	if _, err := e.Generate(context.Background(), &engine.Request{Prompt: long, MaxTokens: 1}); !errors.Is(err, engine.ErrPromptTooLong) {
		t.Fatalf("exceed_context_size_error: %v", err)
	}
}
