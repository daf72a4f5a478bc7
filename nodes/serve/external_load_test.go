package serve

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/upstream"
	"github.com/tandemllm/tandem/engine/upstream/standin"
	"github.com/tandemllm/tandem/router"
	"github.com/tandemllm/tandem/tokenizer"
)

// TestUpstreamExternalLoad: two vLLM stand-ins behind `serve --engine
// upstream`; another client floods the first one directly, past its
// --max-num-seqs, so its /metrics shows requests waiting that Tandem never
// sent. Cold requests through Tandem then go to the second server, under
// every router cost; once the flood ends they spread again.
func TestUpstreamExternalLoad(t *testing.T) {
	model, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	for _, cost := range []string{"ttft", "tandem", "dynamo"} {
		t.Run(cost, func(t *testing.T) {
			var srvs []*standin.Server
			for range 2 {
				mc := mockerConfig(model)
				mc.MaxNumSeqs = 2 // a small batch, so a flood queues
				srv, err := standin.Start(standin.Options{Model: "org/m", Mocker: mc, PromptTokensDetails: true, Codec: model.Tokenizer})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { srv.Close() })
				srvs = append(srvs, srv)
			}
			cfg := DefaultConfig()
			cfg.HTTPAddr, cfg.Workers, cfg.RouterMode, cfg.KV.Cost = "127.0.0.1:0", 2, "kv", router.CostModel(cost)
			sys, err := Start(cfg, model, func(i int) (engine.Engine, error) {
				return upstream.New(context.Background(), upstream.Config{URL: srvs[i].URL(), API: upstream.APIVLLM,
					Codec: model.Tokenizer, HealthInterval: -1, MetricsInterval: 50 * time.Millisecond,
					Logger: slog.New(slog.DiscardHandler)})
			}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = sys.Shutdown(context.Background()) })

			// The other client: eight long streams straight to server 0.
			flood, cancel := context.WithCancel(t.Context())
			var floods sync.WaitGroup
			// The flood's goroutines log through t: they must end before
			// the test does, on every path.
			stop := func() { cancel(); floods.Wait() }
			defer stop()
			for i := range 8 {
				floods.Add(1)
				go func() {
					defer floods.Done()
					body := fmt.Sprintf(`{"model":"org/m","prompt":"flood %d","max_tokens":30000,"ignore_eos":true,"stream":true}`, i)
					req, _ := http.NewRequestWithContext(flood, "POST", srvs[0].URL()+"/v1/completions", strings.NewReader(body))
					req.Header.Set("Content-Type", "application/json")
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						if flood.Err() == nil {
							t.Log("flood:", err)
						}
						return
					}
					if resp.StatusCode != 200 {
						b, _ := io.ReadAll(resp.Body)
						t.Logf("flood: HTTP %d %s", resp.StatusCode, b)
					}
					defer resp.Body.Close()
					sc := bufio.NewScanner(resp.Body)
					for sc.Scan() {
					}
				}()
			}
			waitFor(t, 30*time.Second, "server 0's /metrics to show the flood waiting", func() bool {
				l, ok := sys.Engine(0).(*upstream.Engine).Load()
				return ok && l.Waiting >= 4
			})
			// /health shows what the router reads.
			resp, err := http.Get(sys.URL() + "/health")
			if err != nil {
				t.Fatal(err)
			}
			var rep struct {
				Workers []struct {
					ID          string `json:"id"`
					EngineQueue *struct {
						Waiting int `json:"waiting"`
					} `json:"engine_queue"`
				} `json:"workers"`
			}
			err = json.NewDecoder(resp.Body).Decode(&rep)
			resp.Body.Close()
			if err != nil || len(rep.Workers) != 2 || rep.Workers[0].EngineQueue == nil || rep.Workers[0].EngineQueue.Waiting < 4 {
				t.Fatalf("/health workers %+v (%v), want worker 0's engine_queue with the flood waiting", rep.Workers, err)
			}
			before := [2]int64{srvs[0].Requests(), srvs[1].Requests()}
			// Bounded: without the engine's report a cold request would
			// queue behind the flood on server 0 for minutes.
			client := &http.Client{Timeout: 60 * time.Second}
			send := func(n, from int) {
				for i := range n {
					resp, err := client.Post(sys.URL()+"/v1/completions", "application/json",
						strings.NewReader(fmt.Sprintf(`{"model":"org/m","prompt":"cold request number %d","max_tokens":2}`, from+i)))
					if err != nil {
						t.Fatal(err)
					}
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						t.Fatalf("HTTP %d", resp.StatusCode)
					}
				}
			}
			send(10, 0)
			if got := [2]int64{srvs[0].Requests() - before[0], srvs[1].Requests() - before[1]}; got[0] != 0 || got[1] != 10 {
				t.Fatalf("with server 0 flooded by another client: Tandem sent %v (server 0, server 1), want [0 10]", got)
			}
			stop()
			waitFor(t, 30*time.Second, "server 0's queue to drain", func() bool {
				l, ok := sys.Engine(0).(*upstream.Engine).Load()
				return ok && l.Waiting == 0 && l.Running == 0
			})
			before = [2]int64{srvs[0].Requests(), srvs[1].Requests()}
			send(20, 100)
			if got := [2]int64{srvs[0].Requests() - before[0], srvs[1].Requests() - before[1]}; got[0] < 4 || got[1] < 4 {
				t.Fatalf("flood over: Tandem sent %v, want both servers used", got)
			}
		})
	}
}

func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
