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
}

// Observe scrapes once and returns the interval since the previous scrape
// (the first call only primes and returns an observation with no load).
func (s *Scraper) Observe(ctx context.Context, q float64) (Observation, error) {
	snap, err := s.scrape(ctx)
	if err != nil {
		return Observation{}, err
	}
	prev := s.prev
	s.prev = snap
	o := Observation{At: snap.at, Load: Load{Rate: math.NaN()}}
	if prev == nil {
		return o, nil
	}
	dt := snap.at.Sub(prev.at).Seconds()
	n := snap.isl.count - prev.isl.count
	if dt <= 0 || n < 0 {
		// A restarted frontend resets its counters: start over.
		return o, nil
	}
	o.Load = Load{Rate: n / dt, Window: dt}
	if n > 0 {
		o.Load.ISL = (snap.isl.sum - prev.isl.sum) / n
		if no := snap.osl.count - prev.osl.count; no > 0 {
			o.Load.OSL = (snap.osl.sum - prev.osl.sum) / no
		}
		if o.Load.ISL > 0 {
			if nc := snap.cached.count - prev.cached.count; nc > 0 {
				o.Load.HitFrac = min(max((snap.cached.sum-prev.cached.sum)/nc/o.Load.ISL, 0), 1)
			}
			o.Load.ISLTail = histQuantile(prev.isl, snap.isl, q) / o.Load.ISL
		}
	}
	o.Samples = int(snap.ttft.count - prev.ttft.count)
	o.TTFTMs = histQuantile(prev.ttft, snap.ttft, q) * 1000
	// The frontend's ITL histogram holds gaps, not per-request means; its
	// quantile over gaps is what it can tell, and the corrections learn
	// the difference.
	o.ITLMs = histQuantile(prev.itl, snap.itl, q) * 1000
	return o, nil
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
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL, nil)
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
		return nil, fmt.Errorf("planner: scrape %s: %w", s.URL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("planner: scrape %s: %s", s.URL, resp.Status)
	}
	return parseMetrics(io.LimitReader(resp.Body, maxMetricsBytes), s.Model, time.Now())
}

func parseMetrics(r io.Reader, modelName string, at time.Time) (*snapshot, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("planner: metrics: %w", err)
	}
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
