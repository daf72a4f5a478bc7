package planner

import (
	"log/slog"
	"math"
	"testing"
	"time"
)

func TestPredictors(t *testing.T) {
	line := func(i int) float64 { return 10 + 2*float64(i) }
	tests := []struct {
		name   string
		pred   string
		series func(int) float64
		h      int
		want   float64
	}{
		{"constant on a constant", "constant", func(int) float64 { return 7 }, 3, 7},
		{"moving average on a constant", "moving-average", func(int) float64 { return 7 }, 1, 7},
		{"holt on a constant", "holt", func(int) float64 { return 7 }, 5, 7},
		{"constant lags a line", "constant", line, 1, line(19)},
		// The mean of the last 4 points of a line is its value 1.5 steps back.
		{"moving average lags a line", "moving-average", line, 1, line(19) - 3},
		// Holt is exact on a line: level + h·trend.
		{"holt follows a line", "holt", line, 3, line(22)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewPredictor(tc.pred, 4, 0.5, 0.3)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 20 {
				p.Observe(tc.series(i))
			}
			p.Observe(math.NaN()) // ignored
			if got := p.Predict(tc.h); math.Abs(got-tc.want) > 1e-6 {
				t.Fatalf("Predict(%d) = %v, want %v", tc.h, got, tc.want)
			}
		})
	}
	if _, err := NewPredictor("arima", 1, 1, 1); err == nil {
		t.Fatal("unknown predictor accepted")
	}
}

func TestProfileRoundTripAndBounds(t *testing.T) {
	p := testProfile()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := p.PrefillMs(1000, 0); got != 100 {
		t.Fatalf("PrefillMs(1000,0) = %v, want 100", got)
	}
	if got := p.PrefillMs(1500, 0.5); math.Abs(got-75.5) > 1e-9 {
		t.Fatalf("PrefillMs(1500,0.5) = %v, want 75.5 (bilinear)", got)
	}
	if !math.IsInf(p.ITLMs(1000, 1000), 1) {
		t.Fatal("ITL beyond the KV capacity should be +Inf")
	}
	bad := testProfile()
	bad.Prefill.ISL = []float64{2000, 1000}
	if bad.Validate() == nil {
		t.Fatal("decreasing axis accepted")
	}
}

// testProfile: prefill 0.1 ms per uncached token, decode 10 ms + 0.0001 ms
// per KV token in use, 100k tokens of KV.
func testProfile() *Profile {
	p := &Profile{Version: ProfileVersion, KVCapacityTokens: 100000, MaxNumSeqs: 256}
	p.Prefill.ISL = []float64{1000, 2000}
	p.Prefill.CachedFraction = []float64{0, 1}
	p.Prefill.TTFTMs = [][]float64{{100, 1}, {200, 1}}
	p.Decode.Concurrency = []float64{1, 10, 100}
	p.Decode.Context = []float64{100, 1000}
	for _, c := range p.Decode.Concurrency {
		row := []float64{}
		for _, x := range p.Decode.Context {
			row = append(row, 10+0.0001*c*x)
		}
		p.Decode.ITLMs = append(p.Decode.ITLMs, row)
	}
	return p
}

// TestDisaggDirection: a prefill-heavy phase grows prefill and not decode;
// a decode-heavy phase the reverse.
func TestDisaggDirection(t *testing.T) {
	for _, pol := range []string{"tandem", "dynamo"} {
		mk := func() *Planner {
			po, _ := NewPolicy(pol)
			p, err := New(Config{
				Pools:   []Pool{{Name: "prefill", Role: RolePrefill, Min: 1, Max: 100}, {Name: "decode", Role: RoleDecode, Min: 1, Max: 100}},
				Targets: Targets{TTFTMs: 500, ITLMs: 15, Quantile: 0.9}, Policy: po, Profile: testProfile(), Interval: 10 * time.Second,
			})
			if err != nil {
				t.Fatal(err)
			}
			return p
		}
		base := Load{Rate: 10, ISL: 1000, OSL: 50}
		cases := []struct {
			name       string
			load       Load
			grow, keep string
		}{
			{"prefill-heavy", Load{Rate: 10, ISL: 2000, OSL: 50}, "prefill", "decode"},
			{"decode-heavy", Load{Rate: 10, ISL: 1000, OSL: 400}, "decode", "prefill"},
		}
		for _, c := range cases {
			p := mk()
			cur := p.Initial(base)
			for range 3 {
				for _, d := range p.Step(Observation{Load: base, Replicas: cur}) {
					cur[d.Pool] = d.Desired
				}
			}
			before := map[string]int{"prefill": cur["prefill"], "decode": cur["decode"]}
			for range 3 {
				for _, d := range p.Step(Observation{Load: c.load, Replicas: cur}) {
					cur[d.Pool] = d.Desired
				}
			}
			if cur[c.grow] <= before[c.grow] || cur[c.keep] > before[c.keep] {
				t.Errorf("%s %s: %v → %v: want %s grown, %s not", pol, c.name, before, cur, c.grow, c.keep)
			}
		}
	}
}

// TestUnmeasuredLengthIsSkipped replays the live experiment's first
// intervals into a Holt planner: in the first, requests arrived and none
// finished, so its output length is unknown (NaN), not 0. Fed as 0, the
// next interval's 258 read as a ramp of +258 per interval, Holt forecast
// 516, and the live tandem arm bought 6 workers where 4 served the peak.
func TestUnmeasuredLengthIsSkipped(t *testing.T) {
	p, err := New(Config{Pools: []Pool{{Name: "agg", Role: RoleAggregated, Min: 1, Max: 32}}, Policy: Tandem{},
		Profile: testProfile(), Targets: Targets{TTFTMs: 500, ITLMs: 25, Quantile: 0.9}, Interval: 2 * time.Second,
		NewPredictor: func() Predictor { return &Holt{Alpha: 0.5, Beta: 0.3} }, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	nan := math.NaN()
	cur := map[string]int{"agg": 1}
	for i, l := range []Load{{Rate: 1, ISL: 1650, OSL: nan, HitFrac: nan}, {Rate: 3.5, ISL: 1963, OSL: 258, HitFrac: 0.37}} {
		l.Window = 2
		d := p.Step(Observation{Load: l, Replicas: cur})[0]
		switch {
		case i == 0 && (d.Predicted.OSL != 0 || d.Proposed < 1):
			// No output length yet: sized for the prompts with decode at
			// its least, not as idle (a pool at zero finishes nothing).
			t.Errorf("first interval: predicted OSL %v, proposed %d; want 0 and at least one worker", d.Predicted.OSL, d.Proposed)
		case i == 1 && d.Predicted.OSL != 258:
			t.Errorf("predicted OSL %v after one measured interval of 258, want 258", d.Predicted.OSL)
		}
		if math.IsNaN(d.Predicted.HitFrac) || math.IsNaN(d.PredITLMs) {
			t.Errorf("interval %d: NaN in the decision %+v", i, d)
		}
		cur["agg"] = d.Desired
	}
}
