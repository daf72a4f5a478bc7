package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tandemllm/tandem/internal/sharedfiles"
)

// TestMultiProcessDisagg runs disaggregated prefill across OS processes:
// a frontend, one prefill worker and two decode workers, each its own
// process with its own request plane and KV transfer node, found through
// file discovery. Under streaming load with long prompts every request is
// prefilled on the prefill worker and its KV pushed over TCP to the decode
// worker the router chose; then the prefill worker is SIGKILLed mid-load,
// and every request still succeeds (a leg cut by the kill falls back to
// local prefill, later requests find no prefill worker).
func TestMultiProcessDisagg(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 4 processes")
	}
	disc := "--discovery file --discovery-dir " + t.TempDir() + " --lease-ttl 2s"
	fe := startProc(t, "frontend", "frontend --http-addr 127.0.0.1:0 --router-mode kv --disagg always --max-retries 3 "+disc, frontendReady)
	url := fe.line
	eng := " --speedup 4 --kv-bytes-per-token 16384 --max-num-batched-tokens 256 --deregister-delay 0s "
	pre := startProc(t, "p1", "worker --id p1 --role prefill"+eng+disc, workerReady)
	for _, id := range []string{"d1", "d2"} {
		startProc(t, id, "worker --id "+id+" --role decode"+eng+disc, workerReady)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !slices.Equal(healthWorkers(t, url), []string{"d1", "d2"}) || metricSum(getBody(t, url+"/metrics"), "tandem_disagg_prefill_workers") != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("frontend sees %v and %v prefill workers", healthWorkers(t, url), metricSum(getBody(t, url+"/metrics"), "tandem_disagg_prefill_workers"))
		}
		time.Sleep(50 * time.Millisecond)
	}

	const clients = 8
	story := strings.Repeat("The archivist sorted the letters by the color of their ink and the weight of their paper. ", 25)
	stop := startLoad(url, clients, func(i, n int) (string, int) {
		// A long fresh part per request, after a prefix shared per
		// client: remote prefill moves only what the decode worker lacks.
		return fmt.Sprintf("client %d: %s request %d: %s", i%4, story, n, strings.Repeat(fmt.Sprintf("detail %d-%d ", i, n), 60)), 16
	})
	waitMetric := func(name string, min float64) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for metricSum(getBody(t, url+"/metrics"), name) < min {
			if time.Now().After(deadline) {
				t.Fatalf("%s stayed below %v:\n%s", name, min, grepLines(getBody(t, url+"/metrics"), "tandem_disagg"))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// Legs finish after their decisions are counted: wait for finished,
	// measured transfers.
	waitMetric("tandem_disagg_transfer_estimate_ratio_count", 20)
	before := getBody(t, url+"/metrics")
	if err := pre.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	for metricSum(getBody(t, url+"/metrics"), "tandem_disagg_prefill_workers") != 0 {
		if time.Since(killed) > 10*time.Second {
			t.Fatal("the killed prefill worker is still registered 10s after SIGKILL")
		}
		time.Sleep(20 * time.Millisecond)
	}
	left := time.Since(killed)
	waitMetric(`tandem_disagg_decisions_total{choice="local",reason="no_prefill_worker"}`, 5)
	outcomes := stop()

	var ok, failed int
	perWorker := map[string]int{}
	for _, o := range outcomes {
		perWorker[o.worker]++
		if o.err != nil || o.cut {
			failed++
			t.Errorf("request failed (worker %q, status %d, started %v, cut %v): %v", o.worker, o.status, o.started, o.cut, o.err)
			continue
		}
		ok++
	}
	m := getBody(t, url+"/metrics")
	t.Logf("%d requests: %d succeeded, %d failed; per decode worker %v; p1 left %v after SIGKILL", len(outcomes), ok, failed, perWorker, left.Round(time.Millisecond))
	t.Logf("before the kill:\n%s", grepLines(before, "tandem_disagg_decisions_total"))
	t.Logf("after:\n%s\n%s\n%s", grepLines(m, "tandem_disagg_decisions_total"), grepLines(m, "tandem_disagg_fallbacks_total"),
		grepLines(m, "tandem_disagg_transfer_estimate_ratio_count"))
	if metricSum(before, "tandem_disagg_transfer_estimate_ratio_count") < 20 {
		t.Errorf("too few measured transfers before the kill:\n%s", grepLines(before, "tandem_disagg"))
	}
	if perWorker["d1"] == 0 || perWorker["d2"] == 0 {
		t.Errorf("load did not reach both decode workers: %v", perWorker)
	}
	if !strings.Contains(getBody(t, url+"/health"), "disagg_no_prefill_worker") {
		t.Errorf("/health does not report the missing prefill worker:\n%s", getBody(t, url+"/health"))
	}
}

// TestMultiProcessDisaggNative: with the native engine the KV that crosses
// processes is the real thing, so the test is exactness: a greedy request
// served by a decode process from KV a prefill process computed and pushed
// gives exactly the text of an aggregated process.
func TestMultiProcessDisaggNative(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 5 processes")
	}
	dir, err := sharedfiles.Path("models", "stories260K")
	if err != nil {
		t.Skipf("no shared directory: %v", err)
	}
	golden, err := os.ReadFile(filepath.Join(dir, "golden-once-upon-a-time.txt"))
	if err != nil {
		t.Skipf("reference model absent: %v", err)
	}
	eng := " --engine native --model " + dir + " --threads 1 --deregister-delay 0s "
	start := func(name, mode string, workers ...string) string {
		disc := " --discovery file --discovery-dir " + t.TempDir() + " --lease-ttl 2s"
		url := startProc(t, name, "frontend --http-addr 127.0.0.1:0 --model "+dir+" --disagg "+mode+disc, frontendReady).line
		for _, w := range workers {
			id, role, _ := strings.Cut(w, ":")
			startProc(t, id, "worker --id "+id+" --role "+role+eng+disc, workerReady)
		}
		deadline := time.Now().Add(20 * time.Second)
		for len(healthWorkers(t, url)) != 1 || (mode == "always" && metricSum(getBody(t, url+"/metrics"), "tandem_disagg_prefill_workers") != 1) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: workers %v", name, healthWorkers(t, url))
			}
			time.Sleep(50 * time.Millisecond)
		}
		return url
	}
	disURL := start("fe-disagg", "always", "p1:prefill", "d1:decode")
	aggURL := start("fe-agg", "never", "a1:aggregated")
	// A prompt of several blocks: the story's opening, then greedy text.
	prompt := string(golden[:min(len(golden), 240)])
	complete := func(url string) string {
		c := completion(t, url, map[string]any{"model": "stories260K", "prompt": prompt, "max_tokens": 48, "temperature": 0})
		if url == disURL && c.cached < 16 {
			t.Fatalf("decode process reused %d of %d prompt tokens: the KV did not arrive", c.cached, c.prompt)
		}
		t.Logf("%s: %d prompt tokens, %d cached: %q", url, c.prompt, c.cached, c.text)
		return c.text
	}
	want, got := complete(aggURL), complete(disURL)
	m := getBody(t, disURL+"/metrics")
	if metricSum(m, `tandem_disagg_decisions_total{choice="remote",reason="mode_always"}`) != 1 || metricSum(m, "tandem_disagg_fallbacks_total") != 0 {
		t.Fatalf("not served disaggregated:\n%s", grepLines(m, "tandem_disagg"))
	}
	if got != want || want == "" {
		t.Fatalf("disaggregated across processes %q\n  aggregated %q", got, want)
	}
}

// TestMultiProcessVLLMProtocol: Tandem in front of vLLM servers, as OS
// processes. Two vLLM stand-ins (`tandem worker --openai-addr
// --kv-transfer-params`: vLLM's HTTP API and both roles of its P/D
// protocol) are fronted twice: by fleet workers (`tandem worker --engine
// upstream --role prefill|decode`) behind `tandem frontend`, and by
// `tandem serve --engine upstream --upstream-prefill`. Either way the
// router runs the prefill leg on the prefill server and the decode server
// answers with the prompt's blocks cached.
func TestMultiProcessVLLMProtocol(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 6 processes")
	}
	vllm := " --kv-transfer-params --speedup 100 --kv-bytes-per-token 2048 --kv-events off"
	p := startProc(t, "vllm-p", "worker --openai-addr 127.0.0.1:0"+vllm, frontendReady).line
	d := startProc(t, "vllm-d", "worker --openai-addr 127.0.0.1:0"+vllm, frontendReady).line
	disc := " --discovery file --discovery-dir " + t.TempDir() + " --lease-ttl 2s"
	fe := startProc(t, "frontend", "frontend --http-addr 127.0.0.1:0"+disc, frontendReady).line
	startProc(t, "up-p", "worker --id up-p --role prefill --engine upstream --upstream "+p+disc, workerReady)
	startProc(t, "up-d", "worker --id up-d --role decode --engine upstream --upstream "+d+disc, workerReady)
	sv := startProc(t, "serve", "serve --http-addr 127.0.0.1:0 --engine upstream --upstream "+d+" --upstream-prefill "+p, frontendReady).line
	deadline := time.Now().Add(20 * time.Second)
	for len(healthWorkers(t, fe)) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("frontend sees %v", healthWorkers(t, fe))
		}
		time.Sleep(50 * time.Millisecond)
	}
	ids := make([]int, 640)
	for i := range ids {
		ids[i] = 2000 + i*13%30000
	}
	for _, url := range []string{fe, sv} {
		ids[0]++ // a fresh prompt for each front
		c := completion(t, url, map[string]any{"model": "tandem-mock", "prompt": ids, "max_tokens": 5, "ignore_eos": true})
		if c.prompt != 640 || c.cached < 639/16*16 {
			t.Fatalf("%s: the decode server cached %d of %d prompt tokens: the prefill leg's KV did not reach it", url, c.cached, c.prompt)
		}
		if m := getBody(t, url+"/metrics"); metricSum(m, `tandem_vllmpd_prefill_legs_total{result="ok"}`) != 1 {
			t.Fatalf("%s: prefill legs:\n%s", url, grepLines(m, "tandem_vllmpd"))
		}
	}
}

// completed is what the tests read of a non-streamed completion.
type completed struct {
	text           string
	prompt, cached int
}

// completion posts body to url's /v1/completions and fails the test
// unless one non-empty choice comes back.
func completion(t *testing.T, url string, body map[string]any) completed {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var c struct {
		Choices []struct{ Text string } `json:"choices"`
		Usage   struct {
			Prompt  int `json:"prompt_tokens"`
			Details struct {
				Cached int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil || resp.StatusCode != 200 || len(c.Choices) != 1 || c.Choices[0].Text == "" {
		t.Fatalf("%s: status %d, %+v, %v", url, resp.StatusCode, c, err)
	}
	return completed{text: c.Choices[0].Text, prompt: c.Usage.Prompt, cached: c.Usage.Details.Cached}
}
