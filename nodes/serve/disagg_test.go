package serve

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tandemllm/tandem/bench"
	"github.com/tandemllm/tandem/disagg"
	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/mocker"
	"github.com/tandemllm/tandem/tokenizer"
)

// seedEngines are mockers shaped like the seed's Qwen3-0.6B workers:
// 114,688 KV bytes per token (moved for real), the calibrated timing
// (≈80 ms miss, ≈15 ms hit at 1,500 tokens), 14,816 KV tokens each.
func seedEngines(model *tokenizer.Model) EngineFactory {
	return func(i int) (engine.Engine, error) {
		cfg := mockerConfig(model)
		cfg.Timing = mocker.Qwen3_0_6BTiming()
		cfg.KVCapacityTokens = mocker.SeedKVCapacityTokens
		cfg.EngineLabel = fmt.Sprint(i)
		cfg.KVEvents.Enabled = true
		cfg.KVEvents.Endpoint = "tcp://127.0.0.1:0"
		return mocker.New(cfg)
	}
}

// complete sends token-id prompt p with max_tokens 1 and returns the
// latency (≈ TTFT: one token) and the cached tokens the engine reported.
func complete(t *testing.T, url string, p []int32) (time.Duration, int) {
	t.Helper()
	el, cached, _ := completeOn(t, url, p)
	return el, cached
}

// completeOn is complete that also returns the worker that served.
func completeOn(t *testing.T, url string, p []int32) (time.Duration, int, string) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"model": "tandem-mock", "prompt": p, "max_tokens": 1, "ignore_eos": true})
	start := time.Now()
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	el := time.Since(start)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	var c completion
	if err := json.Unmarshal(body, &c); err != nil {
		t.Fatal(err)
	}
	return el, c.Usage.Details.CachedTokens, resp.Header.Get("X-Tandem-Worker")
}

// blockEvents reads the router's count of KV block events indexed, by
// worker.
func blockEvents(sys *System) map[string]float64 {
	out := map[string]float64{}
	fams, _ := sys.Registry.Gather() // duplicate engine labels: see activeOn
	for _, f := range fams {
		if f.GetName() != "tandem_router_kv_block_events_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "worker" {
					out[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

func ids(n, salt int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32(1000 + (i*31+salt*7919)%50000)
	}
	return p
}

func TestDisaggServeAlwaysAndNever(t *testing.T) {
	for _, mode := range []string{"always", "never", "auto"} {
		t.Run(mode, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.RouterMode = "kv"
			var mu sync.Mutex
			var ds []disagg.Decision
			cfg.Disagg = DisaggConfig{PrefillWorkers: 1, DecodeWorkers: 2, Settings: disagg.Settings{Mode: mode}, OnDecision: func(d disagg.Decision) {
				mu.Lock()
				ds = append(ds, d)
				mu.Unlock()
			}}
			sys := startTest(t, cfg, seedEngines)
			if got := sys.PrefillWorkers(); !slices.Equal(got, []string{"prefill-0"}) || len(sys.Workers) != 2 {
				t.Fatalf("prefill %v, decode %d", got, len(sys.Workers))
			}
			p := ids(700, 1)
			_, cached := complete(t, sys.URL(), p)
			mu.Lock()
			defer mu.Unlock()
			switch mode {
			case "always":
				if len(ds) != 1 || ds[0].Choice != disagg.ChoiceRemote || ds[0].Fallback != "" || cached != 688 {
					t.Fatalf("decisions %+v, cached %d", ds, cached)
				}
			case "never":
				if len(ds) != 0 || cached != 0 {
					t.Fatalf("never: decisions %+v, cached %d", ds, cached)
				}
			}
		})
	}
}

// TestDisaggSameHostSeedCase is the seed's 2-prefix case on one host:
// prompts of 1,792 tokens whose first 1,536 (85.7%) are one of two shared
// prefixes. Figures are logged for docs/benchmarks/disagg.md.
func TestDisaggSameHostSeedCase(t *testing.T) {
	const prefixLen, tail, rounds = 1536, 256, 6
	prompts := func(r, k int) []int32 { return append(ids(prefixLen, k), ids(tail, 100+r*2+k)...) }
	run := func(t *testing.T, dc DisaggConfig) (ttft []float64, moved, full int64, ds []disagg.Decision) {
		cfg := DefaultConfig()
		cfg.RouterMode = "kv"
		var mu sync.Mutex
		dc.OnDecision = func(d disagg.Decision) { mu.Lock(); ds = append(ds, d); mu.Unlock() }
		cfg.Disagg = dc
		sys := startTest(t, cfg, seedEngines)
		for r := range rounds {
			for k := range 2 {
				before := blockEvents(sys)
				el, _, served := completeOn(t, sys.URL(), prompts(r, k))
				// The next request is routed by the blocks this one
				// stored (its tail is new): wait for their events to be
				// indexed rather than race their delivery.
				for deadline := time.Now().Add(30 * time.Second); blockEvents(sys)[served] <= before[served]; {
					if time.Now().After(deadline) {
						t.Fatalf("no KV events from %s reached the index", served)
					}
					time.Sleep(2 * time.Millisecond)
				}
				if r > 0 {
					ttft = append(ttft, el.Seconds()*1000)
					full += int64(prefixLen+tail) * mocker.DefaultKVBytesPerToken
				}
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for _, d := range ds[min(2, len(ds)):] {
			moved += d.TransferBytes * boolInt(d.Choice == disagg.ChoiceRemote && d.Fallback == "")
		}
		return ttft, moved, full, ds
	}
	agg, _, _, _ := run(t, DisaggConfig{})
	auto, movedAuto, full, _ := run(t, DisaggConfig{PrefillWorkers: 1, DecodeWorkers: 2, Settings: disagg.Settings{Mode: "auto"}})
	always, movedAlways, _, dsAlways := run(t, DisaggConfig{PrefillWorkers: 1, DecodeWorkers: 2, Settings: disagg.Settings{Mode: "always"}})
	ma, mu, ml := bench.Median(agg), bench.Median(auto), bench.Median(always)
	t.Logf("TTFT median ms: kv-routed aggregated %.1f, disagg auto %.1f (%.2f×), disagg always %.1f (%.2f×)", ma, mu, mu/ma, ml, ml/ma)
	t.Logf("bytes moved after warm-up: auto %d (%.1f%% of full KV), always %d (%.1f%% of full KV %d)",
		movedAuto, 100*float64(movedAuto)/float64(full), movedAlways, 100*float64(movedAlways)/float64(full), full)
	for _, d := range dsAlways {
		if d.MeasuredTransferSecond > 0 {
			t.Logf("always: %d B moved in %.1f ms, estimated %.1f ms", d.TransferBytes, d.MeasuredTransferSecond*1000, d.EstTransferSeconds*1000)
		}
	}
	// The 1.5× target is judged on the logged figures (docs/benchmarks.md);
	// asserted, wall-clock medians of ten requests on a loaded 2-core
	// machine (or under the race detector) get a generous bound.
	if mu > 2.5*ma {
		t.Errorf("auto TTFT %.1f ms > 2.5 × aggregated %.1f ms", mu, ma)
	}
	// The run waits for each request's KV events (a late one would
	// re-route a request that then moves its whole prompt); the bound still
	// fails a run without prefix reuse, which moves everything
	// (docs/benchmarks.md, "Figures behind tests' bounds").
	if float64(movedAlways) > 0.35*float64(full) {
		t.Errorf("always moved %d B, more than 35%% of the full KV %d B", movedAlways, full)
	}
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
