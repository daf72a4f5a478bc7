package serve

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/mocker"
	"github.com/tandemllm/tandem/tokenizer"
)

// TestSharedTierThroughServe: two kv-routed mocker workers share one
// simulated disk tier. A prompt pushed out of the pools by others comes
// back onboarded from the disk (cached tokens > 0), and /health shows
// each worker's tiers with the onboard.
func TestSharedTierThroughServe(t *testing.T) {
	disk := mocker.NewSharedDiskNamed("test-host/disk0")
	factory := func(model *tokenizer.Model) EngineFactory {
		return func(i int) (engine.Engine, error) {
			cfg := mockerConfig(model)
			cfg.Speedup = 50
			cfg.KVCapacityTokens = 1024
			cfg.EngineLabel = fmt.Sprint(i)
			cfg.KVEvents.Enabled = true
			cfg.KVEvents.Endpoint = "tcp://127.0.0.1:0"
			cfg.Tiers = mocker.TierConfig{DiskBytes: 1 << 30, Shared: disk}
			return mocker.New(cfg)
		}
	}
	cfg := DefaultConfig()
	cfg.RouterMode = "kv"
	sys := startTest(t, cfg, factory)
	send := func(prompt string) completion {
		t.Helper()
		body := fmt.Sprintf(`{"model":"tandem-mock","prompt":%q,"max_tokens":2}`, prompt)
		resp, err := http.Post(sys.URL()+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		var c completion
		if err := json.Unmarshal(b, &c); err != nil || resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		return c
	}
	doc := strings.Repeat("the document both workers may need; ", 40)
	send(doc + "first question")
	for i := range 14 {
		send(strings.Repeat(fmt.Sprintf("filler %d pushes the document out of the pools; ", i), 30))
	}
	if c := send(doc + "second question"); c.Usage.Details.CachedTokens == 0 {
		t.Fatalf("the document came back with no cached tokens (%+v)", c.Usage)
	}
	resp, err := http.Get(sys.URL() + "/health")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h struct {
		Workers []struct {
			ID    string `json:"id"`
			Tiers []struct {
				Tier      string `json:"tier"`
				Onboarded uint64 `json:"onboarded_blocks"`
				Capacity  int    `json:"capacity_blocks"`
			} `json:"kv_tiers"`
		} `json:"workers"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&h); err != nil {
		t.Fatal(err)
	}
	var onboarded uint64
	for _, w := range h.Workers {
		if len(w.Tiers) != 3 || w.Tiers[2].Tier != "g3" || w.Tiers[2].Capacity == 0 {
			t.Fatalf("worker %s's tiers on /health: %+v", w.ID, w.Tiers)
		}
		onboarded += w.Tiers[2].Onboarded
	}
	if len(h.Workers) != 2 || onboarded == 0 {
		t.Fatalf("/health: %d workers, %d blocks onboarded from the disk; want 2 and some", len(h.Workers), onboarded)
	}
}
