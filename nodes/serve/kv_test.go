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
// prefix, and their number. With settle, each first request waits (up to
// 2 s) until the router has applied a new KV event batch: what is measured
// is where the router sends a prefix it has heard of, not whether a loaded
// CI machine delivers an event within the next few requests (kv mode
// trusts a healthy worker's events alone, so an event still in flight is a
// miss by design). A batch that never comes is not waited for: one the
// slow joiner dropped is covered by the worker's routing records (the
// subscription goes live mid-stream), which is part of what is tested.
func resend(t *testing.T, url string, n, rounds int, settle bool) (hits, total int) {
	t.Helper()
	var applied uint64
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
			if settle && r == 0 {
				applied = awaitApplied(t, url, applied)
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

// awaitApplied waits until the workers' KV events applied, summed, exceed
// after and then hold still for 20 ms (a prefill in several steps publishes
// several batches), or for 2 s, and returns the sum.
func awaitApplied(t *testing.T, url string, after uint64) uint64 {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	last := after
	for {
		var h struct {
			Workers []struct {
				Applied uint64 `json:"kv_events_applied"`
			} `json:"workers"`
		}
		resp, err := http.Get(url + "/health")
		if err != nil {
			t.Fatal(err)
		}
		err = json.NewDecoder(resp.Body).Decode(&h)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		var sum uint64
		for _, w := range h.Workers {
			sum += w.Applied
		}
		if sum > after && sum == last {
			return sum
		}
		if time.Now().After(deadline) {
			return sum
		}
		last = sum
		time.Sleep(20 * time.Millisecond)
	}
}

func TestKVModeRoutesPrefixesHome(t *testing.T) {
	for _, mode := range []string{"kv", "kv-approx"} {
		t.Run(mode, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.RouterMode = mode
			sys := startTest(t, cfg, kvEngines(0))
			if hits, total := resend(t, sys.URL(), 6, 3, mode == "kv"); hits != total {
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
	hits, total := resend(t, sys.URL(), 6, 3, false)
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
