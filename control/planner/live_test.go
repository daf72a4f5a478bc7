package planner

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tandemllm/tandem/health"
)

// fakeFrontend exports the frontend's metric families (the names and
// buckets of package httpapi) over a real /metrics, so the scraper reads
// what a `tandem frontend` serves.
type fakeFrontend struct {
	reg                         *prometheus.Registry
	ttft, itl, isl, osl, cached *prometheus.HistogramVec
	queued                      *prometheus.GaugeVec
	active                      *prometheus.GaugeVec
	srv                         *httptest.Server
}

func newFakeFrontend(t *testing.T) *fakeFrontend {
	latency := []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	tokens := prometheus.ExponentialBuckets(16, 2, 14)
	h := func(name string, b []float64) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Buckets: b}, []string{"model"})
	}
	f := &fakeFrontend{reg: prometheus.NewRegistry(),
		ttft: h("tandem_frontend_time_to_first_token_seconds", latency), itl: h("tandem_frontend_inter_token_latency_seconds", latency),
		isl: h("tandem_frontend_input_sequence_tokens", tokens), osl: h("tandem_frontend_output_sequence_tokens", tokens),
		cached: h("tandem_frontend_cached_tokens", tokens),
		queued: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tandem_frontend_queued_requests"}, []string{"model"}),
		active: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tandem_router_worker_active_requests"}, []string{"worker"}),
	}
	f.reg.MustRegister(f.ttft, f.itl, f.isl, f.osl, f.cached, f.queued, f.active)
	for _, v := range []*prometheus.HistogramVec{f.ttft, f.itl, f.isl, f.osl, f.cached} {
		v.WithLabelValues("m") // the frontend creates a model's series when it registers the model
	}
	f.srv = httptest.NewServer(promhttp.HandlerFor(f.reg, promhttp.HandlerOpts{}))
	t.Cleanup(f.srv.Close)
	return f
}

// serve records n requests of the given shape.
func (f *fakeFrontend) serve(n int, isl, osl float64, ttft, itl float64) {
	for range n {
		f.isl.WithLabelValues("m").Observe(isl)
		f.osl.WithLabelValues("m").Observe(osl)
		f.cached.WithLabelValues("m").Observe(0)
		f.ttft.WithLabelValues("m").Observe(ttft)
		f.itl.WithLabelValues("m").Observe(itl)
	}
}

func testPlanner(t *testing.T, board *health.Board, reg prometheus.Registerer) *Planner {
	t.Helper()
	prof := testProfile()
	p, err := New(Config{Pools: []Pool{{Name: "agg", Role: RoleAggregated, Min: 1, Max: 16}}, Policy: Tandem{}, Profile: prof,
		Targets: Targets{TTFTMs: 500, ITLMs: 25, Quantile: 0.9}, Interval: time.Second, Board: board, Registerer: reg,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestScraperReadsFrontendMetrics: the rate, lengths, queue depth and
// per-worker load come out of a real exposition.
func TestScraperReadsFrontendMetrics(t *testing.T) {
	f := newFakeFrontend(t)
	sc := &Scraper{URL: f.srv.URL}
	if _, err := sc.Observe(context.Background(), 0.9); err != nil {
		t.Fatal(err)
	}
	f.serve(50, 1000, 200, 0.2, 0.01)
	f.queued.WithLabelValues("m").Set(7)
	f.active.WithLabelValues("worker-0").Set(3)
	o, err := sc.Observe(context.Background(), 0.9)
	if err != nil {
		t.Fatal(err)
	}
	if !(o.Load.Rate > 0) || o.Load.ISL != 1000 || o.Load.OSL != 200 || o.QueueDepth != 7 || o.WorkerActive["worker-0"] != 3 {
		t.Fatalf("observation %+v", o)
	}
	if o.TTFTMs < 100 || o.TTFTMs > 250 {
		t.Fatalf("p90 TTFT %v ms, want within the 100..250 ms bucket", o.TTFTMs)
	}
	// An interval in which nothing finished has no output length.
	if o, err = sc.Observe(context.Background(), 0.9); err != nil || o.Load.Rate != 0 || !math.IsNaN(o.Load.OSL) {
		t.Fatalf("idle interval %+v (%v): want rate 0 and OSL NaN", o.Load, err)
	}
}

// TestScraperBoundsAndErrors: an endpoint that is not a frontend's, an
// error status and an oversized body are each a clear error.
func TestScraperBoundsAndErrors(t *testing.T) {
	big := "# " + strings.Repeat("a", 1<<16) + "\n"
	cases := []struct {
		name, want string
		h          http.HandlerFunc
	}{
		{"not a frontend", "no tandem_frontend_input_sequence_tokens", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "up 1\n") }},
		{"401", "401", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusUnauthorized) }},
		{"oversized", "more than", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, big) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.h)
			defer srv.Close()
			_, err := (&Scraper{URL: srv.URL, MaxBytes: 1 << 15}).Observe(context.Background(), 0.9)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
		})
	}
}

// TestDryRunActuatesNothing: under a load that needs more workers the
// loop decides to scale up, prints it, and the pool keeps its size.
func TestDryRunActuatesNothing(t *testing.T) {
	f := newFakeFrontend(t)
	real := NewStatic(map[string]int{"agg": 1})
	var out bytes.Buffer
	l := &Loop{Planner: testPlanner(t, nil, nil), Observer: &Scraper{URL: f.srv.URL}, Actuator: &DryRun{Actuator: real, Out: &out}}
	if _, err := l.Observer.Observe(context.Background(), 0.9); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // a short interval: a high rate
	f.serve(400, 2000, 200, 2, 0.05)
	ds := l.Tick(context.Background())
	if len(ds) != 1 || ds[0].Desired <= 1 {
		t.Fatalf("decisions %+v, want a scale-up", ds)
	}
	if got, _ := real.Replicas(context.Background()); got["agg"] != 1 {
		t.Fatalf("dry run scaled the pool to %d", got["agg"])
	}
	if !strings.Contains(out.String(), "dry-run: would scale pool agg to") {
		t.Fatalf("dry-run output %q", out.String())
	}
}

type keys map[string]bool

func (k keys) Valid(s string) bool { return k[s] }

// TestPlannerListenerRefusesStrangers: with keys, /health and /metrics
// need one; without, only a loopback address may be listened on.
func TestPlannerListenerRefusesStrangers(t *testing.T) {
	reg := prometheus.NewRegistry()
	board := health.NewBoard(slog.New(slog.DiscardHandler), reg)
	l := &Loop{Planner: testPlanner(t, board, reg), Observer: &Scraper{URL: "http://127.0.0.1:1/metrics"}, Actuator: NewStatic(map[string]int{"agg": 1}), Board: board}
	l.Tick(context.Background()) // the scrape fails: a diagnostic to show
	srv := httptest.NewServer(l.Handler(reg, keys{"good": true}))
	defer srv.Close()
	for _, tc := range []struct {
		path, auth string
		want       int
	}{
		{"/health", "", 401}, {"/metrics", "", 401}, {"/health", "Bearer bad", 401}, {"/health", "Basic good", 401},
		{"/health", "Bearer good", 200}, {"/metrics", "Bearer good", 200},
	} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+tc.path, nil)
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Fatalf("%s with %q: %d, want %d", tc.path, tc.auth, resp.StatusCode, tc.want)
		}
		if tc.want == 200 && tc.path == "/health" {
			var h struct {
				Status      string
				Diagnostics []health.Diagnostic
			}
			if err := json.Unmarshal(b, &h); err != nil || h.Status != "degraded" || len(h.Diagnostics) == 0 || h.Diagnostics[0].Code != CodeObserveFailed {
				t.Fatalf("/health %s (%v)", b, err)
			}
		}
		if tc.want == 200 && tc.path == "/metrics" && !strings.Contains(string(b), "tandem_planner_observe_failures_total 1") {
			t.Fatalf("/metrics lacks the planner's failure count:\n%s", b)
		}
	}
	for _, tc := range []struct {
		addr  string
		keyed bool
		ok    bool
	}{
		{"127.0.0.1:9402", false, true}, {"localhost:9402", false, true}, {"[::1]:9402", false, true},
		{"0.0.0.0:9402", false, false}, {":9402", false, false}, {"10.0.0.5:9402", false, false}, {"0.0.0.0:9402", true, true},
		{"nonsense", false, false},
	} {
		if err := CheckListen(tc.addr, tc.keyed); (err == nil) != tc.ok {
			t.Errorf("CheckListen(%q, keyed %v) = %v, want ok %v", tc.addr, tc.keyed, err, tc.ok)
		}
	}
}
