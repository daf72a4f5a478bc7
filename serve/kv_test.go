package serve

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/mocker"
	"github.com/tandemllm/tandem/tokenizer"
)

// kvEngines are sped-up mockers publishing real ZMQ KV events; worker i <
// off publishes nothing.
func kvEngines(off int) func(*tokenizer.Model) EngineFactory {
	return func(model *tokenizer.Model) EngineFactory {
		return func(i int) (engine.Engine, error) {
			cfg := mockerConfig(model)
			cfg.Speedup = 50
			cfg.KVCapacityTokens = mocker.SeedKVCapacityTokens
			cfg.EngineLabel = fmt.Sprint(i)
			cfg.KVEvents.Enabled = i >= off
			cfg.KVEvents.Endpoint = "tcp://127.0.0.1:0"
			return mocker.New(cfg)
		}
	}
}

type completion struct {
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
		Details      struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

// resend sends each of n prefixes rounds times (with a varying tail) and
// returns the re-requests whose engine-reported cached tokens cover the
// prefix, and their number.
func resend(t *testing.T, url string, n, rounds int) (hits, total int) {
	t.Helper()
	for r := 0; r < rounds; r++ {
		for p := 0; p < n; p++ {
			prefix := strings.Repeat(fmt.Sprintf("prefix %d of the kv routing test; ", p), 40)
			body := fmt.Sprintf(`{"model":"tandem-mock","prompt":%q,"max_tokens":2}`, prefix+fmt.Sprintf("tail %d", r))
			resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var c completion
			if err := json.Unmarshal(b, &c); err != nil || resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			if r > 0 {
				total++
				if c.Usage.Details.CachedTokens >= c.Usage.PromptTokens-32 {
					hits++
				}
			}
		}
	}
	return hits, total
}

func TestKVModeRoutesPrefixesHome(t *testing.T) {
	for _, mode := range []string{"kv", "kv-approx"} {
		t.Run(mode, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.RouterMode = mode
			sys := startTest(t, cfg, kvEngines(0))
			if hits, total := resend(t, sys.URL(), 6, 3); hits != total {
				t.Fatalf("%s: %d/%d re-requests hit the cache", mode, hits, total)
			}
		})
	}
}

// TestMissingEventsAreReported is the seeds' silent failure, made loud: in
// kv mode a worker that publishes no events is reported on /health, and
// routing still finds the cache by approximation.
func TestMissingEventsAreReported(t *testing.T) {
	cfg := DefaultConfig()
	cfg.RouterMode = "kv"
	cfg.KV.KVEventsTimeout = 300 * time.Millisecond
	sys := startTest(t, cfg, kvEngines(1))
	hits, total := resend(t, sys.URL(), 6, 3)
	if hits < total-1 {
		t.Fatalf("%d/%d re-requests hit with worker-0's events off", hits, total)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := http.Get(sys.URL() + "/health")
		if err != nil {
			t.Fatal(err)
		}
		var rep struct {
			Status      string
			Diagnostics []struct{ Code, Subject string }
		}
		_ = json.NewDecoder(resp.Body).Decode(&rep)
		resp.Body.Close()
		if rep.Status == "degraded" && len(rep.Diagnostics) > 0 && rep.Diagnostics[0].Code == "kv_events_missing" && rep.Diagnostics[0].Subject == "worker-0" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no kv_events_missing on /health: %+v", rep)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
