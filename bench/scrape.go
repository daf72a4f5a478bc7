package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The server-side families bench reads from a target's /metrics. vLLM's
// names (https://docs.vllm.ai/en/latest/design/metrics.html) are what
// Tandem's mocker exports too; the tandem_ ones exist only on Tandem. A
// family a server does not export is listed in ServerMetrics.Missing,
// never taken as zero.
const (
	famCacheQueries = "vllm:prefix_cache_queries_total"   // prompt tokens looked up in the prefix cache
	famCacheHits    = "vllm:prefix_cache_hits_total"      // of those, tokens found cached
	famPreemptions  = "vllm:num_preemptions_total"        // sequences preempted (KV pressure)
	famWaiting      = "vllm:num_requests_waiting"         // engine queue depth
	famRunning      = "vllm:num_requests_running"         // sequences in the batch
	famKVUsage      = "vllm:kv_cache_usage_perc"          // share of KV blocks in use (0-1): the accelerator-memory figure of a GPU-less run
	famQueued       = "tandem_frontend_queued_requests"   // frontend: waiting for a first token
	famEvictions    = "tandem_kvindex_block_events_total" // op="removed": blocks the engines evicted, as their KV events told the router
	famXferBytes    = "tandem_kv_transfer_bytes_total"    // KV bytes moved between workers
	famXfers        = "tandem_kv_transfers_total"         // KV transfers
	famDisagg       = "tandem_disagg_decisions_total"     // choice=local|remote, reason=...
)

// scrapeLimit bounds one /metrics body; a server with a million series is
// misconfigured, and bench must not hold its body in memory.
const scrapeLimit = 16 << 20

// MetricSample is one scrape's gauges, on the run's clock (milliseconds
// since the run's start), so it lines up with the records' scheduled_ms.
type MetricSample struct {
	Ms      float64 `json:"ms"`
	Waiting float64 `json:"waiting"`
	Running float64 `json:"running"`
	Queued  float64 `json:"queued"`
	// KVUsage is the highest vllm:kv_cache_usage_perc over the workers.
	KVUsage float64 `json:"kv_usage"`
}

// ServerMetrics is what one target's /metrics said during a run: counter
// increases from the first scrape to the last, and gauges at every scrape.
// Counters are summed over label sets (workers, models).
type ServerMetrics struct {
	URL       string `json:"url"`
	Scrapes   int    `json:"scrapes"`
	Failed    int    `json:"failed_scrapes"`
	LastError string `json:"last_error,omitempty"`
	// Missing lists the families the server did not export.
	Missing []string `json:"missing,omitempty"`
	// CacheQueryTokens and CacheHitTokens are the prefix-cache lookups
	// the engines counted (vLLM counts tokens); CacheHitRate is their
	// ratio. This is the observed cache hit, not the generated overlap.
	CacheQueryTokens float64 `json:"cache_query_tokens"`
	CacheHitTokens   float64 `json:"cache_hit_tokens"`
	CacheHitRate     float64 `json:"cache_hit_rate"`
	Evictions        float64 `json:"evicted_blocks"`
	Preemptions      float64 `json:"preemptions"`
	TransferBytes    float64 `json:"transfer_bytes"`
	Transfers        float64 `json:"transfers"`
	// DisaggDecisions counts decisions by choice (local, remote).
	DisaggDecisions map[string]float64 `json:"disagg_decisions,omitempty"`
	WaitingMax      float64            `json:"waiting_max"`
	WaitingMean     float64            `json:"waiting_mean"`
	QueuedMax       float64            `json:"queued_max"`
	QueuedMean      float64            `json:"queued_mean"`
	RunningMax      float64            `json:"running_max"`
	KVUsageMax      float64            `json:"kv_usage_max"`
	Series          []MetricSample     `json:"series,omitempty"`
}

// snapshot is one scrape's sums.
type snapshot struct {
	present  map[string]bool
	counters map[string]float64
	disagg   map[string]float64
	sample   MetricSample
}

func sumFamily(mf *dto.MetricFamily, match func(*dto.Metric) bool) float64 {
	sum := 0.0
	for _, m := range mf.GetMetric() {
		if match != nil && !match(m) {
			continue
		}
		var v float64
		switch {
		case m.GetCounter() != nil:
			v = m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			v = m.GetGauge().GetValue()
		case m.GetUntyped() != nil:
			v = m.GetUntyped().GetValue()
		}
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			sum += v
		}
	}
	return sum
}

func label(m *dto.Metric, name string) string {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == name {
			return lp.GetValue()
		}
	}
	return ""
}

// parseMetrics reads a Prometheus text exposition into a snapshot.
func parseMetrics(r io.Reader) (snapshot, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(io.LimitReader(r, scrapeLimit))
	if err != nil {
		return snapshot{}, fmt.Errorf("parsing /metrics: %w", err)
	}
	s := snapshot{present: map[string]bool{}, counters: map[string]float64{}, disagg: map[string]float64{}}
	for name, mf := range fams {
		s.present[name] = true
		switch name {
		case famCacheQueries, famCacheHits, famPreemptions, famXferBytes, famXfers:
			s.counters[name] = sumFamily(mf, nil)
		case famEvictions:
			s.counters[name] = sumFamily(mf, func(m *dto.Metric) bool { return label(m, "op") == "removed" })
		case famDisagg:
			for _, m := range mf.GetMetric() {
				s.disagg[label(m, "choice")] += sumFamily(&dto.MetricFamily{Metric: []*dto.Metric{m}}, nil)
			}
		case famWaiting:
			s.sample.Waiting = sumFamily(mf, nil)
		case famRunning:
			s.sample.Running = sumFamily(mf, nil)
		case famQueued:
			s.sample.Queued = sumFamily(mf, nil)
		case famKVUsage:
			for _, m := range mf.GetMetric() {
				s.sample.KVUsage = max(s.sample.KVUsage, sumFamily(&dto.MetricFamily{Metric: []*dto.Metric{m}}, nil))
			}
		}
	}
	return s, nil
}

// scraper polls one target's /metrics during a run.
type scraper struct {
	url, key string
	http     *http.Client
	origin   time.Time
	every    time.Duration

	mu    sync.Mutex
	first *snapshot
	last  *snapshot
	out   ServerMetrics
	done  chan struct{}
	wg    sync.WaitGroup
}

func newScraper(c *http.Client, base, key string, every time.Duration) *scraper {
	return &scraper{url: base + "/metrics", key: key, http: c, every: every, done: make(chan struct{}),
		out: ServerMetrics{URL: base + "/metrics"}}
}

// scrapeTimeout bounds one scrape: a server too busy to answer /metrics
// within it shows as a failed scrape, and the run does not wait.
const scrapeTimeout = 2 * time.Second

func (s *scraper) scrape(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, scrapeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err == nil && s.key != "" {
		req.Header.Set("Authorization", "Bearer "+s.key)
	}
	var snap snapshot
	if err == nil {
		var resp *http.Response
		if resp, err = s.http.Do(req); err == nil {
			if resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("GET %s: %s", s.url, resp.Status)
			} else {
				snap, err = parseMetrics(resp.Body)
			}
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, scrapeLimit))
			resp.Body.Close()
		}
	}
	at := ms(time.Since(s.origin).Nanoseconds())
	s.mu.Lock()
	defer s.mu.Unlock()
	s.out.Scrapes++
	if err != nil {
		s.out.Failed++
		s.out.LastError = err.Error()
		return
	}
	snap.sample.Ms = at
	if s.first == nil {
		s.first = &snap
	}
	s.last = &snap
	s.out.Series = append(s.out.Series, snap.sample)
}

// baseline takes the scrape the run's counters are counted from; its
// sample sits at 0 ms.
func (s *scraper) baseline(ctx context.Context) {
	s.origin = time.Now()
	s.scrape(ctx)
}

// start polls every s.every until stop, on the run's clock.
func (s *scraper) start(ctx context.Context, origin time.Time) {
	s.origin = origin // before the goroutine starts: it reads it
	s.wg.Go(func() {
		t := time.NewTicker(s.every)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				s.scrape(ctx)
			case <-s.done:
				return
			case <-ctx.Done():
				return
			}
		}
	})
}

// stop takes the final scrape and returns the run's figures.
func (s *scraper) stop(ctx context.Context) *ServerMetrics {
	close(s.done)
	s.wg.Wait()
	s.scrape(context.WithoutCancel(ctx))
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.out
	if s.first == nil {
		return &out
	}
	delta := func(n string) float64 {
		d := s.last.counters[n] - s.first.counters[n]
		if d < 0 { // the server restarted: its counter began again at 0
			d = s.last.counters[n]
		}
		return d
	}
	for _, n := range []string{famCacheQueries, famCacheHits, famEvictions, famPreemptions, famXferBytes, famXfers, famDisagg, famWaiting, famQueued, famKVUsage} {
		if !s.last.present[n] {
			out.Missing = append(out.Missing, n)
		}
	}
	out.CacheQueryTokens, out.CacheHitTokens = delta(famCacheQueries), delta(famCacheHits)
	if out.CacheQueryTokens > 0 {
		out.CacheHitRate = round3(out.CacheHitTokens / out.CacheQueryTokens)
	}
	out.Evictions, out.Preemptions = delta(famEvictions), delta(famPreemptions)
	out.TransferBytes, out.Transfers = delta(famXferBytes), delta(famXfers)
	for c, v := range s.last.disagg {
		d := v - s.first.disagg[c]
		if d < 0 {
			d = v
		}
		if out.DisaggDecisions == nil {
			out.DisaggDecisions = map[string]float64{}
		}
		out.DisaggDecisions[c] = d
	}
	var wsum, qsum float64
	for _, p := range out.Series {
		out.WaitingMax, out.QueuedMax, out.RunningMax = max(out.WaitingMax, p.Waiting), max(out.QueuedMax, p.Queued), max(out.RunningMax, p.Running)
		out.KVUsageMax = max(out.KVUsageMax, p.KVUsage)
		wsum, qsum = wsum+p.Waiting, qsum+p.Queued
	}
	if n := float64(len(out.Series)); n > 0 {
		out.WaitingMean, out.QueuedMean = round3(wsum/n), round3(qsum/n)
	}
	return &out
}

// mergeServer adds b's counters to a (several runs of one label).
func mergeServer(a, b *ServerMetrics) *ServerMetrics {
	if a == nil {
		c := *b
		c.DisaggDecisions = nil
		for k, v := range b.DisaggDecisions {
			if c.DisaggDecisions == nil {
				c.DisaggDecisions = map[string]float64{}
			}
			c.DisaggDecisions[k] = v
		}
		c.Series = nil
		return &c
	}
	a.Scrapes += b.Scrapes
	a.Failed += b.Failed
	if b.LastError != "" {
		a.LastError = b.LastError
	}
	a.CacheQueryTokens += b.CacheQueryTokens
	a.CacheHitTokens += b.CacheHitTokens
	a.CacheHitRate = 0
	if a.CacheQueryTokens > 0 {
		a.CacheHitRate = round3(a.CacheHitTokens / a.CacheQueryTokens)
	}
	a.Evictions += b.Evictions
	a.Preemptions += b.Preemptions
	a.TransferBytes += b.TransferBytes
	a.Transfers += b.Transfers
	for k, v := range b.DisaggDecisions {
		if a.DisaggDecisions == nil {
			a.DisaggDecisions = map[string]float64{}
		}
		a.DisaggDecisions[k] += v
	}
	a.WaitingMax, a.QueuedMax, a.RunningMax = max(a.WaitingMax, b.WaitingMax), max(a.QueuedMax, b.QueuedMax), max(a.RunningMax, b.RunningMax)
	a.KVUsageMax = max(a.KVUsageMax, b.KVUsageMax)
	a.WaitingMean, a.QueuedMean = round3((a.WaitingMean+b.WaitingMean)/2), round3((a.QueuedMean+b.QueuedMean)/2)
	return a
}
