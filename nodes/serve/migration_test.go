package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/upstream"
	"github.com/tandemllm/tandem/tokenizer"
)

// TestMigrationMidStream: with --migration-limit 1, a worker whose
// connection dies after three tokens (a killed server: the handler aborts
// the connection) is replaced by another, asked for the prompt plus the
// three tokens already sent and for what is left of max_tokens; the
// openai-go client reads one unbroken stream of every token.
func TestMigrationMidStream(t *testing.T) {
	model, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	out := model.Tokenizer.Encode(" one two three four five six seven eight")
	const sentBeforeDeath = 3
	var mu sync.Mutex
	var prompts [][]engine.Token
	var maxes []int
	// vLLM-like servers: server 0 dies after sentBeforeDeath tokens,
	// server 1 continues where the prompt it is given ends.
	newServer := func(dies bool) string {
		mux := http.NewServeMux()
		mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprintf(w, `{"data":[{"id":%q,"max_model_len":4096}]}`, model.Name)
		})
		mux.HandleFunc("GET /health", func(http.ResponseWriter, *http.Request) {})
		mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) {
			var b struct {
				Prompt    []engine.Token `json:"prompt"`
				MaxTokens int            `json:"max_tokens"`
			}
			_ = json.NewDecoder(r.Body).Decode(&b)
			mu.Lock()
			prompts, maxes = append(prompts, b.Prompt), append(maxes, b.MaxTokens)
			mu.Unlock()
			w.Header().Set("Content-Type", "text/event-stream")
			done := len(out) - b.MaxTokens // tokens of out already in the prompt
			for i := done; i < len(out); i++ {
				if dies && i == sentBeforeDeath {
					panic(http.ErrAbortHandler) // the connection drops mid-stream
				}
				fin := "null"
				if i == len(out)-1 {
					fin = `"length"`
				}
				fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"text\":\"x\",\"token_ids\":[%d],\"finish_reason\":%s}],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"prompt_tokens_details\":{\"cached_tokens\":0}}}\n\n",
					out[i], fin, len(b.Prompt), i-done+1)
				w.(http.Flusher).Flush()
			}
			fmt.Fprint(w, "data: [DONE]\n\n")
		})
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		return srv.URL
	}
	urls := []string{newServer(true), newServer(false)}
	cfg := DefaultConfig()
	cfg.HTTPAddr, cfg.Workers, cfg.RouterMode = "127.0.0.1:0", 2, "round-robin"
	cfg.Dispatch.MigrationLimit = 1
	sys, err := Start(cfg, model, func(i int) (engine.Engine, error) {
		return upstream.New(context.Background(), upstream.Config{URL: urls[i], HealthInterval: -1, Logger: slog.New(slog.DiscardHandler)})
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sys.Shutdown(context.Background()) })
	c := openai.NewClient(option.WithBaseURL(sys.URL()+"/v1/"), option.WithAPIKey("x"), option.WithMaxRetries(0))
	prompt := model.Tokenizer.Encode("Count:")
	st := c.Completions.NewStreaming(t.Context(), openai.CompletionNewParams{Model: openai.CompletionNewParamsModel(model.Name),
		MaxTokens: openai.Int(int64(len(out))), Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Count:")}})
	var text string
	var finish string
	for st.Next() {
		ch := st.Current()
		if len(ch.Choices) > 0 {
			text += ch.Choices[0].Text
			if ch.Choices[0].FinishReason != "" {
				finish = string(ch.Choices[0].FinishReason)
			}
		}
	}
	if err := st.Err(); err != nil {
		t.Fatalf("stream broke: %v (text so far %q)", err, text)
	}
	if want := model.Tokenizer.Decode(out); text != want || finish != "length" {
		t.Fatalf("text %q finish %q, want %q length", text, finish, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(prompts) != 2 || !slices.Equal(prompts[1], append(slices.Clip(prompt), out[:sentBeforeDeath]...)) || maxes[1] != len(out)-sentBeforeDeath {
		t.Fatalf("second leg: prompts %v max_tokens %v", prompts, maxes)
	}
}
