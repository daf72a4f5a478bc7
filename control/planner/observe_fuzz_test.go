package planner

import (
	"math"
	"strings"
	"testing"
	"time"
)

// FuzzScrapeBody feeds arbitrary exposition text through the scraper's
// parser and the interval arithmetic: no panic, and an observation's
// numbers are finite and in range whenever two snapshots parse.
func FuzzScrapeBody(f *testing.F) {
	seed := `# TYPE tandem_frontend_input_sequence_tokens histogram
tandem_frontend_input_sequence_tokens_bucket{model="m",le="16"} 1
tandem_frontend_input_sequence_tokens_bucket{model="m",le="+Inf"} 3
tandem_frontend_input_sequence_tokens_sum{model="m"} 300
tandem_frontend_input_sequence_tokens_count{model="m"} 3
# TYPE tandem_frontend_time_to_first_token_seconds histogram
tandem_frontend_time_to_first_token_seconds_bucket{model="m",le="0.1"} 2
tandem_frontend_time_to_first_token_seconds_bucket{model="m",le="+Inf"} 3
tandem_frontend_time_to_first_token_seconds_sum{model="m"} 0.5
tandem_frontend_time_to_first_token_seconds_count{model="m"} 3
# TYPE tandem_frontend_queued_requests gauge
tandem_frontend_queued_requests{model="m"} 2
# TYPE tandem_router_worker_active_requests gauge
tandem_router_worker_active_requests{worker="w"} 1
`
	f.Add(seed, seed)
	f.Add("", seed)
	f.Add(seed, strings.ReplaceAll(seed, "} 3", "} 1"))
	f.Add("up 1\n", "# TYPE x histogram\nx_bucket{le=\"NaN\"} 1\n")
	f.Fuzz(func(t *testing.T, a, b string) {
		t0 := time.Unix(1000, 0)
		sa, err1 := parseMetrics(strings.NewReader(a), "m", t0)
		sb, err2 := parseMetrics(strings.NewReader(b), "m", t0.Add(10*time.Second))
		if err1 != nil || err2 != nil {
			return
		}
		s := &Scraper{prev: sa}
		// Observe's arithmetic without the network: the same steps.
		o := s.interval(sb, 0.9)
		for _, v := range []float64{o.Load.ISL, o.Load.OSL, o.Load.HitFrac, o.Load.ISLTail, o.TTFTMs, o.ITLMs} {
			if math.IsInf(v, 0) {
				t.Fatalf("infinite value in %+v", o)
			}
		}
		// NaN: no request in the interval reported its cached tokens.
		if o.Load.HitFrac < 0 || o.Load.HitFrac > 1 {
			t.Fatalf("hit fraction %v", o.Load.HitFrac)
		}
	})
}
