package bench

import (
	"context"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeResources counts a started fake's workers like the CLI counts a
// `tandem serve`'s.
func fakeResources(serve map[string]string) (map[string]float64, error) {
	w := 2.0
	if serve["workers"] == "3" {
		w = 3
	}
	return map[string]float64{"workers": w}, nil
}

func TestExperimentPlanRefusals(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, err string
	}{
		{"two variables", "variable: [disagg, router-mode]\nvalues: [a, b]\n", "changes one"},
		{"variant changes a second flag", "variable: disagg\nvariants:\n- value: never\n- value: auto\n  serve: {router-mode: kv}\n", "as well as disagg"},
		{"a variant repeating its own value is fine", "variable: disagg\nvariants:\n- value: never\n- value: auto\n  serve: {disagg: auto}\n", ""},
		{"equal resources pass", "variable: router-mode\nbase: {serve: {workers: '2'}}\nvariants:\n- value: kv\n- name: rr\n  value: round-robin\n", ""},
		{"one variant", "variable: disagg\nvalues: [auto]\n", "two or more"},
		{"unknown key", "variable: disagg\nvalues: [a, b]\ntrails: 3\n", "trails"},
		{"url without resources", "variable: engine\nvariants:\n- {name: a, url: 'http://127.0.0.1:1'}\n- {name: b, url: 'http://127.0.0.1:2'}\n", "resources"},
		{"urls with unequal resources", "variable: engine\nvariants:\n- {name: a, url: 'http://127.0.0.1:1', resources: {gpus: 2}}\n- {name: b, url: 'http://127.0.0.1:2', resources: {gpus: 4}}\n", "equal resources"},
		{"no variable", "values: [a, b]\n", "one thing"},
		{"urls described as differing twice", "variable: engine\nbase: {resources: {gpus: 1}}\nvariants:\n- {name: a, value: vllm, url: 'http://h:1', config: {model: m1}}\n- {name: b, value: sglang, url: 'http://h:2', config: {model: m2}}\n", "differ in model as well as engine"},
		{"urls described as differing once", "variable: engine\nbase: {resources: {gpus: 1}, config: {model: m}}\nvariants:\n- {name: a, value: vllm, url: 'http://h:1'}\n- {name: b, value: sglang, url: 'http://h:2'}\n", ""},
		{"duplicate names", "variable: x\nvariants:\n- {name: a, value: '1'}\n- {name: a, value: '2'}\n", "two variants"},
	} {
		spec, err := ParseExperiment(strings.NewReader(tc.yaml))
		if err == nil {
			_, err = spec.Plan(fakeResources, []string{"workers"})
		}
		if tc.err == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.err)
		}
	}
	// A variable that changes resources without being declared one of
	// the resource flags is refused.
	spec, _ := ParseExperiment(strings.NewReader("variable: workers\nvalues: ['2', '3']\n"))
	if _, err := spec.Plan(fakeResources, nil); err == nil || !strings.Contains(err.Error(), "equal resources") {
		t.Fatalf("unequal resources: %v", err)
	}
	// Resources may differ when they are the variable.
	spec, _ = ParseExperiment(strings.NewReader("variable: workers\nvalues: ['2', '3']\ncost_per_worker_hour: 2\n"))
	plans, err := spec.Plan(fakeResources, []string{"workers"})
	if err != nil || plans[1].Resources["workers"] != 3 || plans[1].CostPerHour != 6 || plans[0].Serve["workers"] != "2" {
		t.Fatalf("resources as the variable: %+v, %v", plans, err)
	}
}

// TestExperimentEndToEnd runs a whole experiment: two started variants of
// different speeds, three interleaved trials, intervals and the verdict,
// saved, loaded and compared.
func TestExperimentEndToEnd(t *testing.T) {
	var mu sync.Mutex
	var order []string
	start := func(_ context.Context, serve map[string]string) (string, func(), error) {
		mu.Lock()
		order = append(order, serve["speed"])
		mu.Unlock()
		gap := 10 * time.Millisecond
		if serve["speed"] == "fast" {
			gap = time.Millisecond
		}
		f := &fakeServer{TTFT: 2 * time.Millisecond, TokenGap: gap, Metrics: true}
		s := f.start(t)
		return s.URL, s.Close, nil
	}
	spec, err := ParseExperiment(strings.NewReader(`
name: speed
variable: speed
values: [slow, fast]
workload: {input: 20, output: 8, concurrency: 2, requests: 8}
slo: ttft=1s
trials: 3
cost_per_worker_hour: 1
`))
	if err != nil {
		t.Fatal(err)
	}
	plans, err := spec.Plan(fakeResources, nil)
	if err != nil {
		t.Fatal(err)
	}
	wl, o, err := spec.Workload.Build(1)
	if err != nil {
		t.Fatal(err)
	}
	o.ScrapeEvery = 50 * time.Millisecond
	runs := RunExperiment(context.Background(), wl, o, plans, spec.Trials, start)
	if len(runs) != 6 {
		t.Fatalf("%d runs", len(runs))
	}
	if got := strings.Join(order, ","); got != "slow,fast,fast,slow,slow,fast" {
		t.Fatalf("trial order %s, want rotated", got)
	}
	slo, _ := ParseSLO(spec.SLO)
	x := Analyze(spec.Name, "speed", plans, runs, slo)
	g := x.Variants[1].Figures["goodput_tok_per_s"]
	if g.N != 3 || !g.Defined() || x.Variants[0].Figures["goodput_tok_per_s"].Mean >= g.Mean {
		t.Fatalf("figures %+v", x.Variants)
	}
	if _, ok := x.Variants[0].Figures["server_cache_hit_rate"]; !ok {
		t.Fatal("scraped cache hit rate missing")
	}
	// The fast variant's goodput is several times the slow one's; with
	// three trials on a loaded machine (the race detector, other tests)
	// the interval may still reach 1, so the verdict may be inconclusive,
	// never "does not pay" (TestBreakEven covers the rule itself).
	v := x.Verdicts[0]
	if v.CostRatio != 1 || v.GoodputRatio.N != 3 || v.GoodputRatio.Mean < 1.5 || (v.Outcome != "pays" && v.Outcome != "inconclusive") {
		t.Fatalf("verdict %+v", v)
	}
	rep := NewReport("experiment", runs, DefaultHitCriteria())
	rep.ApplySLO(slo, nil)
	rep.Experiment = x
	var sb strings.Builder
	if err := rep.WriteText(&sb); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(sb.String(), "break-even") || !strings.Contains(sb.String(), "±") {
		t.Fatalf("text report:\n%s", sb.String())
	}
	// Saved and loaded, the two variants compare the same way.
	dir := t.TempDir()
	for i, p := range plans {
		one := &Report{}
		for _, res := range runs {
			if res.Labels[0] == p.Name {
				one.Runs = append(one.Runs, res)
			}
		}
		*one = *NewReport("experiment", one.Runs, DefaultHitCriteria())
		if err := one.WriteDir(filepath.Join(dir, string(rune('a'+i)))); err != nil {
			t.Fatal(err)
		}
	}
	a, err := LoadReport(filepath.Join(dir, "a"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := LoadReport(filepath.Join(dir, "b"))
	if err != nil {
		t.Fatal(err)
	}
	cx, err := CompareReports(a, b, slo, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	// The saved trials compare as they ran: the same paired ratios.
	if cx.Verdicts[0].GoodputRatio.N != 3 || math.Abs(cx.Verdicts[0].GoodputRatio.Mean-v.GoodputRatio.Mean) > 0.01*v.GoodputRatio.Mean {
		t.Fatalf("compare verdict %+v", cx.Verdicts[0])
	}
}

func TestBreakEven(t *testing.T) {
	for _, tc := range []struct {
		ratios []float64
		cost   float64
		want   string
	}{
		{[]float64{1.30, 1.32, 1.31}, 1.25, "pays"},
		{[]float64{1.10, 1.12, 1.11}, 1.25, "does not pay"},
		{[]float64{1.0, 1.5, 1.2}, 1.25, "inconclusive"},
		{[]float64{2}, 1, "inconclusive"},
		{nil, 1, "inconclusive"},
	} {
		if got, why := breakEven(MeanCI(tc.ratios), tc.cost); got != tc.want {
			t.Errorf("%v vs %v: %s (%s), want %s", tc.ratios, tc.cost, got, why, tc.want)
		}
	}
}
