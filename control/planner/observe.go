package planner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// maxMetricsBytes bounds one scrape.
const maxMetricsBytes = 16 << 20

// Scraper observes a frontend through its /metrics: the request counter,
// the TTFT, ITL, input, output and cached-token histograms of
// `tandem frontend` (package httpapi), differenced between scrapes.
type Scraper struct {
	URL    string // the frontend's /metrics
	Model  string // only this model's series ("" = all)
	Client *http.Client
	// Header is added to every scrape (an Authorization for a protected
	// metrics endpoint).
	Header http.Header
	// Workers are workers' /metrics (vLLM's names, which the mocker,
	// native engine and vLLM export): their running and waiting requests
	// and KV usage. Optional: the frontend's router gauges already give
	// each worker's requests in flight.
	Workers []string
	// Gatherer, when set, is read instead of URL: the planner running in
	// the frontend's own process (`tandem serve --autoscale`).
	Gatherer prometheus.Gatherer
	// MaxBytes bounds one scrape's body (0: 16 MiB).
	MaxBytes int64

	prev *snapshot
}

type hist struct {
	count, sum float64
	bounds     []float64
	cum        []float64
}

type snapshot struct {
	at                          time.Time
	requests                    float64
	ttft, itl, isl, osl, cached hist
	queued                      float64
	active                      map[string]float64 // router: requests in flight per worker
}

// Observe scrapes once and returns the interval since the previous scrape
// (the first call only primes and returns an observation with no load).
func (s *Scraper) Observe(ctx context.Context, q float64) (Observation, error) {
	snap, err := s.scrape(ctx)
	if err != nil {
		return Observation{}, err
	}
	o := s.interval(snap, q)
	if len(s.Workers) > 0 {
		o.Workers = s.scrapeWorkers(ctx)
	}
	return o, nil
}

// interval turns the snapshot into the observation since the previous
// one, and keeps it as the next one's start.
func (s *Scraper) interval(snap *snapshot, q float64) Observation {
	prev := s.prev
	s.prev = snap
	o := Observation{At: snap.at, Load: Load{Rate: math.NaN()}, QueueDepth: snap.queued, WorkerActive: snap.active}
	if prev == nil {
		return o
	}
	dt := snap.at.Sub(prev.at).Seconds()
	n := snap.isl.count - prev.isl.count
	if dt <= 0 || n < 0 {
		// A restarted frontend resets its counters: start over.
		return o
	}
	// A mean over no requests is unknown (NaN), not zero: an interval in
	// which nothing finished says nothing about output lengths, and a
	// zero fed to a trend-aware predictor reads as a ramp (live, the first
	// interval's OSL of 0 and the next one's 258 had Holt forecast 516).
	o.Load = Load{Rate: n / dt, Window: dt, OSL: math.NaN(), HitFrac: math.NaN()}
	if n > 0 {
		o.Load.ISL = (snap.isl.sum - prev.isl.sum) / n
		if no := snap.osl.count - prev.osl.count; no > 0 {
			o.Load.OSL = (snap.osl.sum - prev.osl.sum) / no
		}
		if o.Load.ISL > 0 {
			if nc := snap.cached.count - prev.cached.count; nc > 0 {
				o.Load.HitFrac = min(max((snap.cached.sum-prev.cached.sum)/nc/o.Load.ISL, 0), 1)
			}
			if tail := histQuantile(prev.isl, snap.isl, q) / o.Load.ISL; usable(tail) && tail <= 1e3 {
				o.Load.ISLTail = tail
			}
		}
	}
	o.Samples = int(snap.ttft.count - prev.ttft.count)
	o.TTFTMs = histQuantile(prev.ttft, snap.ttft, q) * 1000
	// The frontend's ITL histogram holds gaps, not per-request means; its
	// quantile over gaps is what it can tell, and the corrections learn
	// the difference.
	o.ITLMs = histQuantile(prev.itl, snap.itl, q) * 1000
	return o
}

// histQuantile is the q-quantile of the observations between two
// snapshots of a histogram, interpolated linearly inside its bucket as
// Prometheus' histogram_quantile does; 0 when nothing was observed.
func histQuantile(a, b hist, q float64) float64 {
	if len(b.bounds) == 0 || !slices.Equal(a.bounds, b.bounds) && len(a.bounds) > 0 {
		return 0
	}
	d := make([]float64, len(b.cum))
	for i := range b.cum {
		d[i] = b.cum[i]
		if len(a.cum) == len(b.cum) {
			d[i] -= a.cum[i]
		}
	}
	total := b.count - a.count
	if total <= 0 {
		return 0
	}
	rank := q * total
	lo, prevC := 0.0, 0.0
	for i, c := range d {
		if c >= rank {
			if math.IsInf(b.bounds[i], 1) {
				return lo
			}
			if c == prevC {
				return b.bounds[i]
			}
			return lo + (b.bounds[i]-lo)*(rank-prevC)/(c-prevC)
		}
		lo, prevC = b.bounds[i], c
	}
	return lo
}

func (s *Scraper) scrape(ctx context.Context) (*snapshot, error) {
	if s.Gatherer != nil {
		// A duplicate-series error still returns every family gathered.
		mfs, err := s.Gatherer.Gather()
		if len(mfs) == 0 && err != nil {
			return nil, fmt.Errorf("planner: gather: %w", err)
		}
		fams := map[string]*dto.MetricFamily{}
		for _, f := range mfs {
			fams[f.GetName()] = f
		}
		return parseFamilies(fams, s.Model, time.Now())
	}
	fams, err := s.get(ctx, s.URL)
	if err != nil {
		return nil, err
	}
	return parseFamilies(fams, s.Model, time.Now())
}

// WorkerStats is one worker's own /metrics, as vLLM names them.
type WorkerStats struct {
	URL string `json:"url"`
	// Running and Waiting are vllm:num_requests_running and
	// vllm:num_requests_waiting; KVUsage is vllm:kv_cache_usage_perc
	// (0..1).
	Running, Waiting, KVUsage float64
	Error                     string `json:"error,omitempty"`
}

// scrapeWorkers reads every worker's /metrics; a worker that cannot be
// read is reported with its error (a worker starting or leaving is
// normal while scaling, so it does not fail the observation).
func (s *Scraper) scrapeWorkers(ctx context.Context) []WorkerStats {
	out := make([]WorkerStats, len(s.Workers))
	for i, u := range s.Workers {
		out[i].URL = u
		fams, err := s.get(ctx, u)
		if err != nil {
			out[i].Error = err.Error()
			continue
		}
		sum := func(name string) float64 {
			v := 0.0
			for _, m := range fams[name].GetMetric() {
				v += m.GetGauge().GetValue()
			}
			return v
		}
		out[i].Running, out[i].Waiting = sum("vllm:num_requests_running"), sum("vllm:num_requests_waiting")
		if f := fams["vllm:kv_cache_usage_perc"]; f != nil && len(f.GetMetric()) > 0 {
			out[i].KVUsage = sum("vllm:kv_cache_usage_perc") / float64(len(f.GetMetric()))
		}
	}
	return out
}

// get reads and parses one /metrics, bounded in time and size.
func (s *Scraper) get(ctx context.Context, url string) (map[string]*dto.MetricFamily, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("planner: scrape: %w", err)
	}
	for k, v := range s.Header {
		req.Header[k] = v
	}
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	c := s.Client
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("planner: scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("planner: scrape %s: %s", url, resp.Status)
	}
	limit := s.MaxBytes
	if limit <= 0 {
		limit = maxMetricsBytes
	}
	lr := &io.LimitedReader{R: resp.Body, N: limit + 1}
	tp := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := tp.TextToMetricFamilies(lr)
	if lr.N <= 0 {
		return nil, fmt.Errorf("planner: scrape %s: more than %d bytes", url, limit)
	}
	if err != nil {
		return nil, fmt.Errorf("planner: scrape %s: %w", url, err)
	}
	return fams, nil
}

func parseMetrics(r io.Reader, modelName string, at time.Time) (*snapshot, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("planner: metrics: %w", err)
	}
	return parseFamilies(fams, modelName, at)
}

func parseFamilies(fams map[string]*dto.MetricFamily, modelName string, at time.Time) (*snapshot, error) {
	snap := &snapshot{at: at}
	match := func(m *dto.Metric) bool {
		if modelName == "" {
			return true
		}
		for _, l := range m.GetLabel() {
			if l.GetName() == "model" {
				return l.GetValue() == modelName
			}
		}
		return false
	}
	addHist := func(h *hist, name string) {
		f := fams[name]
		if f == nil {
			return
		}
		for _, m := range f.GetMetric() {
			if !match(m) || m.GetHistogram() == nil {
				continue
			}
			hh := m.GetHistogram()
			h.count += float64(hh.GetSampleCount())
			h.sum += hh.GetSampleSum()
			bs := hh.GetBucket()
			if h.bounds == nil {
				for _, b := range bs {
					h.bounds = append(h.bounds, b.GetUpperBound())
				}
				h.bounds = append(h.bounds, math.Inf(1))
				h.cum = make([]float64, len(h.bounds))
			}
			if len(bs)+1 != len(h.bounds) {
				continue
			}
			for i, b := range bs {
				h.cum[i] += float64(b.GetCumulativeCount())
			}
			h.cum[len(bs)] += float64(hh.GetSampleCount())
		}
	}
	addHist(&snap.ttft, "tandem_frontend_time_to_first_token_seconds")
	addHist(&snap.itl, "tandem_frontend_inter_token_latency_seconds")
	addHist(&snap.isl, "tandem_frontend_input_sequence_tokens")
	addHist(&snap.osl, "tandem_frontend_output_sequence_tokens")
	addHist(&snap.cached, "tandem_frontend_cached_tokens")
	if f := fams["tandem_frontend_queued_requests"]; f != nil {
		for _, m := range f.GetMetric() {
			if match(m) {
				snap.queued += m.GetGauge().GetValue()
			}
		}
	}
	if f := fams["tandem_router_worker_active_requests"]; f != nil {
		snap.active = map[string]float64{}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "worker" {
					snap.active[l.GetValue()] += m.GetGauge().GetValue()
				}
			}
		}
	}
	if f := fams["tandem_frontend_requests_total"]; f != nil {
		for _, m := range f.GetMetric() {
			if match(m) {
				snap.requests += m.GetCounter().GetValue()
			}
		}
	}
	if fams["tandem_frontend_input_sequence_tokens"] == nil && !strings.Contains(modelName, "\x00") {
		return nil, errors.New("planner: metrics: no tandem_frontend_input_sequence_tokens: is this a tandem frontend's /metrics?")
	}
	return snap, nil
}
