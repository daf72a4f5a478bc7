package doctor

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tandemllm/tandem/control/discovery"
)

// Verdict is a check's outcome.
type Verdict string

const (
	OK   Verdict = "ok"
	Warn Verdict = "warn"
	Fail Verdict = "fail"
)

// Check is one finding. ID is stable across releases (scripts match on
// it); Subject names the worker, model or link it is about.
type Check struct {
	ID       string   `json:"id"`
	Subject  string   `json:"subject,omitempty"`
	Verdict  Verdict  `json:"verdict"`
	Summary  string   `json:"summary"`
	Evidence []string `json:"evidence,omitempty"`
	Fix      string   `json:"fix,omitempty"`
}

// Check IDs.
const (
	IDFrontendHealth  = "frontend.health"
	IDFrontendMetrics = "frontend.metrics"
	IDDiagnostic      = "diagnostic"
	IDDiscoveryRead   = "discovery.read"
	IDWorkersExpected = "workers.expected"
	IDWorkersPaired   = "workers.paired"
	IDDiscoveryStale  = "discovery.stale"
	IDWorkerMetrics   = "worker.metrics"
	IDKVEvents        = "kv_events"
	IDBlockSize       = "kv.block_size"
	IDDisaggLayout    = "disagg.layout"
	IDDisaggLink      = "disagg.link"
	IDProbeCache      = "probe.prefix_cache"
	IDFrontendTTFT    = "frontend.ttft_added"
	IDLeftovers       = "host.leftovers"
	IDTierSpace       = "kv_tiers.space"
)

// Expectation is how many live workers a pool should have. Empty Model or
// Role match any.
type Expectation struct {
	Model string
	Role  discovery.Role
	N     int
}

func (e Expectation) String() string {
	s := e.Model
	if e.Role != "" {
		s += "/" + string(e.Role)
	}
	if s == "" {
		s = "all"
	}
	return s + "=" + strconv.Itoa(e.N)
}

// ParseExpectation parses --expect-workers: N, MODEL=N, MODEL/ROLE=N or
// /ROLE=N.
func ParseExpectation(s string) (Expectation, error) {
	var e Expectation
	pool, n, ok := strings.Cut(s, "=")
	if !ok {
		pool, n = "", s
	}
	v, err := strconv.Atoi(strings.TrimSpace(n))
	if err != nil || v < 0 || v > 1_000_000 {
		return e, fmt.Errorf("expected workers %q: want N, MODEL=N, MODEL/ROLE=N or /ROLE=N with 0 <= N <= 1000000", s)
	}
	e.N = v
	model, role, hasRole := strings.Cut(strings.TrimSpace(pool), "/")
	e.Model = model
	if hasRole {
		r, err := discovery.ParseRole(role)
		if err != nil || role == "" {
			return e, fmt.Errorf("expected workers %q: role %q (want aggregated, prefill or decode)", s, role)
		}
		e.Role = r
	}
	return e, nil
}

// Config is what the doctor looks at and how.
type Config struct {
	// FrontendURL is the frontend's base URL (http://host:port).
	FrontendURL string
	// APIKey is sent as a bearer token to the frontend (its /metrics may
	// need one: --protect-metrics).
	APIKey string
	// FrontendTLS trusts an HTTPS frontend's certificate (nil: system
	// roots).
	FrontendTLS *tls.Config
	// WorkerTLS, when set, is the cluster identity's client side: workers'
	// metrics ports then serve HTTPS and admit only monitor and frontend
	// certificates.
	WorkerTLS *tls.Config
	// Registry is the deployment's discovery backend (nil: records are
	// not read, and the checks that need them are not run).
	Registry discovery.Registry
	// DiscoveryFix is how to remove a record by hand on this backend, for
	// the stale-record fix ("" : a generic line).
	DiscoveryFix string
	// Expect lists the pools' expected worker counts.
	Expect []Expectation
	// Timeout bounds each network call (default 5 s).
	Timeout time.Duration
	// ReferencePromptTokens prices each prefill/decode link: the KV of a
	// prompt this long crossing it (default 1500, the seeds' prompt).
	ReferencePromptTokens int
	// MaxTransferTime is the link budget: moving the reference prompt's
	// KV must take less (default 500 ms).
	MaxTransferTime time.Duration

	// Probe sends a synthetic prompt twice through the frontend's
	// /v1/completions (--probe: it costs the deployment two requests, so
	// it is opt-in) to check prefix reuse and the TTFT the frontend adds.
	Probe bool
	// ProbeModel is the model probed ("": the first with a live worker).
	ProbeModel string
	// ProbeWords is the probe prompt's length in words (default 600:
	// dozens of blocks, a prefill long enough to time on any engine).
	ProbeWords int
	// ProbeTimeout bounds each probe request (default 60 s).
	ProbeTimeout time.Duration
	// MaxFrontendTTFT: frontend.ttft_added warns when the frontend adds
	// more than this to the engine's TTFT (default 50 ms).
	MaxFrontendTTFT time.Duration

	// SameHost runs the leftover-process check: "on", "off" or "auto"
	// (default: on when FrontendURL names a loopback address).
	SameHost string
	// ProcDir is where /proc is mounted (default /proc).
	ProcDir string
	// ProcessNames are the program names that are Tandem's (default
	// "tandem").
	ProcessNames []string

	// TierDisks are the KV disk tiers on this host to check for space
	// (--kv-tier-disk): kv_tiers.space for each.
	TierDisks []TierDisk
}

// Report is the doctor's whole answer.
type Report struct {
	Frontend string  `json:"frontend"`
	Checks   []Check `json:"checks"`
	OK       int     `json:"ok"`
	Warn     int     `json:"warn"`
	Fail     int     `json:"fail"`
}

// Failed reports whether any check failed.
func (r *Report) Failed() bool { return r.Fail > 0 }

// Size limits on what the doctor reads: a /health body is a few KiB, a
// worker's /metrics well under a MiB.
const (
	maxHealthBytes  = 4 << 20
	maxMetricsBytes = 16 << 20
)

// Run looks at the deployment and returns every check. It fails only on
// bad configuration; everything about the deployment is a check.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.ReferencePromptTokens <= 0 {
		cfg.ReferencePromptTokens = 1500
	}
	if cfg.ReferencePromptTokens > 10_000_000 {
		return nil, fmt.Errorf("doctor: reference prompt of %d tokens (limit 10000000)", cfg.ReferencePromptTokens)
	}
	if cfg.MaxTransferTime <= 0 {
		cfg.MaxTransferTime = 500 * time.Millisecond
	}
	if cfg.ProbeWords <= 0 {
		cfg.ProbeWords = 600
	}
	if cfg.ProbeWords > 100_000 {
		return nil, fmt.Errorf("doctor: probe of %d words (limit 100000)", cfg.ProbeWords)
	}
	if cfg.ProbeTimeout <= 0 {
		cfg.ProbeTimeout = 60 * time.Second
	}
	if cfg.MaxFrontendTTFT <= 0 {
		cfg.MaxFrontendTTFT = 50 * time.Millisecond
	}
	if cfg.ProcDir == "" {
		cfg.ProcDir = defaultProcDir
	}
	if len(cfg.ProcessNames) == 0 {
		cfg.ProcessNames = []string{"tandem"}
	}
	if _, err := sameHost(cfg.SameHost, cfg.FrontendURL); err != nil {
		return nil, err
	}
	cfg.FrontendURL = strings.TrimRight(cfg.FrontendURL, "/")
	if !strings.HasPrefix(cfg.FrontendURL, "http://") && !strings.HasPrefix(cfg.FrontendURL, "https://") {
		return nil, fmt.Errorf("doctor: frontend URL %q: want http:// or https://", cfg.FrontendURL)
	}
	d := &run{cfg: cfg, ctx: ctx,
		fe: &http.Client{Timeout: cfg.Timeout, Transport: transport(cfg.FrontendTLS)},
		wk: &http.Client{Timeout: cfg.Timeout, Transport: transport(cfg.WorkerTLS)},
	}
	d.frontend()
	d.discovery()
	d.workers()
	d.kvEvents()
	d.blockSizes()
	d.disagg()
	d.probe()
	d.leftovers()
	d.tierSpace()
	rep := &Report{Frontend: cfg.FrontendURL, Checks: d.checks}
	for _, c := range rep.Checks {
		switch c.Verdict {
		case OK:
			rep.OK++
		case Warn:
			rep.Warn++
		case Fail:
			rep.Fail++
		}
	}
	return rep, nil
}

func transport(tc *tls.Config) *http.Transport {
	// Its own transport, not a clone of http.DefaultTransport (which a
	// program may have replaced): no proxy, since the doctor talks to the
	// deployment itself, and bounded waits at every step.
	t := &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   5 * time.Second,
		ResponseHeaderTimeout: 10 * time.Second,
		IdleConnTimeout:       30 * time.Second,
		MaxIdleConnsPerHost:   2,
		ForceAttemptHTTP2:     true,
	}
	if tc != nil {
		t.TLSClientConfig = tc.Clone()
	}
	return t
}

// run is one doctor run's state.
type run struct {
	cfg    Config
	ctx    context.Context
	fe, wk *http.Client
	checks []Check

	health  *frontendHealth // nil: unreadable
	metrics families        // the frontend's
	records []discovery.Record
	readRec bool // records were read

	wmetrics map[string]families // worker id → its /metrics (absent: unread)
	live     map[string]bool     // worker id → its request plane accepts connections
}

func (d *run) add(c Check) { d.checks = append(d.checks, c) }

// get fetches url with a bounded read. The body is returned whatever the
// status (a 503 /health still says why).
func (d *run) get(c *http.Client, url string, limit int64, key string) ([]byte, int, error) {
	ctx, cancel := context.WithTimeout(d.ctx, d.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, 0, err
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, resp.StatusCode, fmt.Errorf("read %s: %w", url, err)
	}
	if int64(len(b)) > limit {
		return nil, resp.StatusCode, fmt.Errorf("%s: body over %d bytes", url, limit)
	}
	return b, resp.StatusCode, nil
}

// dialable reports whether addr accepts TCP connections within the
// timeout.
func (d *run) dialable(addr string) error {
	ctx, cancel := context.WithTimeout(d.ctx, min(d.cfg.Timeout, 2*time.Second))
	defer cancel()
	var nd net.Dialer
	c, err := nd.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return c.Close()
}

// frontendHealth is the part of the frontend's /health the doctor reads
// (httpapi's healthReport; unknown fields are ignored, so newer frontends
// still parse).
type frontendHealth struct {
	Status string `json:"status"`
	Models []struct {
		Name      string `json:"name"`
		Workers   int    `json:"live_workers"`
		Saturated bool   `json:"saturated"`
	} `json:"models"`
	Workers []struct {
		ID                    string   `json:"id"`
		Model                 string   `json:"model"`
		KVEvents              string   `json:"kv_events"`
		KVEventsApplied       uint64   `json:"kv_events_applied"`
		KVLastEventAgeSeconds *float64 `json:"kv_last_event_age_seconds"`
		Stuck                 bool     `json:"stuck"`
	} `json:"workers"`
	PrefillWorkers []struct {
		ID       string `json:"id"`
		Model    string `json:"model"`
		Protocol string `json:"kv_protocol"`
	} `json:"prefill_workers"`
	Diagnostics []diagnostic `json:"diagnostics"`
}

type diagnostic struct {
	Code     string `json:"code"`
	Severity string `json:"severity"`
	Subject  string `json:"subject"`
	Message  string `json:"message"`
}

// Text writes the report as a table: one line per check, then its
// evidence and fix indented under it when it is not ok.
func (r *Report) Text(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "tandem doctor: %s\n", r.Frontend)
	checks := append([]Check(nil), r.Checks...)
	// Failures first, so the fix is the first thing read.
	rank := map[Verdict]int{Fail: 0, Warn: 1, OK: 2}
	sort.SliceStable(checks, func(i, j int) bool { return rank[checks[i].Verdict] < rank[checks[j].Verdict] })
	for _, c := range checks {
		v := string(c.Verdict)
		if c.Verdict != OK {
			v = strings.ToUpper(v)
		}
		name := c.ID
		if c.Subject != "" {
			name += "[" + c.Subject + "]"
		}
		fmt.Fprintf(&b, "%-5s %-36s %s\n", v, name, c.Summary)
		if c.Verdict == OK {
			continue
		}
		for _, e := range c.Evidence {
			fmt.Fprintf(&b, "      evidence: %s\n", e)
		}
		if c.Fix != "" {
			fmt.Fprintf(&b, "      fix: %s\n", c.Fix)
		}
	}
	fmt.Fprintf(&b, "%d ok, %d warn, %d fail\n", r.OK, r.Warn, r.Fail)
	_, err := io.WriteString(w, b.String())
	return err
}

// JSON writes the report as one indented JSON object.
func (r *Report) JSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// Find returns the checks with id (and subject, when not empty).
func (r *Report) Find(id, subject string) []Check {
	var out []Check
	for _, c := range r.Checks {
		if c.ID == id && (subject == "" || c.Subject == subject) {
			out = append(out, c)
		}
	}
	return out
}
