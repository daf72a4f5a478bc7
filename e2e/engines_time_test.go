package e2e

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tandemllm/tandem/engine/mocker"
	"github.com/tandemllm/tandem/engine/upstream/standin"
)

// TestServeBeforeItsEngines: `tandem serve --engine upstream` started
// before its server (compose, pods) used to exit; now it serves at once,
// shows the worker unavailable on /health, and answers as soon as the
// server does.
func TestServeBeforeItsEngines(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	p := startTandem(t, "serve --http-addr 127.0.0.1:0 --engine upstream --upstream-api llamacpp --upstream http://"+addr+
		" --upstream-model qwen.gguf")
	client := http.DefaultClient
	get := func(path string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, p.url+path, nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if _, body := get("/health"); !strings.Contains(body, "upstream_unavailable") {
		t.Fatalf("/health before the server answers: %s", body)
	}
	srv, err := standin.StartLlamaCpp(standin.LlamaCppOptions{Model: "qwen.gguf", NCtx: 4096, LoadTime: 300 * time.Millisecond, Addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	deadline := time.Now().Add(15 * time.Second)
	for {
		req, _ := http.NewRequest(http.MethodPost, p.url+"/v1/completions",
			strings.NewReader(`{"model":"qwen.gguf","prompt":"Once upon a time","max_tokens":3}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer once the server is up: %d %s", resp.StatusCode, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, body := get("/health"); strings.Contains(body, `"upstream_unavailable"`) {
		t.Fatalf("/health after the server answered: %s", body)
	}
}

// TestServeBeforeItsEnginesSGLang: `tandem serve` started before an
// SGLang server with two attention-DP ranks, naming neither the model nor
// anything but the ranks (--upstream-dp-size): it serves at once under
// the tokenizer's name (upstream_model_unknown and upstream_unavailable
// on /health), and when the server answers both rank workers join, the
// diagnostics clear, and /v1/models reports the server's context.
func TestServeBeforeItsEnginesSGLang(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	p := startTandem(t, "serve --http-addr 127.0.0.1:0 --engine upstream --upstream-api sglang --upstream-dp-size 2 --upstream http://"+addr)
	get := func(path string) string {
		resp, err := http.Get(p.url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if body := get("/health"); !strings.Contains(body, "upstream_unavailable") || !strings.Contains(body, "upstream_model_unknown") {
		t.Fatalf("/health before the server answers: %s", body)
	}
	mc := mocker.DefaultConfig()
	mc.Instant, mc.KVEvents.Enabled, mc.ContextLength = true, false, 2048
	srv, err := standin.StartSGLang(standin.SGLangOptions{Model: "Qwen/Qwen3-0.6B", Mocker: mc, DPSize: 2, Addr: addr, EnableMetrics: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	deadline := time.Now().Add(15 * time.Second)
	for served := 0; served < 4; {
		resp, err := http.Post(p.url+"/v1/completions", "application/json",
			strings.NewReader(`{"model":"tandem-mock","prompt":"Once upon a time","max_tokens":3}`))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			served++
			continue
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer once the server is up: %d %s", resp.StatusCode, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for !strings.Contains(get("/v1/models"), `"max_model_len":2048`) || strings.Contains(get("/health"), `"upstream_unavailable"`) ||
		strings.Contains(get("/health"), `"upstream_model_unknown"`) {
		if time.Now().After(deadline) {
			t.Fatalf("after the server joined: /v1/models %s /health %s", get("/v1/models"), get("/health"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
