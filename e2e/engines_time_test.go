package e2e

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

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
