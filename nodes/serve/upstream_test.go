package serve

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/mocker"
	"github.com/tandemllm/tandem/engine/upstream"
	"github.com/tandemllm/tandem/tokenizer"
)

// TestKVRoutingToUpstreams: `tandem serve --engine upstream --router-mode
// kv` in front of two vLLM-compatible servers follows their vLLM KV events
// (ZMQ) like any worker's, so a repeated prompt goes back to the server
// that caches it: every repeat reports its whole blocks cached.
func TestKVRoutingToUpstreams(t *testing.T) {
	model, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	var urls, events []string
	for range 2 {
		cfg := DefaultConfig()
		cfg.Workers = 1
		srv := startTest(t, cfg, func(*tokenizer.Model) EngineFactory {
			return func(int) (engine.Engine, error) {
				mc := mockerConfig(model)
				mc.Speedup, mc.KVEvents.Enabled, mc.KVEvents.Endpoint = 100, true, "tcp://127.0.0.1:0"
				return mocker.New(mc)
			}
		})
		urls = append(urls, srv.URL())
		events = append(events, srv.Engine(0).(interface{ KVEventsEndpoint() string }).KVEventsEndpoint())
	}
	cfg := DefaultConfig()
	cfg.HTTPAddr, cfg.Workers, cfg.RouterMode = "127.0.0.1:0", 2, "kv"
	front, err := Start(cfg, model, func(i int) (engine.Engine, error) {
		return upstream.New(context.Background(), upstream.Config{URL: urls[i], KVEventsEndpoint: events[i]})
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = front.Shutdown(context.Background()) })
	const prompts = 5 // odd: round-robin would send every repeat to the other server
	for round := range 2 {
		for k := range prompts {
			_, cached := complete(t, front.URL(), ids(320, 40+k))
			if round == 1 && cached < 319/16*16 {
				t.Fatalf("repeat of prompt %d reports %d cached tokens: it went to the other server", k, cached)
			}
		}
	}
	// Each subscription reaches healthy once its replay has caught up;
	// under the race detector on two loaded cores that can trail the last
	// request by a few seconds, so poll (a stream that never syncs still
	// fails).
	deadline := time.Now().Add(20 * time.Second)
	for {
		h := healthOf(t, front.URL())
		if h["worker-0"] == "healthy" && h["worker-1"] == "healthy" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kv events not healthy after 20 s: %v", h)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// healthOf returns each worker's kv_events state from /health.
func healthOf(t *testing.T, url string) map[string]string {
	t.Helper()
	var h struct {
		Workers []struct {
			ID       string `json:"id"`
			KVEvents string `json:"kv_events"`
		} `json:"workers"`
	}
	resp, err := http.Get(url + "/health")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, w := range h.Workers {
		out[w.ID] = w.KVEvents
	}
	return out
}
