package bench

import (
	"math"
	"testing"
)

func TestParseSLO(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    SLO
		wantErr bool
	}{
		{"", SLO{}, false},
		{"ttft=500ms,itl=50ms,e2e=10s", SLO{TTFTMs: 500, ITLMs: 50, E2EMs: 10000}, false},
		{"TTFT=250", SLO{TTFTMs: 250}, false},
		{"tpot=20ms", SLO{ITLMs: 20}, false},
		{"ttft=1.5s, e2el=2m", SLO{TTFTMs: 1500, E2EMs: 120000}, false},
		{"ttft=0", SLO{}, true},
		{"ttft=-5ms", SLO{}, true},
		{"ttft=25h", SLO{}, true},
		{"ttft=NaN", SLO{}, true},
		{"ttft=1s,ttft=2s", SLO{}, true},
		{"foo=1s", SLO{}, true},
		{"ttft", SLO{}, true},
	} {
		got, err := ParseSLO(tc.in)
		if (err != nil) != tc.wantErr || (!tc.wantErr && got != tc.want) {
			t.Errorf("ParseSLO(%q) = %+v, %v; want %+v, err %v", tc.in, got, err, tc.want, tc.wantErr)
		}
		if err == nil && !got.IsZero() {
			if back, err := ParseSLO(got.String()); err != nil || back != got {
				t.Errorf("round trip %q: %+v %v", got.String(), back, err)
			}
		}
	}
}

// TestGoodputArithmetic proves the SLO, goodput and cost figures on
// hand-made records whose answers are worked out by hand.
func TestGoodputArithmetic(t *testing.T) {
	slo := SLO{TTFTMs: 100, ITLMs: 20, E2EMs: 1000}
	recs := []Record{
		// meets everything: 100 tokens
		{Label: "A", TTFTMs: 80, ITLMs: []float64{10, 30}, E2EMs: 900, OutputTokens: 100},
		// TTFT exactly at the bound still meets it: 50 tokens
		{Label: "A", TTFTMs: 100, ITLMs: []float64{20}, E2EMs: 1000, OutputTokens: 50},
		// TTFT over
		{Label: "A", TTFTMs: 101, ITLMs: []float64{5}, E2EMs: 500, OutputTokens: 1000},
		// mean ITL 21 > 20, though every other bound holds
		{Label: "A", TTFTMs: 10, ITLMs: []float64{2, 40}, E2EMs: 500, OutputTokens: 1000},
		// E2E over
		{Label: "A", TTFTMs: 10, ITLMs: []float64{1}, E2EMs: 1001, OutputTokens: 1000},
		// an error never counts, however fast
		{Label: "A", TTFTMs: 1, E2EMs: 2, OutputTokens: 1000, Error: "boom", ErrorKind: ErrHTTP},
		// non-streamed: its TTFT is its E2E (90 ms): meets, 250 tokens
		{Label: "A", TTFTMs: -1, E2EMs: 90, OutputTokens: 250},
		// non-streamed with E2E 150 ms: its TTFT of 150 misses
		{Label: "A", TTFTMs: -1, E2EMs: 150, OutputTokens: 1000},
	}
	// 4 seconds, $3.60 an hour.
	g := goodputOf(recs, slo, 4, 3.6)
	if g.Met != 3 {
		t.Fatalf("met %d, want 3", g.Met)
	}
	// (100 + 50 + 250) tokens / 4 s = 100 tok/s; 3 / 4 = 0.75 req/s;
	// 3 of 8 sent = 0.375; 3.6 $/h / (100 tok/s × 3600 s/h) × 1e6 = $10/Mtok.
	if g.TokPerS != 100 || g.ReqPerS != 0.75 || g.Attainment != 0.375 || g.CostPerMTok != 10 {
		t.Fatalf("goodput %+v", g)
	}
	// No SLO: every success counts: 100+50+1000+1000+1000+250+1000 = 4400.
	all := goodputOf(recs, SLO{}, 4, 0)
	if all.Met != 7 || all.TokPerS != 1100 || all.CostPerMTok != 0 {
		t.Fatalf("no SLO: %+v", all)
	}
	// Nothing met: the cost is infinite, shown as -1.
	none := goodputOf(recs[2:6], SLO{TTFTMs: 0.5}, 4, 1)
	if none.Met != 0 || none.CostPerMTok != -1 {
		t.Fatalf("none met: %+v", none)
	}
	if c := costPerMTok(2, 1000); math.Abs(c-2/3.6) > 1e-12 {
		t.Fatalf("costPerMTok(2, 1000) = %v", c)
	}

	// Through a report: the summary carries the same figures.
	res := &Result{Scenario: "synthetic", Labels: []string{"A"}, URLs: []string{"u"}, Models: []string{"m"}, Elapsed: 4e9, Records: recs}
	rep := NewReport("synthetic", []*Result{res}, DefaultHitCriteria())
	rep.ApplySLO(slo, map[string]float64{"A": 3.6})
	if g2 := rep.Summaries[0].Goodput; g2 == nil || *g2 != g {
		t.Fatalf("report goodput %+v, want %+v", g2, g)
	}
}
