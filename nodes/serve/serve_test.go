package serve

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/tandemllm/tandem/engine/mocker"

	"github.com/tandemllm/tandem/tokenizer"
)

func startTest(t *testing.T, cfg Config, factory func(*tokenizer.Model) EngineFactory) *System {
	t.Helper()
	model, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	cfg.HTTPAddr = "127.0.0.1:0"
	sys, err := Start(cfg, model, factory(model), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sys.Shutdown(context.Background()) })
	return sys
}

// TestWholeSystemWithSDK runs chat and completions through every request
// plane with the official client, and checks requests spread over workers.
func TestWholeSystemWithSDK(t *testing.T) {
	for _, plane := range []string{"inproc", "grpc"} {
		t.Run(plane, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.RequestPlane = plane
			sys := startTest(t, cfg, defaultTestEngines)
			c := openai.NewClient(option.WithBaseURL(sys.URL()+"/v1/"), option.WithAPIKey("x"), option.WithMaxRetries(0))
			seen := map[string]bool{}
			for i := 0; i < 4; i++ {
				var resp *http.Response
				out, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
					Model: tokenizer.DefaultModelName, MaxTokens: openai.Int(8),
					Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("be brief"), openai.UserMessage("hello")},
				}, option.WithResponseInto(&resp))
				if err != nil {
					t.Fatal(err)
				}
				if out.Choices[0].Message.Content == "" || out.Usage.CompletionTokens == 0 {
					t.Fatalf("empty completion %+v", out)
				}
				seen[resp.Header.Get("X-Tandem-Worker")] = true
			}
			if len(seen) != 2 {
				t.Fatalf("round-robin over 2 workers hit %v", seen)
			}
			comp, err := c.Completions.New(context.Background(), openai.CompletionNewParams{
				Model: openai.CompletionNewParamsModel(tokenizer.DefaultModelName), MaxTokens: openai.Int(4),
				Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
			})
			if err != nil || comp.Usage.CompletionTokens == 0 {
				t.Fatalf("completion %+v %v", comp, err)
			}
		})
	}
}

// TestDrainLetsInFlightFinish: Shutdown stops new work but a stream already
// running completes normally.
func TestDrainLetsInFlightFinish(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Workers = 1
	sys := startTest(t, cfg, slowTestEngines)
	resp, err := http.Post(sys.URL()+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"tandem-mock","prompt":"hi","max_tokens":30,"ignore_eos":true,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 64)
	if _, err := resp.Body.Read(buf); err != nil { // the stream is under way
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done <- sys.Shutdown(ctx)
	}()
	// Polled, not one look after a fixed sleep: on a loaded machine the
	// listener may close later than 50 ms into Shutdown. The stream is
	// still running (max_tokens 30 on a slow engine) so this is draining.
	refused := time.Now().Add(10 * time.Second)
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	for {
		r, err := hc.Get(sys.URL() + "/health")
		if err != nil {
			break
		}
		r.Body.Close()
		if time.Now().After(refused) {
			t.Fatal("new connections still accepted 10 s into draining")
		}
		time.Sleep(5 * time.Millisecond)
	}
	rest, err := io.ReadAll(resp.Body)
	if err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Fatalf("in-flight stream cut: %v %q", err, rest)
	}
	if err := <-done; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}

// TestDisconnectStopsMocker: a client that goes away mid-stream frees its
// sequence on the real engine, over both request planes, within 100 ms.
func TestDisconnectStopsMocker(t *testing.T) {
	for _, plane := range []string{"inproc", "grpc"} {
		t.Run(plane, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Workers, cfg.RequestPlane = 1, plane
			sys := startTest(t, cfg, slowTestEngines)
			ctx, cancel := context.WithCancel(context.Background())
			req, _ := http.NewRequestWithContext(ctx, "POST", sys.URL()+"/v1/completions",
				strings.NewReader(`{"model":"tandem-mock","prompt":"hi","max_tokens":5000,"ignore_eos":true,"stream":true}`))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 256)
			if _, err := resp.Body.Read(buf); err != nil {
				t.Fatal(err)
			}
			m := sys.Engine(0).(*mocker.Engine)
			if m.Load().Running != 1 {
				t.Fatalf("mocker not running the sequence: %+v", m.Load())
			}
			cancel()
			resp.Body.Close()
			deadline := time.Now().Add(100 * time.Millisecond)
			for m.Load().Running != 0 {
				if time.Now().After(deadline) {
					t.Fatalf("sequence still running 100 ms after disconnect: %+v", m.Load())
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
}
