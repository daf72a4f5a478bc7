package upstream

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tandemllm/tandem/health"
)

// DiagMetricsUnavailable (warn): the server's /metrics cannot be scraped
// (unreachable, an error status, SGLang without --enable-metrics,
// llama-server without --metrics, or the load gauges missing), so this
// worker's load is only what the router itself routed to it. It clears at
// the next good scrape.
const DiagMetricsUnavailable = "upstream_metrics_unavailable"

// DefaultMetricsInterval is how often /metrics is scraped.
const DefaultMetricsInterval = 2 * time.Second

// maxMetricsBody bounds one scrape (vLLM's /metrics with histograms for
// one model is about 100 KiB).
const maxMetricsBody = 8 << 20

// EngineLoad is the server's own account of its load, as its /metrics
// publishes it: the requests it runs and queues, from every client (not
// only this Tandem), and the fraction of its KV cache in use.
type EngineLoad struct {
	Running, Waiting int
	KVUsage          float64 // 0..1; negative: not published
	At               time.Time
}

// loadGauges names the load gauges of each dialect: vLLM
// (vllm/v1/metrics/loggers.py: vllm:num_requests_running,
// vllm:num_requests_waiting, vllm:kv_cache_usage_perc — a fraction despite
// the name — and vllm:gpu_cache_usage_perc before v0.10), SGLang
// (python/sglang/srt/metrics/collector.py: sglang:num_running_reqs,
// sglang:num_queue_reqs, sglang:token_usage, labelled dp_rank under DP
// attention), llama.cpp (tools/server/server.cpp, --metrics:
// llamacpp:requests_processing, llamacpp:requests_deferred,
// llamacpp:kv_cache_usage_ratio in builds that still publish it).
type loadGauges struct {
	running, waiting []string
	usage            []string
}

func gaugesFor(api string) loadGauges {
	switch api {
	case APISGLang:
		return loadGauges{[]string{"sglang:num_running_reqs"}, []string{"sglang:num_queue_reqs"}, []string{"sglang:token_usage"}}
	case APILlamaCpp:
		return loadGauges{[]string{"llamacpp:requests_processing"}, []string{"llamacpp:requests_deferred"}, []string{"llamacpp:kv_cache_usage_ratio"}}
	case APIOpenAI:
		// Any OpenAI-compatible server: whichever engine's names it
		// publishes (llama-server behind its OpenAI API has llamacpp:*).
		return loadGauges{
			[]string{"vllm:num_requests_running", "sglang:num_running_reqs", "llamacpp:requests_processing"},
			[]string{"vllm:num_requests_waiting", "sglang:num_queue_reqs", "llamacpp:requests_deferred"},
			[]string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage", "llamacpp:kv_cache_usage_ratio"}}
	}
	// vLLM.
	return loadGauges{[]string{"vllm:num_requests_running"}, []string{"vllm:num_requests_waiting"},
		[]string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"}}
}

type loadState struct {
	wg   sync.WaitGroup
	mu   sync.Mutex
	last EngineLoad
	ok   bool
	fail error       // the last scrape's failure, while raised
	off  atomic.Bool // an OpenAI server without /metrics: not scraped
}

func (l *loadState) wait() { l.wg.Wait() }

// Load returns the last good scrape (false: none yet, or the last one
// failed).
func (e *Engine) Load() (EngineLoad, bool) {
	e.load.mu.Lock()
	defer e.load.mu.Unlock()
	return e.load.last, e.load.ok
}

// RunningDecodes implements engine.LoadReporter, as the in-process
// engines do: the sequences the server runs now, by its /metrics (0
// while unknown).
func (e *Engine) RunningDecodes() int {
	l, ok := e.Load()
	if !ok {
		return 0
	}
	return l.Running
}

// EngineQueue implements engine.QueueReporter: the server's running and
// waiting requests by its last good scrape, from every client (the
// router subtracts what it sent itself).
func (e *Engine) EngineQueue() (running, waiting int, at time.Time, ok bool) {
	l, ok := e.Load()
	return l.Running, l.Waiting, l.At, ok
}

func (e *Engine) startScrape(ctx context.Context) {
	iv := e.cfg.MetricsInterval
	if iv < 0 {
		return
	}
	if iv == 0 {
		iv = DefaultMetricsInterval
	}
	e.load.wg.Add(1)
	go func() {
		defer e.load.wg.Done()
		t := time.NewTicker(iv)
		defer t.Stop()
		for {
			e.scrapeOnce(ctx, min(e.cfg.ProbeTimeout, iv))
			if e.load.off.Load() {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// ScrapeNow scrapes /metrics once (tests, and a caller that cannot wait
// for the interval).
func (e *Engine) ScrapeNow(ctx context.Context) error {
	e.scrapeOnce(ctx, e.cfg.ProbeTimeout)
	e.load.mu.Lock()
	defer e.load.mu.Unlock()
	return e.load.fail
}

func (e *Engine) scrapeOnce(ctx context.Context, timeout time.Duration) {
	sctx, cancel := context.WithTimeout(ctx, timeout)
	l, status, err := e.scrape(sctx)
	cancel()
	if ctx.Err() != nil {
		return
	}
	if err != nil && e.cfg.API == APIOpenAI && status == http.StatusNotFound {
		// A plain OpenAI-compatible server need not publish metrics: its
		// load is what the router routed to it. Said once, not a fault.
		e.load.off.Store(true)
		e.cfg.Logger.Info("the upstream publishes no /metrics; its load is what this router sends it", "url", e.cfg.URL)
		return
	}
	e.load.mu.Lock()
	was := e.load.fail
	if err == nil {
		l.At = time.Now()
		e.load.last, e.load.ok, e.load.fail = l, true, nil
	} else {
		e.load.ok, e.load.fail = false, err
	}
	e.load.mu.Unlock()
	e.mu.Lock()
	b, subject := e.board, e.subject
	e.mu.Unlock()
	switch {
	case err != nil && was == nil:
		msg := "the upstream's /metrics cannot be scraped; this worker's load is only what the router sent it"
		if b != nil {
			b.Raise(DiagMetricsUnavailable, subject, health.Warn, msg, "url", e.cfg.URL+"/metrics", "err", err.Error())
		} else {
			e.cfg.Logger.Warn(msg, "diagnostic_code", DiagMetricsUnavailable, "url", e.cfg.URL, "err", err)
		}
	case err == nil && was != nil:
		if b != nil {
			b.Clear(DiagMetricsUnavailable, subject, DiagRecovered, "the upstream's /metrics answers again")
		} else {
			e.cfg.Logger.Info("the upstream's /metrics answers again", "diagnostic_code", DiagRecovered, "url", e.cfg.URL)
		}
	}
}

// scrape reads the load gauges from /metrics; llama-server without
// --metrics answers 501, and then its /slots (is_processing per slot)
// gives the running count.
func (e *Engine) scrape(ctx context.Context) (EngineLoad, int, error) {
	body, status, err := e.get(ctx, "/metrics")
	if err != nil && e.cfg.API == APILlamaCpp && status == http.StatusNotImplemented {
		l, serr := e.scrapeSlots(ctx)
		if serr == nil {
			return l, http.StatusOK, nil
		}
		return EngineLoad{}, status, fmt.Errorf("%w (start llama-server with --metrics); /slots: %w", err, serr)
	}
	if err != nil {
		if status == http.StatusNotFound && e.cfg.API == APISGLang {
			err = fmt.Errorf("%w (start SGLang with --enable-metrics)", err)
		}
		return EngineLoad{}, status, err
	}
	g := gaugesFor(e.cfg.API)
	rank := ""
	if e.cfg.API == APISGLang && e.sglang.Ranks() > 1 {
		rank = strconv.Itoa(e.cfg.DPRank)
	}
	vals, err := parseGauges(body, rank, g)
	if err != nil {
		return EngineLoad{}, status, err
	}
	l := EngineLoad{KVUsage: -1}
	var found [3]bool
	for i, names := range [][]string{g.running, g.waiting, g.usage} {
		for _, n := range names {
			v, ok := vals[n]
			if !ok {
				continue
			}
			found[i] = true
			switch i {
			case 0:
				l.Running = clampCount(v)
			case 1:
				l.Waiting = clampCount(v)
			default:
				l.KVUsage = min(max(v, 0), 1)
			}
			break
		}
	}
	if !found[0] || !found[1] {
		return EngineLoad{}, status, fmt.Errorf("/metrics has no %s / %s", g.running[0], g.waiting[0])
	}
	return l, status, nil
}

func clampCount(v float64) int {
	if math.IsNaN(v) || v < 0 {
		return 0
	}
	return int(min(v, 1<<30))
}

// get GETs path, bounded; the status comes back with an error for non-200.
func (e *Engine) get(ctx context.Context, path string) (io.ReadCloser, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.cfg.URL+path, nil)
	if err != nil {
		return nil, 0, err
	}
	e.auth(req)
	resp, err := e.cfg.Client.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("GET %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		return nil, resp.StatusCode, fmt.Errorf("GET %s: status %d: %s", path, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return struct {
		io.Reader
		io.Closer
	}{io.LimitReader(resp.Body, maxMetricsBody), resp.Body}, http.StatusOK, nil
}

func (e *Engine) scrapeSlots(ctx context.Context) (EngineLoad, error) {
	body, _, err := e.get(ctx, "/slots")
	if err != nil {
		return EngineLoad{}, err
	}
	defer body.Close()
	var slots []struct {
		IsProcessing bool `json:"is_processing"`
	}
	if err := json.NewDecoder(body).Decode(&slots); err != nil {
		return EngineLoad{}, fmt.Errorf("/slots: %w", err)
	}
	l := EngineLoad{KVUsage: -1}
	for _, s := range slots {
		if s.IsProcessing {
			l.Running++
		}
	}
	return l, nil
}

// parseGauges reads Prometheus text exposition from body and sums, per
// wanted name, the samples whose dp_rank label is rank (any sample when
// rank is "" or the sample has no dp_rank). Lines are bounded by the
// reader; malformed sample lines are an error, comments are skipped.
func parseGauges(body io.ReadCloser, rank string, g loadGauges) (map[string]float64, error) {
	defer body.Close()
	want := map[string]bool{}
	for _, names := range [][]string{g.running, g.waiting, g.usage} {
		for _, n := range names {
			want[n] = true
		}
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		name, labels, v, err := parseSample(sc.Text())
		if err != nil {
			return nil, err
		}
		if name == "" || !want[name] {
			continue
		}
		if r, ok := labels["dp_rank"]; ok && rank != "" && r != rank {
			continue
		}
		out[name] += v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("/metrics: %w", err)
	}
	return out, nil
}

var errBadSample = errors.New("/metrics: malformed sample line")

// parseSample parses one exposition line: `name{k="v",...} value [ts]`;
// blank and # lines give name "".
func parseSample(line string) (name string, labels map[string]string, v float64, err error) {
	line = strings.TrimSpace(line)
	if line == "" || line[0] == '#' {
		return "", nil, 0, nil
	}
	i := strings.IndexAny(line, "{ \t")
	if i <= 0 {
		return "", nil, 0, fmt.Errorf("%w: %.80q", errBadSample, line)
	}
	name, rest := line[:i], line[i:]
	if rest[0] == '{' {
		labels = map[string]string{}
		j := 1
		for {
			for j < len(rest) && (rest[j] == ' ' || rest[j] == ',') {
				j++
			}
			if j >= len(rest) {
				return "", nil, 0, fmt.Errorf("%w: %.80q", errBadSample, line)
			}
			if rest[j] == '}' {
				j++
				break
			}
			eq := strings.IndexByte(rest[j:], '=')
			if eq <= 0 || j+eq+1 >= len(rest) || rest[j+eq+1] != '"' {
				return "", nil, 0, fmt.Errorf("%w: %.80q", errBadSample, line)
			}
			key := strings.TrimSpace(rest[j : j+eq])
			k := j + eq + 2
			var val strings.Builder
			for k < len(rest) && rest[k] != '"' {
				if rest[k] == '\\' && k+1 < len(rest) {
					k++
					switch rest[k] {
					case 'n':
						val.WriteByte('\n')
					default:
						val.WriteByte(rest[k])
					}
				} else {
					val.WriteByte(rest[k])
				}
				k++
			}
			if k >= len(rest) {
				return "", nil, 0, fmt.Errorf("%w: %.80q", errBadSample, line)
			}
			labels[key] = val.String()
			j = k + 1
		}
		rest = rest[j:]
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 || len(fields) > 2 {
		return "", nil, 0, fmt.Errorf("%w: %.80q", errBadSample, line)
	}
	v, err = strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return "", nil, 0, fmt.Errorf("%w: %.80q", errBadSample, line)
	}
	return name, labels, v, nil
}
