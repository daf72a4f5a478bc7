//go:build linux

package serve

import (
	"math"
	"sync"
	"testing"
	"time"

	"github.com/tandemllm/tandem/bench"
	"github.com/tandemllm/tandem/disagg"
	"github.com/tandemllm/tandem/engine/mocker"
)

// TestDisaggSlowLink is the slow-link proof: the prefill worker's KV
// transfer sockets live in one network namespace, the decode worker's in
// another, joined by a veth pair shaped to 1 Gbit/s each way with tc.
// Each round sends a fresh 1,500-token prompt, then a follow-up that
// extends it (its prefix cached on the decode worker). auto must stay
// within 1.1× of KV-routed aggregated serving while always pays for
// moving the full KV over the link; the decider's transfer-time estimate
// must be within 25 % of the measured time. Figures are logged for
// docs/benchmarks/disagg.md.
func TestDisaggSlowLink(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's slowdown makes the CPU, not the 1 Gbit/s link, the bottleneck")
	}
	requireNetns(t)
	link := newNetnsPair(t, "tbf", "rate", "1gbit", "burst", "256kb", "latency", "50ms")
	const promptLen, followLen, rounds = 1500, 200, 5
	fresh := func(r int) []int32 { return ids(promptLen, 500+r) }
	follow := func(r int) []int32 { return append(fresh(r), ids(followLen, 900+r)...) }

	type result struct {
		fresh, follow []float64 // TTFT, ms
		ds            []disagg.Decision
	}
	run := func(dc DisaggConfig) (res result) {
		cfg := DefaultConfig()
		cfg.RouterMode = "kv"
		var mu sync.Mutex
		dc.OnDecision = func(d disagg.Decision) { mu.Lock(); res.ds = append(res.ds, d); mu.Unlock() }
		if dc.Enabled() {
			dc.ListenHost = link.AddrB
			dc.Transfer.Listen = listenIn(link.B)
			dc.Transfer.Dial = dialIn(link.A)
		}
		cfg.Disagg = dc
		sys := startTest(t, cfg, seedEngines)
		for r := range rounds {
			el, cached := complete(t, sys.URL(), fresh(r))
			res.fresh = append(res.fresh, el.Seconds()*1000)
			if cached != 0 && dc.Mode != "always" {
				t.Fatalf("%q round %d: fresh prompt had %d cached tokens", dc.Mode, r, cached)
			}
			// Let the KV events of the fresh prompt reach the router, as
			// between two users' requests.
			time.Sleep(50 * time.Millisecond)
			el, cached = complete(t, sys.URL(), follow(r))
			res.follow = append(res.follow, el.Seconds()*1000)
			if cached < promptLen-16 {
				t.Fatalf("%q round %d: follow-up had only %d cached tokens", dc.Mode, r, cached)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		return res
	}
	agg := run(DisaggConfig{})
	auto := run(DisaggConfig{PrefillWorkers: 1, DecodeWorkers: 1, Settings: disagg.Settings{Mode: "auto"}})
	always := run(DisaggConfig{PrefillWorkers: 1, DecodeWorkers: 1, Settings: disagg.Settings{Mode: "always"}})

	af, uf, lf := bench.Median(agg.fresh), bench.Median(auto.fresh), bench.Median(always.fresh)
	ap, up, lp := bench.Median(agg.follow), bench.Median(auto.follow), bench.Median(always.follow)
	t.Logf("fresh %d-token prompt, TTFT median ms: aggregated %.1f, auto %.1f (%.2f×), always %.1f (%.1f×)",
		promptLen, af, uf, uf/af, lf, lf/af)
	t.Logf("follow-up (+%d tokens, prefix cached), TTFT median ms: aggregated %.1f, auto %.1f (%.2f×), always %.1f (%.1f×)",
		followLen, ap, up, up/ap, lp, lp/ap)
	for _, d := range auto.ds {
		if d.Choice != disagg.ChoiceLocal {
			t.Errorf("auto chose %s (%s) for a %d-token prompt: est. transfer %.0f ms at %.1f MB/s",
				d.Choice, d.Reason, d.PromptTokens, d.EstTransferSeconds*1000, d.LinkBytesPerSec/1e6)
		}
	}
	if uf > 1.1*af {
		t.Errorf("auto TTFT %.1f ms > 1.1 × aggregated %.1f ms (fresh prompts)", uf, af)
	}
	// Follow-ups are ≈15 ms cache hits: allow 1 ms of timer noise.
	if up > 1.1*ap+1 {
		t.Errorf("auto TTFT %.1f ms > 1.1 × aggregated %.1f ms + 1 ms (follow-ups)", up, ap)
	}
	var ratios []float64
	for _, d := range always.ds {
		if d.Choice != disagg.ChoiceRemote || d.Fallback != "" || d.MeasuredTransferSecond == 0 {
			t.Errorf("always: decision %+v did not transfer", d)
			continue
		}
		t.Logf("always: %d tokens, %.1f MB moved in %.1f ms (%.1f MB/s), estimated %.1f ms at %.1f MB/s (measured/est %.2f)",
			d.PromptTokens, float64(d.TransferBytes)/1e6, d.MeasuredTransferSecond*1000,
			float64(d.TransferBytes)/d.MeasuredTransferSecond/1e6, d.EstTransferSeconds*1000, d.LinkBytesPerSec/1e6,
			d.MeasuredTransferSecond/d.EstTransferSeconds)
		if d.TransferBytes >= int64(promptLen/2)*mocker.DefaultKVBytesPerToken {
			ratios = append(ratios, d.MeasuredTransferSecond/d.EstTransferSeconds)
		}
	}
	if len(ratios) != rounds {
		t.Fatalf("always: %d full-prompt transfers, want %d", len(ratios), rounds)
	}
	for i, r := range ratios {
		if math.Abs(r-1) > 0.25 {
			t.Errorf("always: full-prompt transfer %d took %.2f× its estimate (want within 25%%)", i, r)
		}
	}
}
