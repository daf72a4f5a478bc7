package requestplane

import (
	"context"
	"errors"
	"testing"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/mocker"
	"github.com/tandemllm/tandem/tokenizer"
)

// instantEngine is a mocker that answers at once.
func instantEngine(tb testing.TB) engine.Engine {
	tb.Helper()
	model, err := tokenizer.Default()
	if err != nil {
		tb.Fatal(err)
	}
	cfg := mocker.DefaultConfig()
	cfg.Model, cfg.EOS, cfg.Vocabulary = model.Name, model.Tokenizer.EOS(), model.Tokenizer.Encode(mocker.DefaultText)
	cfg.KVEvents.Enabled = false
	cfg.Instant = true
	eng, err := mocker.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = eng.Close() })
	return eng
}

// BenchmarkPoolTracking measures what counting a worker's streams for the
// drain costs per request: Generate and a whole stream through the
// tracked generator, against the engine itself (the baseline, same run).
// Report the ratio tracked/direct.
func BenchmarkPoolTracking(b *testing.B) {
	eng := instantEngine(b)
	req := &engine.Request{Prompt: []engine.Token{1, 2, 3, 4, 5, 6, 7, 8}, MaxTokens: 16, IgnoreEOS: true}
	run := func(b *testing.B, g engine.Generator) {
		for b.Loop() {
			st, err := g.Generate(context.Background(), req)
			if err != nil {
				b.Fatal(err)
			}
			for {
				d, err := st.Recv()
				if err != nil || d.Finish != engine.FinishNone {
					break
				}
			}
		}
	}
	b.Run("direct", func(b *testing.B) { run(b, eng) })
	b.Run("tracked", func(b *testing.B) { run(b, &gate{Generator: eng}) })
}

// TestRemovedWorkerRefusesAsUnavailable: a request the router handed to a
// worker just before it left meets a closed gate that says "unavailable"
// (which the frontend retries elsewhere), not a closed engine.
func TestRemovedWorkerRefusesAsUnavailable(t *testing.T) {
	eng := instantEngine(t)
	tr := &gate{Generator: eng}
	st, err := tr.Generate(context.Background(), &engine.Request{Prompt: []engine.Token{1, 2, 3}, MaxTokens: 2})
	if err != nil {
		t.Fatal(err)
	}
	if tr.closeIfIdle() {
		t.Fatal("closed with a stream in flight")
	}
	for {
		d, err := st.Recv()
		if err != nil || d.Finish != engine.FinishNone {
			break
		}
	}
	if !tr.closeIfIdle() {
		t.Fatal("not idle after the stream finished")
	}
	if _, err := tr.Generate(context.Background(), &engine.Request{Prompt: []engine.Token{1}, MaxTokens: 1}); !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("Generate after removal: %v, want ErrUnavailable", err)
	}
}
