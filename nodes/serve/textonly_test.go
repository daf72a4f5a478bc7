package serve

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/upstream"
	"github.com/tandemllm/tandem/engine/upstream/standin"
	"github.com/tandemllm/tandem/tokenizer"
)

// TestTextOnlyUpstreamWithOpenAIClient: `tandem serve --engine upstream`
// in front of a server that sends text only and usage only at the end
// (vLLM before 0.10.2 with the vllm API; any OpenAI-compatible server with
// the openai API), driven by the official openai-go client: chat and
// completions, streaming and not, stop strings, usage and cached_tokens
// are right, and the model is the server's name, not Tandem's tokenizer's.
func TestTextOnlyUpstreamWithOpenAIClient(t *testing.T) {
	model, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	const served = "org/real-model"
	for _, api := range []string{upstream.APIOpenAI, upstream.APIVLLM} {
		t.Run(api, func(t *testing.T) {
			mc := mockerConfig(model)
			mc.Instant = true
			srv, err := standin.Start(standin.Options{Model: served, Mocker: mc, PromptTokensDetails: true, Codec: model.Tokenizer})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { srv.Close() })
			cfg := DefaultConfig()
			cfg.HTTPAddr, cfg.Workers, cfg.RouterMode = "127.0.0.1:0", 1, "kv"
			sys, err := Start(cfg, model, func(int) (engine.Engine, error) {
				return upstream.New(context.Background(), upstream.Config{URL: srv.URL(), API: api, Codec: model.Tokenizer, HealthInterval: -1, Logger: slog.New(slog.DiscardHandler)})
			}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = sys.Shutdown(context.Background()) })
			c := openai.NewClient(option.WithBaseURL(sys.URL()+"/v1/"), option.WithAPIKey("x"), option.WithMaxRetries(0))
			ctx := t.Context()

			models, err := c.Models.List(ctx)
			if err != nil || len(models.Data) != 1 || models.Data[0].ID != served {
				t.Fatalf("models %+v %v", models, err)
			}
			want := model.Tokenizer.Decode(mc.Vocabulary)
			comp, err := c.Completions.New(ctx, openai.CompletionNewParams{Model: served, MaxTokens: openai.Int(8),
				Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")}})
			if err != nil {
				t.Fatal(err)
			}
			if txt := comp.Choices[0].Text; txt == "" || !strings.Contains(want+want, txt) || comp.Usage.CompletionTokens != 8 ||
				comp.Usage.PromptTokens != int64(len(model.Tokenizer.Encode("Once upon a time"))) {
				t.Fatalf("completion %q usage %+v", txt, comp.Usage)
			}
			// A stop string inside the text ends the choice before it.
			stopped, err := c.Completions.New(ctx, openai.CompletionNewParams{Model: served, MaxTokens: openai.Int(64),
				Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
				Stop:   openai.CompletionNewParamsStopUnion{OfString: openai.String("the")}})
			if err != nil {
				t.Fatal(err)
			}
			if ch := stopped.Choices[0]; strings.Contains(ch.Text, "the") || ch.FinishReason != "stop" || ch.Text == "" {
				t.Fatalf("stop string: %q %s", ch.Text, ch.FinishReason)
			}
			// Streaming chat, twice with one long prompt: usage arrives in
			// the final chunk, and the repeat's cached_tokens are the
			// server's.
			long := strings.Repeat("The clockmaker fixed every clock in the town. ", 12)
			var cached []int64
			for range 2 {
				st := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: served, MaxTokens: openai.Int(6),
					Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage(long)},
					StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}})
				var text strings.Builder
				var usage openai.CompletionUsage
				for st.Next() {
					ch := st.Current()
					if len(ch.Choices) > 0 {
						text.WriteString(ch.Choices[0].Delta.Content)
					}
					if ch.Usage.TotalTokens > 0 {
						usage = ch.Usage
					}
				}
				if err := st.Err(); err != nil {
					t.Fatal(err)
				}
				if text.Len() == 0 || usage.CompletionTokens != 6 || usage.PromptTokens < 100 {
					t.Fatalf("stream %q usage %+v", text.String(), usage)
				}
				cached = append(cached, usage.PromptTokensDetails.CachedTokens)
			}
			if cached[0] != 0 || cached[1] < 96 {
				t.Fatalf("cached_tokens %v, want 0 then the prompt's whole blocks", cached)
			}
			// Unstreamed chat.
			chat, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: served, MaxTokens: openai.Int(4),
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")}})
			if err != nil || chat.Choices[0].Message.Content == "" || chat.Usage.CompletionTokens != 4 {
				t.Fatalf("chat %+v %v", chat, err)
			}
			for _, d := range sys.Board.Active() {
				if strings.HasPrefix(d.Code, "kv_prediction") || d.Code == upstream.DiagNoCachedTokens {
					t.Errorf("diagnostic %s: %s", d.Code, d.Message)
				}
			}
		})
	}
}

// TestUpstreamPoolModelMismatch: upstreams of one pool that serve
// different models are a startup error naming both.
func TestUpstreamPoolModelMismatch(t *testing.T) {
	model, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	var urls []string
	for _, name := range []string{"org/a", "org/b"} {
		mc := mockerConfig(model)
		mc.Instant = true
		srv, err := standin.Start(standin.Options{Model: name, Mocker: mc, ReturnTokenIDs: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		urls = append(urls, srv.URL())
	}
	cfg := DefaultConfig()
	cfg.HTTPAddr, cfg.Workers = "127.0.0.1:0", 2
	sys, err := Start(cfg, model, func(i int) (engine.Engine, error) {
		return upstream.New(context.Background(), upstream.Config{URL: urls[i], HealthInterval: -1})
	}, slog.New(slog.DiscardHandler))
	if err == nil {
		_ = sys.Shutdown(context.Background())
		t.Fatal("a pool of two models started")
	}
	for _, s := range []string{urls[0], urls[1], "org/a", "org/b"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not name %s", err, s)
		}
	}
}
