package bench

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

// The parsers of user input: each must return a value or an error, never
// panic, and whatever it accepts must be in range.

func FuzzParseSLO(f *testing.F) {
	for _, s := range []string{"ttft=500ms,itl=50ms,e2e=10s", "ttft=1", "itl=", "e2e=1e400", "ttft=1s,ttft=2s", ",", "tpot=0.5ms"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		slo, err := ParseSLO(s)
		if err != nil {
			return
		}
		for _, v := range []float64{slo.TTFTMs, slo.ITLMs, slo.E2EMs} {
			if v < 0 || v > maxSLOMs || math.IsNaN(v) {
				t.Fatalf("%q accepted with bound %v", s, v)
			}
		}
	})
}

func FuzzParseSweep(f *testing.F) {
	for _, s := range []string{"concurrency=1,2,4", "rate=saturate:0.5", "prefix-ratio=0,1", "input=zipf:1.2,1,9;uniform:1,2", "rate=1e308"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sw, err := ParseSweep(s)
		if err != nil {
			return
		}
		if len(sw.Values) == 0 || len(sw.Values) > 64 {
			t.Fatalf("%q accepted with %d values", s, len(sw.Values))
		}
		for _, v := range sw.Values {
			if x := sw.x(v); math.IsNaN(x) || math.IsInf(x, 0) {
				t.Fatalf("%q: value %q at %v", s, v, x)
			}
		}
	})
}

func FuzzParseDist(f *testing.F) {
	for _, s := range []string{"512", "zipf:1.2,64,4096", "lognormal:1000,0.6", "uniform:1,1", "zipf:10,1,10000000"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDist(s)
		if err != nil {
			return
		}
		if d.Kind == Zipf && d.C-d.B > 1e5 {
			return // a valid law, too long to take the mean of in a fuzz loop
		}
		r := newRNG(1)
		for range 20 {
			if v := d.sample(r); v < 1 {
				t.Fatalf("%q sampled %d", s, v)
			}
		}
	})
}

func FuzzLoadDataset(f *testing.F) {
	f.Add(`{"prompt":"hello","max_tokens":4}` + "\n" + `{"messages":[{"role":"user","content":"hi"}]}`)
	f.Add(`{"prompt":"x","messages":[]}`)
	f.Add(`{"max_tokens":-1,"prompt":"a"}`)
	f.Fuzz(func(t *testing.T, s string) {
		items, err := LoadDataset(strings.NewReader(s))
		if err != nil {
			return
		}
		for _, it := range items {
			if (it.Prompt == "") == (len(it.Messages) == 0) || it.MaxTokens < 0 || it.MaxTokens > maxDatasetOut {
				t.Fatalf("accepted %+v", it)
			}
		}
	})
}

func FuzzParseExperiment(f *testing.F) {
	f.Add("variable: disagg\nvalues: [never, auto]\ntrials: 2\n")
	f.Add("variable: [a, b]\n")
	f.Add("variable: x\nvariants:\n- {name: a, url: 'http://h', resources: {gpus: 1}}\n- {name: b, url: 'http://i', resources: {gpus: 1}}\n")
	f.Add("trials: -5\nvariable: {a: 1}\n")
	f.Fuzz(func(t *testing.T, s string) {
		spec, err := ParseExperiment(strings.NewReader(s))
		if err != nil {
			return
		}
		plans, err := spec.Plan(fakeResources, []string{"workers"})
		if err != nil {
			return
		}
		if len(plans) < 2 || spec.Trials < 1 || spec.Trials > 100 {
			t.Fatalf("accepted %d plans, %d trials", len(plans), spec.Trials)
		}
		if _, _, err := spec.Workload.Build(1); err != nil {
			return
		}
	})
}

func FuzzParseMetrics(f *testing.F) {
	f.Add(cannedMetrics())
	f.Add("vllm:prefix_cache_hits_total NaN\n")
	f.Add("# TYPE tandem_disagg_decisions_total counter\ntandem_disagg_decisions_total{choice=\"remote\"} 3\n")
	f.Fuzz(func(t *testing.T, s string) {
		snap, err := parseMetrics(bytes.NewReader([]byte(s)))
		if err != nil {
			return
		}
		for n, v := range snap.counters {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("%s = %v", n, v)
			}
		}
	})
}
