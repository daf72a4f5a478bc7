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
	// Short, so a false kv_events_missing after the repeats shows within
	// the test, and a stream that went live mid-stream (below) is healthy
	// soon after.
	cfg.KV.KVEventsTimeout, cfg.KV.RebuildWindow = 300*time.Millisecond, 300*time.Millisecond
	front, err := Start(cfg, model, func(i int) (engine.Engine, error) {
		return upstream.New(context.Background(), upstream.Config{URL: urls[i], KVEventsEndpoint: events[i]})
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = front.Shutdown(context.Background()) })
	// Both subscriptions must be live first. A ZMQ SUB drops what its
	// publisher sends before the subscription reaches it (the slow
	// joiner); these servers have no replay socket, so a stream is live
	// only from the first batch it receives, and "rebuilding" for
	// RebuildWindow if an earlier batch was dropped. Fresh prompts publish
	// batches until each stream is healthy.
	deadline := time.Now().Add(20 * time.Second)
	for warm := 0; ; warm++ {
		h := healthOf(t, front.URL())
		if h["worker-0"] == "healthy" && h["worker-1"] == "healthy" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kv events not healthy after 20 s and %d prompts: %v", warm, h)
		}
		complete(t, front.URL(), ids(320, 1000+warm))
		time.Sleep(20 * time.Millisecond)
	}
	const prompts = 5 // odd: round-robin would send every repeat to the other server
	for round := range 2 {
		for k := range prompts {
			_, cached := complete(t, front.URL(), ids(320, 40+k))
			if round == 1 && cached < 319/16*16 {
				t.Fatalf("repeat of prompt %d reports %d cached tokens: it went to the other server", k, cached)
			}
		}
	}
	// The repeats were full hits of block-aligned prompts: the engine
	// recomputed each one's last block and stored nothing new, which is
	// no reason for kv_events_missing.
	time.Sleep(3 * cfg.KV.KVEventsTimeout)
	if h := healthOf(t, front.URL()); h["worker-0"] != "healthy" || h["worker-1"] != "healthy" {
		t.Fatalf("kv events after the repeats: %v", h)
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
