package mocker

import (
	"math"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemllm/tandem/kvcache"
)

// Bucket boundaries of vLLM's v1 PrometheusStatLogger (functions, not
// package variables, so no engine can alter another's buckets).
func ttftBuckets() []float64 {
	return []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
		2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
}

func itlBuckets() []float64 {
	return []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
		2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
}

func e2eBuckets() []float64 {
	return []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
		50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
}

// finish reasons as vLLM labels them in request_success_total.
const (
	reasonStop = iota
	reasonLength
	reasonAbort
	numReasons
)

func reasonLabel(r int) string {
	return [numReasons]string{"stop", "length", "abort"}[r]
}

// histogram is a minimal lock-free histogram. Engines keep their own
// instead of prometheus.Histogram so a thousand idle workers cost a few
// hundred bytes each, and so observations from the scheduler goroutine are
// two atomic adds.
type histogram struct {
	bounds []float64
	counts []atomic.Uint64 // per bucket, not cumulative; last is +Inf
	sum    atomic.Uint64   // float64 bits
}

func newHistogram(bounds []float64) *histogram {
	return &histogram{bounds: bounds, counts: make([]atomic.Uint64, len(bounds)+1)}
}

func (h *histogram) observe(v float64) {
	h.counts[sort.SearchFloat64s(h.bounds, v)].Add(1)
	for {
		old := h.sum.Load()
		if h.sum.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

func (h *histogram) metric(desc *prometheus.Desc, labels ...string) prometheus.Metric {
	buckets := make(map[float64]uint64, len(h.bounds))
	var cum uint64
	for i, b := range h.bounds {
		cum += h.counts[i].Load()
		buckets[b] = cum
	}
	cum += h.counts[len(h.bounds)].Load()
	return prometheus.MustNewConstHistogram(desc, cum, math.Float64frombits(h.sum.Load()), buckets, labels...)
}

// stats are the counters the scheduler updates and Collect reads.
type stats struct {
	promptTokens, generationTokens atomic.Uint64
	prefixQueries, prefixHits      atomic.Uint64
	preemptions                    atomic.Uint64
	success                        [numReasons]atomic.Uint64
	ttft, itl, e2e                 *histogram

	// Lower KV tiers: a snapshot of the cache's TierStats after every
	// step, and the onboards' block counts and copy times.
	tierBlocks, tierBytes    [kvcache.NumTiers]atomic.Int64
	tierOffload, tierDropped [kvcache.NumTiers]atomic.Uint64
	onboardBlocks            [kvcache.NumTiers]atomic.Uint64
	sharedOnboard            atomic.Uint64 // onboarded blocks read from another worker's copy in a shared tier (host or disk)
	onboard                  *histogram
	// queue is each request's wait from arrival to its first admission
	// (vLLM's request_queue_time): TTFT less it is the onboard and prefill.
	queue *histogram
}

// onboardBuckets span a one-block host copy to a long prompt read from disk.
func onboardBuckets() []float64 {
	return []float64{0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}
}

// snapshotTiers copies the cache's tier counters for Collect.
func (s *stats) snapshotTiers(st kvcache.TierStats) {
	for t := range kvcache.NumTiers {
		s.tierBlocks[t].Store(int64(st.Blocks[t]))
		s.tierBytes[t].Store(st.Bytes[t])
		s.tierOffload[t].Store(st.Offloaded[t])
		s.tierDropped[t].Store(st.Dropped[t])
	}
}

func newStats() *stats {
	return &stats{
		onboard: newHistogram(onboardBuckets()),
		queue:   newHistogram(ttftBuckets()),
		ttft:    newHistogram(ttftBuckets()),
		itl:     newHistogram(itlBuckets()),
		e2e:     newHistogram(e2eBuckets()),
	}
}

// collector exposes one worker's vllm: metrics, labelled model_name and
// engine as vLLM does.
type collector struct {
	e     *Engine
	once  sync.Once
	descs struct {
		running, waiting, usage                   *prometheus.Desc
		queries, hits, preempt, prompt, gen, succ *prometheus.Desc
		ttft, itl, e2e, cacheInfo                 *prometheus.Desc
		tierBlocks, tierBytes, tierOffload        *prometheus.Desc
		tierOnboard, tierDropped, onboardSeconds  *prometheus.Desc
		tierCapacity, sharedOnboard               *prometheus.Desc
	}
	cacheLabels []string
}

func (c *collector) init() {
	c.once.Do(func() {
		l := []string{"model_name", "engine"}
		d := &c.descs
		d.running = prometheus.NewDesc("vllm:num_requests_running", "Number of requests in model execution batches.", l, nil)
		d.waiting = prometheus.NewDesc("vllm:num_requests_waiting", "Number of requests waiting to be processed.", l, nil)
		d.usage = prometheus.NewDesc("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", l, nil)
		d.queries = prometheus.NewDesc("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.", l, nil)
		d.hits = prometheus.NewDesc("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", l, nil)
		d.preempt = prometheus.NewDesc("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.", l, nil)
		d.prompt = prometheus.NewDesc("vllm:prompt_tokens_total", "Number of prefill tokens processed.", l, nil)
		d.gen = prometheus.NewDesc("vllm:generation_tokens_total", "Number of generation tokens processed.", l, nil)
		d.succ = prometheus.NewDesc("vllm:request_success_total", "Count of successfully processed requests.",
			[]string{"model_name", "engine", "finished_reason"}, nil)
		d.ttft = prometheus.NewDesc("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", l, nil)
		d.itl = prometheus.NewDesc("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", l, nil)
		d.e2e = prometheus.NewDesc("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", l, nil)
		cfg := &c.e.cfg
		prefix := "True"
		if cfg.DisablePrefixCaching {
			prefix = "False"
		}
		names := []string{"block_size", "cache_dtype", "enable_prefix_caching", "engine", "num_gpu_blocks", "prefix_caching_hash_algo"}
		c.cacheLabels = []string{strconv.Itoa(cfg.BlockSize), "auto", prefix, cfg.EngineLabel, strconv.Itoa(cfg.NumBlocks), "sha256_cbor"}
		d.cacheInfo = prometheus.NewDesc("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", names, nil)
		tl := []string{"model_name", "engine", "tier"}
		d.tierBlocks = prometheus.NewDesc("tandem_kv_tier_blocks", "KV blocks held per tier (g1: the pool's cached and in-use prefix blocks; g2: host memory; g3: disk).", tl, nil)
		d.tierBytes = prometheus.NewDesc("tandem_kv_tier_bytes", "Bytes held by the lower KV tiers.", tl, nil)
		d.tierOffload = prometheus.NewDesc("tandem_kv_tier_offload_blocks_total", "KV blocks written into a lower tier.", tl, nil)
		d.tierOnboard = prometheus.NewDesc("tandem_kv_tier_onboard_blocks_total", "KV blocks brought back into the pool from a lower tier (prefix hits per tier).", tl, nil)
		d.tierDropped = prometheus.NewDesc("tandem_kv_tier_dropped_blocks_total", "KV blocks evicted out of a lower tier for good.", tl, nil)
		d.onboardSeconds = prometheus.NewDesc("tandem_kv_tier_onboard_seconds", "Time from admission until a prompt's onboarded blocks are in the pool.", l, nil)
		d.tierCapacity = prometheus.NewDesc("tandem_kv_tier_capacity_bytes", "Bytes each lower KV tier may hold (--kv-offload-host-bytes, --kv-offload-disk-bytes; whole blocks).", tl, nil)
		d.sharedOnboard = prometheus.NewDesc("tandem_kv_tier_shared_onboard_blocks_total", "KV blocks onboarded from another worker's copy in a shared tier (--kv-offload-host-shared, --kv-offload-disk-shared; also counted in that tier's onboards).", l, nil)
	})
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	c.init()
	d := &c.descs
	for _, desc := range []*prometheus.Desc{d.running, d.waiting, d.usage, d.queries, d.hits, d.preempt,
		d.prompt, d.gen, d.succ, d.ttft, d.itl, d.e2e, d.cacheInfo} {
		ch <- desc
	}
	if c.e.cfg.Tiers.Enabled() {
		for _, desc := range []*prometheus.Desc{d.tierBlocks, d.tierBytes, d.tierOffload, d.tierOnboard, d.tierDropped, d.onboardSeconds, d.tierCapacity, d.sharedOnboard} {
			ch <- desc
		}
	}
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	c.init()
	d := &c.descs
	e := c.e
	s := e.stats
	model, eng := e.cfg.Model, e.cfg.EngineLabel
	load := e.Load()
	gauge := func(desc *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, model, eng)
	}
	counter := func(desc *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v), model, eng)
	}
	gauge(d.running, float64(load.Running))
	gauge(d.waiting, float64(load.Waiting))
	gauge(d.usage, load.KVUsage)
	counter(d.queries, s.prefixQueries.Load())
	counter(d.hits, s.prefixHits.Load())
	counter(d.preempt, s.preemptions.Load())
	counter(d.prompt, s.promptTokens.Load())
	counter(d.gen, s.generationTokens.Load())
	for r := range numReasons {
		ch <- prometheus.MustNewConstMetric(d.succ, prometheus.CounterValue, float64(s.success[r].Load()), model, eng, reasonLabel(r))
	}
	ch <- s.ttft.metric(d.ttft, model, eng)
	ch <- s.itl.metric(d.itl, model, eng)
	ch <- s.e2e.metric(d.e2e, model, eng)
	ch <- prometheus.MustNewConstMetric(d.cacheInfo, prometheus.GaugeValue, 1, c.cacheLabels...)
	if !e.cfg.Tiers.Enabled() {
		return
	}
	for t := range kvcache.NumTiers {
		tl := t.String()
		ch <- prometheus.MustNewConstMetric(d.tierBlocks, prometheus.GaugeValue, float64(s.tierBlocks[t].Load()), model, eng, tl)
		if t == kvcache.TierG1 {
			continue
		}
		ch <- prometheus.MustNewConstMetric(d.tierBytes, prometheus.GaugeValue, float64(s.tierBytes[t].Load()), model, eng, tl)
		ch <- prometheus.MustNewConstMetric(d.tierOffload, prometheus.CounterValue, float64(s.tierOffload[t].Load()), model, eng, tl)
		ch <- prometheus.MustNewConstMetric(d.tierOnboard, prometheus.CounterValue, float64(s.onboardBlocks[t].Load()), model, eng, tl)
		ch <- prometheus.MustNewConstMetric(d.tierDropped, prometheus.CounterValue, float64(s.tierDropped[t].Load()), model, eng, tl)
		ch <- prometheus.MustNewConstMetric(d.tierCapacity, prometheus.GaugeValue, float64(e.tierCapacityBytes(t)), model, eng, tl)
	}
	ch <- s.onboard.metric(d.onboardSeconds, model, eng)
	counter(d.sharedOnboard, s.sharedOnboard.Load())
}

// tierCapacityBytes is what lower tier t may hold: whole blocks of its
// configured size.
func (e *Engine) tierCapacityBytes(t kvcache.Tier) int64 {
	bb := int64(e.cfg.BlockSize) * int64(e.cfg.KVBytesPerToken)
	if bb <= 0 {
		return 0
	}
	switch t {
	case kvcache.TierG2:
		return e.cfg.Tiers.HostBytes / bb * bb
	case kvcache.TierG3:
		return e.cfg.Tiers.DiskBytes / bb * bb
	}
	return 0
}

// KVTiers reports the worker's KV tiers for /health (false without
// tiers): blocks and bytes per tier as of the last step, each lower
// tier's capacity, and its offload, onboard and drop counts. It never
// waits for the step loop.
func (e *Engine) KVTiers() (kvcache.TierStats, bool) {
	var st kvcache.TierStats
	if !e.cfg.Tiers.Enabled() {
		return st, false
	}
	s := e.stats
	bb := int64(e.cfg.BlockSize) * int64(e.cfg.KVBytesPerToken)
	for t := range kvcache.NumTiers {
		st.Blocks[t] = int(s.tierBlocks[t].Load())
		st.Bytes[t] = s.tierBytes[t].Load()
		st.Offloaded[t] = s.tierOffload[t].Load()
		st.Onboarded[t] = s.onboardBlocks[t].Load()
		st.Dropped[t] = s.tierDropped[t].Load()
		if bb > 0 {
			st.Capacity[t] = int(min(e.tierCapacityBytes(t)/bb, 1<<31-1))
		}
	}
	st.SharedOnboarded = s.sharedOnboard.Load()
	return st, true
}
