package kvrouting

import (
	"strings"
	"testing"
	"time"

	"github.com/tandemllm/tandem/planes/kvevents"
	"github.com/tandemllm/tandem/router"
)

// TestSeedExperimentUpstream runs the seed experiment through
// engine/upstream against vLLM look-alike HTTP servers whose publishers
// behave as the engines in the field do, with the router's approximation
// disabled (--router-ttl 1ms): every hit is the events' doing. Each
// worker's events must have been applied (the /health proof).
func TestSeedExperimentUpstream(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: about 20 s")
	}
	modes := []struct {
		name string
		mode UpstreamMode
	}{
		{"vLLM map, publisher binds", UpstreamMode{Format: kvevents.FormatMap}},
		{"vLLM array, batches from 1, parent 0", UpstreamMode{Format: kvevents.FormatArray, FirstSeq: 1, ZeroParent: true}},
		{"publishers dial one bound socket", UpstreamMode{Format: kvevents.FormatMap, Dial: true, FirstSeq: 1}},
		{"SGLang, one server, a worker per attention-DP rank", UpstreamMode{SGLang: true}},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			mode := m.mode
			res, err := Run(t.Context(), Scenario{Mode: "kv", Cost: router.CostTTFT, Seed: 1, Upstream: &mode, ApproxTTL: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %v", m.name, res)
			if res.Hits != 60 || res.Rerequests != 60 {
				t.Errorf("%s: %v, want 60/60", m.name, res)
			}
			// ttft_model_drift is expected: the mockers run 20× faster
			// than the real-time prior the router starts from across HTTP.
			for _, d := range res.Diagnostics {
				if strings.HasPrefix(d.Code, "kv_") {
					t.Errorf("diagnostic %s on %s: %s", d.Code, d.Subject, d.Message)
				}
			}
			for id, st := range res.Events {
				if st.Applied == 0 || st.LastAge < 0 || res.Health[id] != "healthy" {
					t.Errorf("worker %s: %d events applied, last %v ago, state %s", id, st.Applied, st.LastAge, res.Health[id])
				}
			}
		})
	}
}

// TestSeedExperimentLlamaCpp: llama-server look-alikes publish no KV
// events; the router routes them by approximation and the engine asks for
// each prefix's slot again (id_slot). The bar is ≥ 57/60.
func TestSeedExperimentLlamaCpp(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	res, err := Run(t.Context(), Scenario{Mode: "kv-approx", Cost: router.CostTandem, Seed: 1,
		Upstream: &UpstreamMode{LlamaCpp: true, LlamaCppSlots: 8}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("llama.cpp, slot affinity: %v", res)
	if res.Hits < 57 || res.Rerequests != 60 {
		t.Errorf("%v, want ≥ 57/60", res)
	}
}
