package upstream

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/mocker"
	"github.com/tandemllm/tandem/engine/upstream/standin"
	"github.com/tandemllm/tandem/health"
)

// otherCodec is a tokenizer of another vocabulary than wordCodec's: the
// same bytes, shifted.
type otherCodec struct{}

func (otherCodec) Encode(s string) []engine.Token {
	out := wordCodec{}.Encode(s)
	for i := range out {
		out[i] += 3
	}
	return out
}

func (otherCodec) Decode(ids []engine.Token) string { return "" }

// TestTokenizerMatchesServer: Tandem used to send ids of its own
// tokenizer (o200k without --model) to a server of another vocabulary,
// which read garbage. It now compares its tokenization of a probe text
// with the server's /tokenize (llama.cpp's, vLLM's and SGLang's shapes) at connect
// and refuses a server that differs, naming --model.
func TestTokenizerMatchesServer(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, server := range []Codec{wordCodec{}, otherCodec{}} {
		match := server == Codec(wordCodec{})
		lc, err := standin.StartLlamaCpp(standin.LlamaCppOptions{Model: "q.gguf", NCtx: 4096, Codec: server})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lc.Close() })
		vl, err := standin.Start(standin.Options{Model: "m", ReturnTokenIDs: true, Codec: server,
			Mocker: mocker.Config{NumBlocks: 64, BlockSize: 16, ContextLength: 4096}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { vl.Close() })
		sgCfg := mocker.DefaultConfig()
		sgCfg.Instant, sgCfg.KVEvents.Enabled, sgCfg.BlockSize = true, false, 16
		sg, err := standin.StartSGLang(standin.SGLangOptions{Model: "m", Mocker: sgCfg, Codec: server})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sg.Close() })
		for api, url := range map[string]string{APILlamaCpp: lc.URL(), APIVLLM: vl.URL(), APISGLang: sg.URL()} {
			e, err := New(t.Context(), Config{URL: url, API: api, Codec: wordCodec{}, HealthInterval: -1, MetricsInterval: -1, Logger: quiet})
			if match {
				if err != nil {
					t.Fatalf("%s, same tokenizer: %v", api, err)
				}
				e.Close()
				continue
			}
			if err == nil {
				e.Close()
				t.Fatalf("%s: a server with another tokenizer was accepted", api)
			}
			if !errors.Is(err, errTokenizerMismatch) || !strings.Contains(err.Error(), "--model") {
				t.Fatalf("%s: %v", api, err)
			}
		}
	}
}

// TestContextFromServer: a llama-server's context is its slot's n_ctx
// (/props), not the model's; Tandem used to advertise the tokenizer's and
// send longer prompts, which older builds truncate silently. The engine
// now learns it and refuses a prompt that does not fit, naming the prompt.
func TestContextFromServer(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	lc, err := standin.StartLlamaCpp(standin.LlamaCppOptions{Model: "q.gguf", NCtx: 512})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Close() })
	e, err := New(t.Context(), Config{URL: lc.URL(), API: APILlamaCpp, HealthInterval: -1, MetricsInterval: -1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	if n := e.Info().ContextLength; n != 512 {
		t.Fatalf("context %d, want the slot's 512", n)
	}
	_, err = e.Generate(context.Background(), &engine.Request{Prompt: make([]engine.Token, 600), MaxTokens: 1})
	var p interface{ PromptTooLong() bool }
	if !errors.Is(err, engine.ErrPromptTooLong) || !errors.As(err, &p) {
		t.Fatalf("a 600-token prompt for a 512 context: %v", err)
	}
	if _, err = e.Generate(context.Background(), &engine.Request{Prompt: make([]engine.Token, 500), MaxTokens: 100}); !errors.Is(err, engine.ErrPromptTooLong) || errors.As(err, &p) {
		t.Fatalf("500 + 100 tokens for a 512 context: %v", err)
	}
}

// TestCachedTokensOldLlamaServer: builds before timings.cache_n report
// tokens_cached as the slot's n_past (prompt plus output), which Tandem
// took for the cached prompt (cached_tokens = prompt_tokens on a cold
// prompt); the count is now what the server did not evaluate.
func TestCachedTokensOldLlamaServer(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	lc, err := standin.StartLlamaCpp(standin.LlamaCppOptions{Model: "q.gguf", NCtx: 4096, Slots: 1, NoCacheN: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Close() })
	e, err := New(t.Context(), Config{URL: lc.URL(), API: APILlamaCpp, HealthInterval: -1, MetricsInterval: -1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	prompt := make([]engine.Token, 64)
	for i := range prompt {
		prompt[i] = engine.Token(500 + i)
	}
	for i, want := range []int{0, 63} { // cold, then all but the one token always evaluated
		st, err := e.Generate(context.Background(), &engine.Request{Prompt: prompt, MaxTokens: 4})
		if err != nil {
			t.Fatal(err)
		}
		if _, last := drain(t, st); last.CachedTokens != want {
			t.Fatalf("request %d: cached %d, want %d", i, last.CachedTokens, want)
		}
	}
}

// TestLoadOpenAIAPIOnLlamaServer: llama-server reached through its OpenAI
// API publishes llamacpp:* gauges, which were ignored (only vLLM's names
// were read for --upstream-api openai); any engine's names are read now.
func TestLoadOpenAIAPIOnLlamaServer(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	lc, err := standin.StartLlamaCpp(standin.LlamaCppOptions{Model: "q.gguf", NCtx: 4096, Metrics: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Close() })
	e, err := New(t.Context(), Config{URL: lc.URL(), API: APIOpenAI, Codec: wordCodec{}, HealthInterval: -1,
		MetricsInterval: 20 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, ok := e.Load(); ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no load read from llamacpp:* gauges")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHeldBackIDsOldLlamaServer: older llama-server builds send no event
// for a token whose text they hold back and release the text with the
// next event, which carries only its own id; that text was lost. The
// server's tokens_predicted shows the ids are short, and the event's text
// is tokenized instead: the output's text is whole.
func TestHeldBackIDsOldLlamaServer(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	text := func(hold int) string {
		lc, err := standin.StartLlamaCpp(standin.LlamaCppOptions{Model: "q.gguf", NCtx: 4096, Codec: wordCodec{}, HoldBack: hold})
		if err != nil {
			t.Fatal(err)
		}
		defer lc.Close()
		e, err := New(t.Context(), Config{URL: lc.URL(), API: APILlamaCpp, Codec: wordCodec{}, HealthInterval: -1, MetricsInterval: -1, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		st, err := e.Generate(context.Background(), &engine.Request{Prompt: []engine.Token{65, 66, 67}, MaxTokens: 12})
		if err != nil {
			t.Fatal(err)
		}
		toks, _ := drain(t, st)
		return wordCodec{}.Decode(toks)
	}
	whole, held := text(0), text(3)
	if len(whole) != 12 || held != whole {
		t.Fatalf("text with held-back ids %q, whole %q", held, whole)
	}
}

// TestLateServerWithAnotherTokenizer: a server that answers after Tandem
// started, with another tokenizer, is not routed to: it stays unavailable
// and /health names the mismatch (upstream_tokenizer_mismatch, --model).
func TestLateServerWithAnotherTokenizer(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	lc, err := standin.StartLlamaCpp(standin.LlamaCppOptions{Model: "q.gguf", NCtx: 4096, Codec: otherCodec{}, LoadTime: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Close() })
	e, err := New(t.Context(), Config{URL: lc.URL(), API: APILlamaCpp, Model: "q.gguf", Codec: wordCodec{}, HealthInterval: -1,
		MetricsInterval: -1, ConnectInterval: 20 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	b := health.NewBoard(quiet, nil)
	e.AttachBoard(b, "w0")
	deadline := time.Now().Add(5 * time.Second)
	for !b.IsActive(DiagTokenizerMismatch, "w0") {
		if time.Now().After(deadline) {
			t.Fatal("no tokenizer mismatch diagnostic")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !e.Pending() {
		t.Fatal("a server with another tokenizer joined")
	}
	if _, err := e.Generate(context.Background(), &engine.Request{Prompt: []engine.Token{1, 2}, MaxTokens: 1}); !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("request to a mismatched server: %v", err)
	}
}
