package serve

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/upstream"
	"github.com/tandemllm/tandem/engine/upstream/standin"
	"github.com/tandemllm/tandem/tokenizer"
)

// TestUpstreamLateServerUnnamed: `tandem serve --engine upstream` with no
// --upstream-model starts while one of its servers is down: the served
// name is the answering server's, the down one is upstream_model_unknown
// (and unavailable) on /health, and when it answers it joins, the
// diagnostics clear, and its smaller context (llama-server's slot n_ctx)
// becomes what /v1/models reports and what prompts are checked against.
func TestUpstreamLateServerUnnamed(t *testing.T) {
	model, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	up, err := standin.StartLlamaCpp(standin.LlamaCppOptions{Model: "m.gguf", NCtx: 4096, Slots: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { up.Close() })
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lateAddr := lis.Addr().String()
	lis.Close()
	urls := []string{"http://" + lateAddr, up.URL()}
	cfg := DefaultConfig()
	cfg.HTTPAddr, cfg.Workers, cfg.RouterMode = "127.0.0.1:0", 2, "kv-approx"
	quiet := slog.New(slog.DiscardHandler)
	sys, err := Start(cfg, model, func(i int) (engine.Engine, error) {
		return upstream.New(context.Background(), upstream.Config{URL: urls[i], API: upstream.APILlamaCpp, Codec: model.Tokenizer,
			HealthInterval: -1, MetricsInterval: -1, ConnectInterval: 20 * time.Millisecond, Logger: quiet})
	}, quiet)
	if err != nil {
		t.Fatalf("serve with a down server and no --upstream-model: %v", err)
	}
	t.Cleanup(func() { _ = sys.Shutdown(context.Background()) })
	if got := modelsCard(t, sys.URL()); got.ID != "m.gguf" || got.MaxModelLen != 4096 {
		t.Fatalf("/v1/models before the late server: %+v", got)
	}
	if !sys.Board.IsActive(upstream.DiagModelUnknown, "worker-0") || !sys.Board.IsActive(upstream.DiagUnavailable, "worker-0") {
		t.Fatalf("no %s and %s for the down server: %v", upstream.DiagModelUnknown, upstream.DiagUnavailable, sys.Board.Active())
	}
	late, err := standin.StartLlamaCpp(standin.LlamaCppOptions{Model: "m.gguf", NCtx: 512, Slots: 1, Addr: lateAddr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { late.Close() })
	deadline := time.Now().Add(10 * time.Second)
	for modelsCard(t, sys.URL()).MaxModelLen != 512 {
		if time.Now().After(deadline) {
			t.Fatalf("/v1/models still %+v after the late server answered", modelsCard(t, sys.URL()))
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, code := range []string{upstream.DiagModelUnknown, upstream.DiagUnavailable} {
		if sys.Board.IsActive(code, "worker-0") {
			t.Errorf("%s still active after the server joined", code)
		}
	}
	// A prompt longer than the late server's context is refused, naming the
	// server's context.
	body := `{"model":"m.gguf","prompt":"` + strings.Repeat("hello ", 600) + `","max_tokens":1}`
	resp, err := http.Post(sys.URL()+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), "context length is 512") {
		t.Fatalf("a prompt past the late server's context: %s %s", resp.Status, b)
	}
}

type modelCard struct {
	ID          string `json:"id"`
	MaxModelLen int    `json:"max_model_len"`
}

func modelsCard(t *testing.T, base string) modelCard {
	t.Helper()
	resp, err := http.Get(base + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct {
		Data []modelCard `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&list); err != nil || len(list.Data) != 1 {
		t.Fatalf("/v1/models: %+v %v", list, err)
	}
	return list.Data[0]
}
