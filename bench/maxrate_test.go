package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// cannedServer answers every request with the same prebuilt 16-chunk SSE
// stream: the cheapest server possible, so a benchmark against it shows
// the load generator's own ceiling.
func cannedServer(b testing.TB) *httptest.Server {
	var sb strings.Builder
	sb.WriteString(`data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}` + "\n\n")
	for k := range 16 {
		fmt.Fprintf(&sb, `data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" w%d"},"finish_reason":null}]}`+"\n\n", k)
	}
	sb.WriteString(`data: {"choices":[],"usage":{"prompt_tokens":64,"completion_tokens":16,"total_tokens":80,"prompt_tokens_details":{"cached_tokens":0}}}` + "\n\ndata: [DONE]\n\n")
	body := sb.String()
	metrics := cannedMetrics()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			_, _ = io.WriteString(w, metrics)
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("X-Tandem-Worker", "canned")
		_, _ = io.WriteString(w, body)
	}))
	b.Cleanup(s.Close)
	return s
}

// cannedMetrics is a /metrics page of the size a two-worker Tandem serves
// (every family bench reads, plus ~300 histogram lines of the kind a
// frontend exports), so scraping costs what it would in a real run.
func cannedMetrics() string {
	var sb strings.Builder
	for _, f := range []string{famCacheQueries, famCacheHits, famPreemptions, famXferBytes, famXfers} {
		fmt.Fprintf(&sb, "# HELP %s x\n# TYPE %s counter\n", f, f)
		for w := range 2 {
			fmt.Fprintf(&sb, "%s{worker=\"worker-%d\"} %d\n", f, w, 1000*(w+1))
		}
	}
	for _, f := range []string{famWaiting, famRunning, famQueued} {
		fmt.Fprintf(&sb, "# HELP %s x\n# TYPE %s gauge\n%s 1\n", f, f, f)
	}
	fmt.Fprintf(&sb, "# HELP %s x\n# TYPE %s counter\n%s{op=\"removed\"} 5\n%s{op=\"stored\"} 9\n", famEvictions, famEvictions, famEvictions, famEvictions)
	fmt.Fprintf(&sb, "# HELP %s x\n# TYPE %s counter\n%s{choice=\"local\",reason=\"cached\"} 5\n%s{choice=\"remote\",reason=\"cheaper\"} 2\n", famDisagg, famDisagg, famDisagg, famDisagg)
	for h := range 10 {
		name := fmt.Sprintf("tandem_frontend_histogram_%d_seconds", h)
		fmt.Fprintf(&sb, "# HELP %s x\n# TYPE %s histogram\n", name, name)
		for b := range 28 {
			fmt.Fprintf(&sb, "%s_bucket{model=\"tandem-mock\",le=\"%g\"} %d\n", name, 0.001*float64(int(1)<<b), b*10)
		}
		fmt.Fprintf(&sb, "%s_bucket{model=\"tandem-mock\",le=\"+Inf\"} 300\n%s_sum{model=\"tandem-mock\"} 12.5\n%s_count{model=\"tandem-mock\"} 300\n", name, name, name)
	}
	return sb.String()
}

// highestScenarioRate is the fastest request rate a built-in scenario
// drives (docs/benchmarks/bench.md): the Mooncake synthetic trace at
// --speedup 20, 78 req/s. The tool's ceiling must stay 5× above it with
// every collection on.
const highestScenarioRate = 78

// maxRate runs a closed loop of 64-word, 16-token streamed chats against
// url, with all collection on (/metrics scraped every 100 ms, SLO judged,
// the report and its HTML built) when all is set, and returns req/s.
func maxRate(t testing.TB, url string, c, n int, all bool) float64 {
	wl := &Synthetic{Endpoint: Chat, Input: FixedDist(64), Output: FixedDist(16), IgnoreEOS: true, Seed: 1}
	o := Options{Targets: []Target{{URL: url, Model: "tandem-mock"}}, Concurrency: c, Requests: n, WorkerHeader: DefaultWorkerHeader}
	if all {
		o.ScrapeEvery = 100 * time.Millisecond
	}
	t0 := time.Now()
	res, err := Run(context.Background(), wl, o)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Records {
		if !r.OK() {
			t.Fatalf("error: %s", r.Error)
		}
	}
	if all {
		rep := NewReport("synthetic", []*Result{res}, DefaultHitCriteria())
		rep.ApplySLO(SLO{TTFTMs: 100, ITLMs: 10, E2EMs: 1000}, map[string]float64{"A": 1})
		if err := rep.WriteHTML(io.Discard); err != nil {
			t.Fatal(err)
		}
		if sm := res.Server[0]; sm == nil || sm.Scrapes < 2 || sm.Failed > 0 {
			t.Fatalf("scrapes: %+v", sm)
		}
	}
	// The whole time, report included: what a user waits for.
	return float64(len(res.Records)) / time.Since(t0).Seconds()
}

// TestMaxRateWithCollection holds the tool's ceiling, with every
// collection on, at 5× the fastest scenario's rate. The figure is far
// above (thousands of req/s); the bound is what must never regress.
func TestMaxRateWithCollection(t *testing.T) {
	url := cannedServer(t).URL
	n := 2000
	if raceEnabled {
		n = 300 // the figure means nothing under the detector; the code path is what it checks
	}
	rate := maxRate(t, url, 16, n, true)
	t.Logf("ceiling with all collection on: %.0f req/s (%.0f× the fastest scenario's %d req/s)", rate, rate/highestScenarioRate, highestScenarioRate)
	if raceEnabled {
		t.Log("race detector on: its slowdown is not the tool's, so the floor is not held")
		return
	}
	if rate < 5*highestScenarioRate {
		t.Fatalf("ceiling %.0f req/s is below 5 × %d req/s", rate, highestScenarioRate)
	}
}

// BenchmarkMaxRate measures the highest request rate the tool drives: a
// closed loop of streamed chat requests (64-word prompts, 16 output
// tokens) against the canned server and against a whole Tandem whose
// mocker workers are instant. The figure is what docs/benchmarks/bench.md
// quotes; the scenarios need tens of requests per second.
func BenchmarkMaxRate(b *testing.B) {
	targets := map[string]func(b *testing.B) string{
		"canned": func(b *testing.B) string { return cannedServer(b).URL },
		"tandem-instant": func(b *testing.B) string {
			url, stop, err := startTandem(context.Background(), tandemOpts{mode: "round-robin", workers: 2, instant: true})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(stop)
			return url
		},
	}
	// Collection on and off, interleaved in one run: their ratio is the
	// cost of scraping /metrics, judging SLOs and building the report.
	b.Run("canned-collection", func(b *testing.B) {
		url := cannedServer(b).URL
		var off, on []float64
		for range 3 {
			off = append(off, maxRate(b, url, 16, max(b.N, 2000), false))
			on = append(on, maxRate(b, url, 16, max(b.N, 2000), true))
		}
		b.ReportMetric(Median(off), "req/s-off")
		b.ReportMetric(Median(on), "req/s-all-on")
		b.ReportMetric(Median(on)/Median(off), "on/off")
		b.ReportMetric(Median(on)/highestScenarioRate, "x-fastest-scenario")
	})
	for _, name := range []string{"canned", "tandem-instant"} {
		for _, c := range []int{16, 64} {
			b.Run(fmt.Sprintf("%s/c%d", name, c), func(b *testing.B) {
				url := targets[name](b)
				wl := &Synthetic{Endpoint: Chat, Input: FixedDist(64), Output: FixedDist(16), IgnoreEOS: true, Seed: 1}
				o := Options{Targets: []Target{{URL: url, Model: "tandem-mock"}}, Concurrency: c, Requests: max(b.N, 200), WorkerHeader: DefaultWorkerHeader}
				b.ResetTimer()
				res, err := Run(context.Background(), wl, o)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				errs := 0
				for _, r := range res.Records {
					if !r.OK() {
						errs++
					}
				}
				if errs > 0 {
					b.Fatalf("%d errors: %s", errs, res.Records[0].Error)
				}
				b.ReportMetric(float64(len(res.Records))/res.Elapsed.Seconds(), "req/s")
			})
		}
	}
}
