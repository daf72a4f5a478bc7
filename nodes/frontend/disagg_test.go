package frontend

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tandemllm/tandem/bench"
	"github.com/tandemllm/tandem/disagg"
	"github.com/tandemllm/tandem/engine/mocker"
)

type decisions struct {
	mu   sync.Mutex
	seen []disagg.Decision
}

func (d *decisions) add(x disagg.Decision) {
	d.mu.Lock()
	d.seen = append(d.seen, x)
	d.mu.Unlock()
}

func (d *decisions) last(t *testing.T) disagg.Decision {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.seen) == 0 {
		t.Fatal("no disagg decision recorded")
	}
	return d.seen[len(d.seen)-1]
}

func waitDiag(t *testing.T, h *harness, code, subject string, want bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for h.fe.Board.IsActive(code, subject) != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s on %s: active = %v, want %v (%v)", code, subject, !want, want, h.fe.Board.Active())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestDisaggAcrossWorkers: the frontend's orchestrator drives worker
// processes' parts over their request planes: it assesses the prompt on
// the decode and prefill workers, the prefill worker runs the leg and
// pushes the missing blocks to the decode worker's transfer node over TCP,
// and the decode worker then finds them cached.
func TestDisaggAcrossWorkers(t *testing.T) {
	var ds decisions
	h := newHarnessWith(t, "round-robin", func(c *Config) { c.Disagg.Mode = "always" }, Options{OnDecision: ds.add})
	h.startRole("d0", "decode", 100, nil)
	h.waitMembers("d0")
	waitDiag(t, h, DiagNoPrefill, "fleet", true)
	p0 := h.startRole("p0", "prefill", 100, nil)
	h.waitMembers("d0", "p0")
	waitDiag(t, h, DiagNoPrefill, "fleet", false)
	if got := h.fe.Disagg.PrefillWorkers(); len(got) != 1 || got[0] != "p0" {
		t.Fatalf("orchestrator's prefill workers %v, want [p0]", got)
	}
	if got := prefillOnHealth(t, h); got != "p0:tandem" {
		t.Fatalf("/health prefill workers %q", got)
	}
	// Let the background probe of the new pair's link finish, so the first
	// request is priced on a measured link.
	pctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.fe.Disagg.Probed(pctx); err != nil {
		t.Fatal(err)
	}

	prompt := strings.Repeat("A robot walked through the quiet city at night, counting the lights. ", 40)
	id, body, code := h.complete(prompt, 4)
	if code != 200 || id != "d0" || !strings.HasSuffix(body, "data: [DONE]\n\n") {
		t.Fatalf("status %d from %q: %s", code, id, tail(body))
	}
	d := ds.last(t)
	if d.Choice != disagg.ChoiceRemote || d.PrefillWorker != "p0" || d.Fallback != "" || d.TransferBytes == 0 {
		t.Fatalf("not served disaggregated: %+v", d)
	}
	if d.MissingBlocks != (d.PromptTokens-1)/16 {
		t.Fatalf("moved %d blocks of a fresh %d-token prompt", d.MissingBlocks, d.PromptTokens)
	}

	// The blocks landed in the decode worker's cache: the same prompt
	// again has nothing to move.
	if _, _, code := h.complete(prompt, 2); code != 200 {
		t.Fatalf("status %d", code)
	}
	if d := ds.last(t); d.Choice != disagg.ChoiceLocal || d.Reason != disagg.ReasonNothingToMove || d.LocalUncached > 16 {
		t.Fatalf("repeat: %+v", d)
	}

	// The prefill worker leaves: requests are prefilled locally, and the
	// degraded state is on /health.
	if err := p0.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.waitMembers("d0")
	waitDiag(t, h, DiagNoPrefill, "fleet", true)
	if _, _, code := h.complete("a new prompt "+prompt, 2); code != 200 {
		t.Fatalf("status %d", code)
	}
	if d := ds.last(t); d.Choice != disagg.ChoiceLocal || d.Reason != disagg.ReasonNoPrefill {
		t.Fatalf("without a prefill worker: %+v", d)
	}
}

// TestDisaggPrefillUnreachable: a prefill worker whose record outlives it
// is passed over by the decider, and the request is prefilled locally.
func TestDisaggPrefillUnreachable(t *testing.T) {
	var ds decisions
	h := newHarnessWith(t, "round-robin", func(c *Config) { c.Disagg.Mode = "always" }, Options{OnDecision: ds.add})
	h.startRole("d0", "decode", 100, nil)
	p0 := h.startRole("p0", "prefill", 100, nil)
	h.waitMembers("d0", "p0")
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ghost := p0.Record()
	ghost.ID, ghost.RequestPlane = "p1", dead.Addr().String()
	_ = dead.Close()
	h.fe.admit(ghost)
	if err := p0.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.waitMembers("d0", "p1")
	prompt := strings.Repeat("The lighthouse keeper wrote a letter to the sea. ", 30)
	if id, body, code := h.complete(prompt, 3); code != 200 || id != "d0" {
		t.Fatalf("status %d from %q: %s", code, id, tail(body))
	}
	if d := ds.last(t); d.Choice != disagg.ChoiceLocal || d.Reason != disagg.ReasonNoPrefill {
		t.Fatalf("decision with only a dead prefill worker: %+v", d)
	}
}

// seedWorker shapes a mocker like the seed's Qwen3-0.6B worker: real
// bytes of its KV size move, with its prefill timing.
func seedWorker(c *mocker.Config) {
	c.Timing = mocker.Qwen3_0_6BTiming()
	c.Speedup = 1
	c.KVCapacityTokens = mocker.SeedKVCapacityTokens
}

// completeIDs sends token-id prompt p with max_tokens 1 and returns the
// latency (≈ TTFT) and the cached tokens the worker reported.
func completeIDs(t *testing.T, url string, p []int32) (time.Duration, int) {
	t.Helper()
	el, cached, _ := completeIDsOn(t, url, p)
	return el, cached
}

// completeIDsOn is completeIDs that also returns the worker that served.
func completeIDsOn(t *testing.T, url string, p []int32) (time.Duration, int, string) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"model": "tandem-mock", "prompt": p, "max_tokens": 1, "ignore_eos": true})
	start := time.Now()
	resp, err := http.Post(url+"/v1/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	el := time.Since(start)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	var c struct {
		Usage struct {
			Details struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(body, &c); err != nil {
		t.Fatal(err)
	}
	return el, c.Usage.Details.CachedTokens, resp.Header.Get("X-Tandem-Worker")
}

// TestDisaggFleetSeedCase is the seed's same-host 2-prefix case (85.7 %
// of every prompt cached) across request planes: frontend and workers talk
// gRPC and the KV moves over TCP between the workers' transfer nodes,
// exactly as between processes. Dynamo measured disaggregation much slower
// than KV-routed aggregation here (docs/benchmarks.md).
func TestDisaggFleetSeedCase(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("moves ~2 GB of KV; its TTFT figures mean nothing under the race detector")
	}
	const prefixLen, tailLen, rounds = 1536, 256, 6
	ids := func(n, salt int) []int32 {
		p := make([]int32, n)
		for i := range p {
			p[i] = int32(1000 + (i*31+salt*7919)%50000)
		}
		return p
	}
	run := func(t *testing.T, mode string, roles ...string) (ttft []float64, moved, full int64) {
		var ds decisions
		h := newHarnessWith(t, "kv", func(c *Config) { c.Disagg.Mode = mode }, Options{OnDecision: ds.add})
		var names []string
		for i, r := range roles {
			id := fmt.Sprintf("%s-%d", r, i)
			names = append(names, id)
			h.startRole(id, r, 1, seedWorker)
		}
		slices.Sort(names)
		h.waitMembers(names...)
		for r := range rounds {
			for k := range 2 {
				before := map[string]float64{}
				for _, id := range names {
					before[id] = blockEvents(t, h, id)
				}
				el, _, served := completeIDsOn(t, h.fe.URL(), append(ids(prefixLen, k), ids(tailLen, 100+r*2+k)...))
				// The next request is routed by the blocks this one
				// stored (its tail is new, so it stores some): wait for
				// their events to reach the index, as a request arriving
				// later would find them, rather than race their delivery.
				for deadline := time.Now().Add(30 * time.Second); blockEvents(t, h, served) <= before[served]; {
					if time.Now().After(deadline) {
						t.Fatalf("no KV events from %s reached the index", served)
					}
					time.Sleep(2 * time.Millisecond)
				}
				if r > 0 {
					ttft = append(ttft, el.Seconds()*1000)
					full += int64(prefixLen+tailLen) * mocker.DefaultKVBytesPerToken
				}
			}
		}
		ds.mu.Lock()
		defer ds.mu.Unlock()
		for _, d := range ds.seen[min(2, len(ds.seen)):] {
			if d.Choice == disagg.ChoiceRemote && d.Fallback == "" {
				moved += d.TransferBytes
			}
		}
		return ttft, moved, full
	}
	agg, _, _ := run(t, "never", "aggregated", "aggregated")
	auto, movedAuto, full := run(t, "auto", "prefill", "decode", "decode")
	always, movedAlways, _ := run(t, "always", "prefill", "decode", "decode")
	ma, mu, ml := bench.Median(agg), bench.Median(auto), bench.Median(always)
	t.Logf("TTFT median ms: kv-routed aggregated %.1f, disagg auto %.1f (%.2f×), disagg always %.1f (%.2f×)", ma, mu, mu/ma, ml, ml/ma)
	t.Logf("KV moved after warm-up: auto %d B (%.1f%%), always %d B (%.1f%% of %d B)",
		movedAuto, 100*float64(movedAuto)/float64(full), movedAlways, 100*float64(movedAlways)/float64(full), full)
	// The 1.5× target is judged on the logged figures (docs/benchmarks.md);
	// asserted, wall-clock medians of ten requests on a loaded 2-core
	// machine get a generous bound that still fails a regression to
	// always-remote behaviour many times over.
	if mu > 2.5*ma {
		t.Errorf("auto TTFT %.1f ms > 2.5 × aggregated %.1f ms", mu, ma)
	}
	// The router reads the decode workers' caches from their KV events,
	// which arrive asynchronously; the run waits for each request's events
	// (a late event once re-routed a request in CI, which then moved its
	// whole prompt). The bound still fails a run without prefix reuse,
	// which moves everything, and leaves room for one re-routed request
	// should an event batch land in parts (docs/benchmarks.md, "Figures
	// behind tests' bounds").
	if movedAlways == 0 || float64(movedAlways) > 0.35*float64(full) {
		t.Errorf("always moved %d B: want some, and at most 35%% of the full KV %d B", movedAlways, full)
	}
}

// prefillOnHealth renders /health's prefill workers as "id:protocol,...".
func prefillOnHealth(t *testing.T, h *harness) string {
	t.Helper()
	resp, err := http.Get(h.fe.URL() + "/health")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rep struct {
		Prefill []struct {
			ID       string `json:"id"`
			Protocol string `json:"kv_protocol"`
		} `json:"prefill_workers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range rep.Prefill {
		out = append(out, p.ID+":"+p.Protocol)
	}
	return strings.Join(out, ",")
}
