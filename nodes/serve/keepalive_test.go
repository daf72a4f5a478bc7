package serve

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tandemllm/tandem/dispatch"
	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/upstream"
	"github.com/tandemllm/tandem/engine/upstream/standin"
	"github.com/tandemllm/tandem/tokenizer"
)

// TestUpstreamIdleConnectionsUnderLoad: streamed requests through `tandem
// serve --engine upstream` to llama-server look-alikes that time kept-alive
// connections out (and close each request that arrives on a connection
// idle that long, the race made certain), in bursts with idle pauses
// between them: every request streams, none fails before its first byte
// (they used to come back as 503s and worker_unreachable), and the
// stand-ins show the race happened.
func TestUpstreamIdleConnectionsUnderLoad(t *testing.T) {
	model, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	const idle = 80 * time.Millisecond
	var srvs []*standin.LlamaCpp
	for range 2 {
		srv, err := standin.StartLlamaCpp(standin.LlamaCppOptions{Model: "m.gguf", NCtx: 4096, Slots: 4, KeepAlive: idle})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		srvs = append(srvs, srv)
	}
	cfg := DefaultConfig()
	cfg.HTTPAddr, cfg.Workers, cfg.RouterMode = "127.0.0.1:0", 2, "kv-approx"
	quiet := slog.New(slog.DiscardHandler)
	sys, err := Start(cfg, model, func(i int) (engine.Engine, error) {
		// The engine's own client: idle connections kept 3 s, far longer
		// than these servers' keep-alive, so the race is met.
		return upstream.New(context.Background(), upstream.Config{URL: srvs[i].URL(), API: upstream.APILlamaCpp, Codec: model.Tokenizer,
			HealthInterval: -1, MetricsInterval: -1, Logger: quiet})
	}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sys.Shutdown(context.Background()) })
	var (
		mu     sync.Mutex
		failed []string
		ok     int
	)
	for burst := range 4 {
		time.Sleep(idle + idle/2)
		var wg sync.WaitGroup
		for i := range 6 {
			wg.Go(func() {
				body := `{"model":"m.gguf","prompt":"Once upon a time ` + strings.Repeat("x", burst*6+i) + `","max_tokens":3,"stream":true}`
				resp, err := http.Post(sys.URL()+"/v1/completions", "application/json", strings.NewReader(body))
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failed = append(failed, err.Error())
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || !strings.HasSuffix(string(b), "data: [DONE]\n\n") {
					failed = append(failed, resp.Status+" "+string(b))
					return
				}
				ok++
			})
		}
		wg.Wait()
	}
	if len(failed) > 0 {
		t.Fatalf("%d of %d requests failed: %v", len(failed), len(failed)+ok, failed)
	}
	if srvs[0].IdleClosed()+srvs[1].IdleClosed() == 0 {
		t.Fatal("no connection was closed idle: the race was not exercised")
	}
	if sys.Board.IsActive(dispatch.DiagWorkerUnreachable, "worker-0") || sys.Board.IsActive(dispatch.DiagWorkerUnreachable, "worker-1") {
		t.Fatal("worker_unreachable raised against healthy servers")
	}
}
