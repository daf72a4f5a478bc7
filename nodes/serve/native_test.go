package serve

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/native"
	"github.com/tandemllm/tandem/internal/sharedfiles"
	"github.com/tandemllm/tandem/tokenizer"
)

// TestNativeStoriesThroughHTTP: `tandem serve --engine native --model
// stories260K` serves the reference model's golden greedy story through the
// completions endpoint, and chat works with the built-in template.
func TestNativeStoriesThroughHTTP(t *testing.T) {
	dir, err := sharedfiles.Path("models", "stories260K")
	if err != nil {
		t.Skipf("no shared directory: %v", err)
	}
	golden, err := os.ReadFile(dir + "/golden-once-upon-a-time.txt")
	if err != nil {
		t.Skipf("reference model absent: %v", err)
	}
	model, err := tokenizer.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.HTTPAddr, cfg.Workers = "127.0.0.1:0", 1
	sys, err := Start(cfg, model, func(int) (engine.Engine, error) {
		e, _, err := native.Load(dir, native.Options{Model: model.Name, Threads: 2})
		return e, err
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sys.Shutdown(context.Background()) })

	c := openai.NewClient(option.WithBaseURL(sys.URL()+"/v1/"), option.WithAPIKey("x"), option.WithMaxRetries(0))
	resp, err := c.Completions.New(context.Background(), openai.CompletionNewParams{
		Model: openai.CompletionNewParamsModel(model.Name), Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
		MaxTokens: openai.Int(40), Temperature: openai.Float(0),
	})
	if err != nil {
		t.Fatal(err)
	}
	got := "Once upon a time" + resp.Choices[0].Text
	if want := strings.TrimSpace(string(golden)); !strings.HasPrefix(want, strings.TrimSpace(got)) {
		t.Fatalf("not the golden story:\n got %q\nwant %q", got, want)
	}
	chat, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: model.Name, MaxTokens: openai.Int(16), Temperature: openai.Float(0),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Lily went to the park")},
	})
	if err != nil || chat.Choices[0].Message.Content == "" {
		t.Fatalf("chat: %+v %v", chat, err)
	}
}
