package e2e

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tandemllm/tandem/authn"
)

// obsCluster is a disaggregated deployment with every protection the
// metrics ports have: the frontend's /metrics behind an API key
// (--protect-metrics), the workers' behind mutual TLS (role monitor).
type obsCluster struct {
	url       string
	dir, key  string
	workers   map[string]string // id → metrics host:port
	client    *http.Client      // presents the API key
	scraper   *tls.Config       // the monitor's certificate
	caPool    *x509.CertPool
	extraArgs string
}

func startObsCluster(t *testing.T, extra string, workerIDs ...string) *obsCluster {
	t.Helper()
	dir := t.TempDir()
	hosts := []string{"localhost", "127.0.0.1"}
	if _, err := authn.Init(dir, 1, len(workerIDs), hosts, 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	ca, err := authn.LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	is, err := ca.Issue("prometheus", authn.RoleMonitor, hosts, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := authn.WritePair(dir, "prometheus", is); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, "api-keys")
	if err := os.WriteFile(key, []byte(testAPIKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	mtls := func(name string) string {
		return fmt.Sprintf(" --mtls-ca %s --mtls-cert %s --mtls-key %s", filepath.Join(dir, "ca.crt"),
			filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key"))
	}
	disc := " --discovery file --discovery-dir " + filepath.Join(dir, "disc") + " --lease-ttl 2s"
	fe := startProc(t, "frontend", "frontend --http-addr 127.0.0.1:0 --router-mode kv --disagg always --api-key-file "+key+
		" --protect-metrics"+mtls("frontend-1")+disc+extra, frontendReady)
	c := &obsCluster{url: fe.line, dir: dir, key: key, workers: map[string]string{}}
	eng := " --speedup 4 --kv-bytes-per-token 16384 --max-num-batched-tokens 256 --deregister-delay 0s "
	for i, id := range workerIDs {
		role := "decode"
		if strings.HasPrefix(id, "p") {
			role = "prefill"
		}
		m := freeAddr(t)
		c.workers[id] = m
		startProc(t, id, "worker --id "+id+" --role "+role+" --metrics-addr "+m+eng+mtls(fmt.Sprintf("worker-%d", i+1))+disc+extra, workerReady)
	}
	pem, _ := os.ReadFile(filepath.Join(dir, "ca.crt"))
	c.caPool = x509.NewCertPool()
	c.caPool.AppendCertsFromPEM(pem)
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "prometheus.crt"), filepath.Join(dir, "prometheus.key"))
	if err != nil {
		t.Fatal(err)
	}
	c.scraper = &tls.Config{RootCAs: c.caPool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	c.client = &http.Client{Timeout: 60 * time.Second, Transport: keyed{&http.Transport{}}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := c.client.Get(c.url + "/metrics")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if metricSum(string(b), "tandem_disagg_prefill_workers") >= 1 && len(healthWorkers(t, c.url)) == len(workerIDs)-1 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the deployment did not come up: workers %v", healthWorkers(t, c.url))
		}
		time.Sleep(100 * time.Millisecond)
	}
	return c
}

// post sends one completion with a long prompt sharing a prefix per
// client, so that prefill is remote and the cache has something to hit.
func (c *obsCluster) post(t *testing.T, client, n int, header http.Header) error {
	story := strings.Repeat("The archivist sorted the letters by the color of their ink. ", 20)
	body, _ := json.Marshal(map[string]any{"model": "tandem-mock", "max_tokens": 8, "stream": n%2 == 0,
		"prompt": fmt.Sprintf("client %d: %s request %d: %s", client%3, story, n, strings.Repeat(fmt.Sprintf("detail %d-%d ", client, n), 30))})
	req, _ := http.NewRequest(http.MethodPost, c.url+"/v1/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	return nil
}

func (c *obsCluster) scrapeWorker(t *testing.T, id string) string {
	t.Helper()
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: c.scraper}}
	resp, err := hc.Get("https://" + c.workers[id] + "/metrics")
	if err != nil {
		t.Fatalf("scraping %s with the monitor certificate: %v", id, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func repoFile(t *testing.T, parts ...string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join(append([]string{".."}, parts...)...))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestObservabilityPrometheus scrapes a disaggregated deployment (frontend,
// prefill worker, two decode workers) with Debian's real Prometheus over
// the metrics ports' own authentication, checks every /metrics with
// `promtool check metrics`, loads the alert rules into it, and after a
// load run evaluates every Grafana panel's PromQL: each must return data.
func TestObservabilityPrometheus(t *testing.T) {
	longParallel(t)
	if secure.on {
		t.Skip("sets up its own protections")
	}
	prom, err1 := exec.LookPath("prometheus")
	promtool, err2 := exec.LookPath("promtool")
	if err1 != nil || err2 != nil {
		t.Skip("prometheus/promtool not installed (Debian package prometheus)")
	}
	c := startObsCluster(t, "", "p1", "d1", "d2")

	// Strangers are refused on both kinds of metrics port.
	if resp, err := http.Get(c.url + "/metrics"); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("frontend /metrics without the key: %v %v, want 401", resp, err)
	}
	stranger := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: c.caPool}}}
	if resp, err := stranger.Get("https://" + c.workers["d1"] + "/metrics"); err == nil {
		resp.Body.Close()
		t.Errorf("a worker's /metrics answered a client without a certificate: %d", resp.StatusCode)
	}

	// Prometheus: loopback only, scraping every second.
	promAddr := freeAddr(t)
	var workers []string
	for _, m := range c.workers {
		workers = append(workers, fmt.Sprintf("%q", m))
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: tandem-frontend
    authorization: {type: Bearer, credentials_file: %q}
    static_configs: [{targets: [%q]}]
  - job_name: tandem-worker
    scheme: https
    tls_config: {ca_file: %q, cert_file: %q, key_file: %q}
    static_configs: [{targets: [%s]}]
`, repoFile(t, "deploy", "prometheus", "tandem-rules.yml"), c.key, strings.TrimPrefix(c.url, "http://"),
		filepath.Join(c.dir, "ca.crt"), filepath.Join(c.dir, "prometheus.crt"), filepath.Join(c.dir, "prometheus.key"), strings.Join(workers, ", "))
	cfgPath := filepath.Join(c.dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "config", cfgPath).CombinedOutput(); err != nil {
		t.Fatalf("promtool check config: %v\n%s", err, out)
	}
	// The real key file must hold only the key: Prometheus sends its
	// content as the bearer token.
	pcmd := exec.Command(prom, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(c.dir, "tsdb"),
		"--web.listen-address="+promAddr, "--log.level=warn")
	var plog bytes.Buffer
	pcmd.Stdout, pcmd.Stderr = &plog, &plog
	if err := pcmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = pcmd.Process.Kill()
		_ = pcmd.Wait()
		if t.Failed() {
			t.Logf("prometheus log:\n%s", plog.String())
		}
	})
	api := "http://" + promAddr
	query := func(q string) (int, error) {
		resp, err := http.Get(api + "/api/v1/query?query=" + url.QueryEscape(q))
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		var r struct {
			Status string
			Error  string
			Data   struct{ Result []json.RawMessage }
		}
		if err := json.NewDecoder(io.LimitReader(resp.Body, 8<<20)).Decode(&r); err != nil {
			return 0, err
		}
		if r.Status != "success" {
			return 0, fmt.Errorf("%s", r.Error)
		}
		return len(r.Data.Result), nil
	}
	waitFor := func(what string, d time.Duration, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(d)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %v", what, d)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	waitFor("every target up", 30*time.Second, func() bool { n, _ := query(`up == 1`); return n == 1+len(c.workers) })

	// Load: shared prefixes (cache hits), remote prefill, KV transfers.
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []error
	stop := time.Now().Add(12 * time.Second)
	for i := range 4 {
		wg.Go(func() {
			for n := 0; time.Now().Before(stop); n++ {
				if err := c.post(t, i, n, nil); err != nil {
					mu.Lock()
					failures = append(failures, err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d requests failed, first: %v", len(failures), failures[0])
	}

	// promtool check metrics on every /metrics Tandem serves: only the
	// vLLM-compatible vllm:* names (colons, as vLLM spells them) may be
	// flagged.
	bodies := map[string]string{}
	resp, err := c.client.Get(c.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	bodies["frontend"] = string(b)
	for id := range c.workers {
		bodies[id] = c.scrapeWorker(t, id)
	}
	for name, body := range bodies {
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = strings.NewReader(body)
		out, _ := cmd.CombinedOutput()
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if line != "" && !strings.HasPrefix(line, "vllm:") {
				t.Errorf("promtool check metrics (%s): %s", name, line)
			}
		}
	}

	// Rules loaded and evaluated without error.
	waitFor("rules evaluated", 10*time.Second, func() bool {
		resp, err := http.Get(api + "/api/v1/rules")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var r struct {
			Data struct {
				Groups []struct {
					Rules []struct{ Name, Health, LastError string }
				}
			}
		}
		if json.NewDecoder(resp.Body).Decode(&r) != nil || len(r.Data.Groups) == 0 {
			return false
		}
		for _, g := range r.Data.Groups {
			for _, rule := range g.Rules {
				if rule.Health != "ok" {
					if rule.LastError != "" {
						t.Fatalf("rule %s: %s", rule.Name, rule.LastError)
					}
					return false
				}
			}
		}
		return true
	})

	// Every dashboard panel's PromQL returns data.
	files, _ := filepath.Glob(repoFile(t, "deploy", "grafana", "dashboards", "*.json"))
	if len(files) < 4 {
		t.Fatalf("dashboards: %v", files)
	}
	total := 0
	for _, f := range files {
		for _, p := range dashboardQueries(t, f) {
			total++
			expr := strings.ReplaceAll(p.expr, "$__rate_interval", "15s")
			var n int
			var qerr error
			deadline := time.Now().Add(20 * time.Second) // a loaded machine may scrape late
			for {
				n, qerr = query(expr)
				if qerr != nil || n > 0 || time.Now().After(deadline) {
					break
				}
				time.Sleep(250 * time.Millisecond)
			}
			if qerr != nil || n == 0 {
				t.Errorf("%s / %q: %q returned no data (err %v)", filepath.Base(f), p.title, expr, qerr)
			}
		}
	}
	t.Logf("%d panel queries over %d dashboards returned data", total, len(files))
}

type panelQuery struct{ title, expr string }

// dashboardQueries extracts every target's PromQL from a Grafana
// dashboard (panels, and panels inside rows).
func dashboardQueries(t *testing.T, path string) []panelQuery {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string
		Targets []struct{ Expr string }
		Panels  []json.RawMessage
	}
	var d struct{ Panels []json.RawMessage }
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []panelQuery
	var walk func([]json.RawMessage)
	walk = func(ps []json.RawMessage) {
		for _, raw := range ps {
			var p panel
			if err := json.Unmarshal(raw, &p); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			for _, tg := range p.Targets {
				if tg.Expr != "" {
					out = append(out, panelQuery{p.Title, tg.Expr})
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}
