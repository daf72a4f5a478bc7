package bench

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestParseSweep(t *testing.T) {
	for _, tc := range []struct {
		in       string
		vals     []string
		saturate bool
		wantErr  bool
	}{
		{"concurrency=1,2,4", []string{"1", "2", "4"}, false, false},
		{"rate=saturate", []string{"1"}, true, false},
		{"rate=saturate:0.5", []string{"0.5"}, true, false},
		{"prefix-ratio=0,0.5,1", []string{"0", "0.5", "1"}, false, false},
		{"input=uniform:512,1536;zipf:1.2,64,2048;lognormal:1024,0.6", []string{"uniform:512,1536", "zipf:1.2,64,2048", "lognormal:1024,0.6"}, false, false},
		{"concurrency=0", nil, false, true},
		{"prefix-ratio=1.5", nil, false, true},
		{"rate=-1", nil, false, true},
		{"input=zipf:1", nil, false, true},
		{"workers=1,2", nil, false, true},
		{"concurrency", nil, false, true},
	} {
		sw, err := ParseSweep(tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("ParseSweep(%q): %v", tc.in, err)
			continue
		}
		if err == nil && (strings.Join(sw.Values, "|") != strings.Join(tc.vals, "|") || sw.Saturate != tc.saturate) {
			t.Errorf("ParseSweep(%q) = %+v", tc.in, sw)
		}
	}
}

// TestSweepConcurrencyWithMetrics sweeps concurrency against a fake server
// that serves /metrics, and checks each point's figures and the scraped
// cache counters beside the generated overlap.
func TestSweepConcurrencyWithMetrics(t *testing.T) {
	f := &fakeServer{TTFT: 5 * time.Millisecond, HitTTFT: time.Millisecond, TokenGap: time.Millisecond, CacheKey: 100, Worker: "w", Metrics: true}
	s := f.start(t)
	wl := &Synthetic{Endpoint: Chat, Input: FixedDist(100), Output: FixedDist(4), PrefixRatio: 0.5, IgnoreEOS: true, Seed: 1}
	sw, err := ParseSweep("concurrency=1,4")
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Targets: []Target{{URL: s.URL, Label: "fake"}}, Requests: 12, ScrapeEvery: 20 * time.Millisecond}
	runs, err := RunSweep(context.Background(), wl, o, sw)
	if err != nil {
		t.Fatal(err)
	}
	rep := NewReport("sweep", runs, DefaultHitCriteria())
	rep.ApplySLO(SLO{TTFTMs: 1000}, nil)
	if len(rep.Sweep) != 2 {
		t.Fatalf("%d sweep points, want 2", len(rep.Sweep))
	}
	for i, p := range rep.Sweep {
		if p.Target != "fake" || p.X != []float64{1, 4}[i] || p.Goodput.Met != 12 || p.ReqPerS <= 0 {
			t.Fatalf("point %d: %+v", i, p)
		}
		// 11 of 12 prompts share 50 of 100 tokens with an earlier one.
		if want := 0.458; p.Overlap != want {
			t.Fatalf("point %d: generated overlap %v, want %v", i, p.Overlap, want)
		}
	}
	// The fake caches on the first 100 characters, which the shared half
	// covers: all but the first prompt are hits, 90% cached.
	if p := rep.Sweep[0]; p.CachedShare < 0.8 {
		t.Fatalf("observed cached share %v", p.CachedShare)
	}
	for _, res := range runs {
		sm := res.Server[0]
		if sm == nil || sm.Scrapes < 2 || sm.Failed != 0 || sm.CacheQueryTokens != 1200 {
			t.Fatalf("run %d server metrics %+v", res.Run, sm)
		}
		if !strings.Contains(strings.Join(sm.Missing, ","), famXferBytes) {
			t.Fatalf("a server without transfer metrics must list them missing: %v", sm.Missing)
		}
	}
}

// TestSweepSaturates doubles the rate against a server that serves one
// request at a time until it falls behind.
func TestSweepSaturates(t *testing.T) {
	f := &fakeServer{TTFT: 20 * time.Millisecond, Serialize: true}
	s := f.start(t)
	wl := &Synthetic{Endpoint: Chat, Input: FixedDist(10), Output: FixedDist(1), Seed: 1}
	sw, _ := ParseSweep("rate=saturate:10")
	o := Options{Targets: []Target{{URL: s.URL}}, Duration: 800 * time.Millisecond, Timeout: 5 * time.Second}
	runs, err := RunSweep(context.Background(), wl, o, sw)
	if err != nil {
		t.Fatal(err)
	}
	// ~50 req/s capacity: 10, 20, 40 keep up; 80 (or at the latest 160)
	// does not.
	if len(runs) < 3 || len(runs) > 6 {
		t.Fatalf("%d points", len(runs))
	}
	last := runs[len(runs)-1]
	if last.Rate < 40 {
		t.Fatalf("stopped at %v req/s", last.Rate)
	}
}
