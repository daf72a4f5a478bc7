package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBenchSeedWorkloadFamilies runs the four workload families of a
// hands-on report on NVIDIA Dynamo, one command each, against a started
// `tandem serve` (sizes cut down so the test takes seconds).
func TestBenchSeedWorkloadFamilies(t *testing.T) {
	serveArgs := "--workers 2 --router-mode kv --timing qwen3-0.6b --speedup 20"
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"concurrency sweep at fixed lengths", []string{"sweep", "--sweep", "concurrency=1,4", "--input", "256", "--output", "16", "--requests", "8"},
			[]string{"sweep of concurrency", "goodput tok/s (SLO ttft=2000ms,itl=100ms)", "cost per M good tokens", "server: prefix-cache hits / queries"}},
		{"five-turn conversations", []string{"multi-turn", "--turns", "5", "--first-input", "200", "--input", "20", "--output", "8", "--requests", "3"},
			[]string{"generated overlap", "cached tokens", "SLO met"}},
		{"length distributions", []string{"sweep", "--sweep", "input=uniform:100,300;zipf:1.2,50,600;lognormal:200,0.6", "--output", "8", "--requests", "6", "--concurrency", "2"},
			[]string{"sweep of input", "zipf:1.2,50,600"}},
		{"shared-prefix sweep", []string{"sweep", "--sweep", "prefix-ratio=0,0.5,1", "--input", "300", "--output", "8", "--requests", "6", "--concurrency", "1"},
			[]string{"sweep of prefix-ratio", "overlap"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			args := append([]string{"--log-level", "error", "bench"}, tc.args...)
			args = append(args, "--serve", serveArgs, "--slo", "ttft=2s,itl=100ms", "--cost-per-hour", "2", "--scrape-every", "200ms",
				"--progress", "off", "--out", dir)
			out, err := runCLI(t, args...)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if strings.Contains(out, "not scraped") {
				t.Errorf("a started Tandem's /metrics was not scraped:\n%s", out)
			}
		})
	}
}

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestBenchExperimentEndToEnd is the CI's experiment: --disagg never
// against auto at equal workers, started servers, two interleaved trials,
// intervals and the break-even verdict, in a few seconds.
func TestBenchExperimentEndToEnd(t *testing.T) {
	file := writeFile(t, "exp.yaml", `
name: ci-disagg
base:
  serve: {prefill-workers: "1", decode-workers: "1", router-mode: kv, timing: qwen3-0.6b, speedup: "20"}
variable: disagg
values: [never, auto]
workload: {input: "uniform:200,1200", output: "8", concurrency: 2, requests: 8}
slo: ttft=2s,itl=100ms
trials: 2
cost_per_worker_hour: 1.25
`)
	dir := t.TempDir()
	out, err := runCLI(t, "--log-level", "error", "bench", "experiment", file, "--scrape-every", "200ms", "--progress", "off", "--out", dir)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, w := range []string{"experiment ci-disagg: variable disagg, 2 trial(s)", "goodput_tok_per_s", "±", "disagg=auto vs disagg=never:",
		"{kv_capacity_tokens=", "workers=2}", "server: disagg decisions"} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	var sum struct {
		Experiment struct {
			Variants []struct {
				Name        string  `json:"name"`
				CostPerHour float64 `json:"cost_per_hour"`
				Figures     map[string]struct {
					N int `json:"n"`
				} `json:"figures"`
			} `json:"variants"`
			Verdicts []struct {
				Outcome   string  `json:"outcome"`
				CostRatio float64 `json:"cost_ratio"`
			} `json:"verdicts"`
		} `json:"experiment"`
	}
	if err := json.Unmarshal(b, &sum); err != nil {
		t.Fatal(err)
	}
	x := sum.Experiment
	if len(x.Variants) != 2 || x.Variants[0].CostPerHour != 2.5 || x.Variants[1].Figures["goodput_tok_per_s"].N != 2 {
		t.Fatalf("experiment in summary.json: %+v", x)
	}
	if len(x.Verdicts) != 1 || x.Verdicts[0].CostRatio != 1 || x.Verdicts[0].Outcome == "" {
		t.Fatalf("verdict: %+v", x.Verdicts)
	}
	// The two trials of auto and never were run interleaved, each against
	// a fresh server: the auto one moved KV.
	if _, ok := x.Variants[1].Figures["server_disagg_remote"]; !ok {
		t.Errorf("auto has no disagg decisions from /metrics: %+v", x.Variants[1].Figures)
	}
	html, _ := os.ReadFile(filepath.Join(dir, "report.html"))
	for _, w := range []string{`id="verdict"`, `id="chart-trials"`} {
		if !strings.Contains(string(html), w) {
			t.Errorf("report.html lacks %s", w)
		}
	}
}

func TestBenchExperimentRefusals(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"two variables", "variable: [disagg, router-mode]\nvalues: [never, auto]\n", "changes one"},
		{"a variant changing a second flag", "variable: disagg\nvariants:\n- value: never\n- value: auto\n  serve: {workers: '3'}\n", "changes workers as well as disagg"},
		{"an unknown serve flag", "variable: no-such-flag\nvalues: [a, b]\n", "unknown flag"},
		{"a typo in the file", "variable: disagg\nvalues: [never, auto]\ntrails: 2\n", "trails"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runCLI(t, "bench", "experiment", writeFile(t, "x.yaml", tc.yaml), "--progress", "off")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q\n%s", err, tc.want, out)
			}
		})
	}
}

// plainServer is an OpenAI-compatible server with none of Tandem's or
// vLLM's extensions: streams without a usage chunk (as OpenAI's API does
// unless stream_options.include_usage is set, and as servers that ignore
// the option do), no cached_tokens, no worker header, no /metrics.
func plainServer(t *testing.T) string {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"plain","object":"model"}]}`)
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			MaxTokens int  `json:"max_tokens"`
			Stream    bool `json:"stream"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || !body.Stream {
			http.Error(w, `{"error":{"message":"stream only"}}`, 400)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for k := range max(body.MaxTokens, 1) {
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" w%d\"}}]}\n\n", k)
			w.(http.Flusher).Flush()
			time.Sleep(time.Millisecond)
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	})
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s.URL
}

// startVLLMWorker runs `tandem worker --openai-addr 127.0.0.1:0` (Tandem's
// vLLM-compatible mode) in process and returns its base URL.
func startVLLMWorker(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	root := newRootCmd()
	root.SetOut(pw)
	root.SetErr(io.Discard)
	root.SetArgs([]string{"--log-level", "error", "worker", "--openai-addr", "127.0.0.1:0", "--timing", "qwen3-0.6b", "--speedup", "20"})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = root.ExecuteContext(ctx)
		pw.Close()
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "url:"); ok {
				urls <- strings.TrimSuffix(strings.TrimSpace(u), "/v1")
			}
		}
	}()
	select {
	case u := <-urls:
		return u
	case <-time.After(20 * time.Second):
		t.Fatal("the worker printed no url")
		return ""
	}
}

// TestBenchAgainstVLLMWorkerAndPlainServer measures Tandem's
// vLLM-compatible worker and a plain OpenAI server in one A/B run, saves
// each alone, and compares the saved runs: nothing in bench needs
// Tandem's extensions, and what a server does not report is said so.
func TestBenchAgainstVLLMWorkerAndPlainServer(t *testing.T) {
	worker, plain := startVLLMWorker(t), plainServer(t)
	common := []string{"--requests", "6", "--input", "40", "--output", "6", "--honor-eos", "--progress", "off", "--slo", "ttft=5s", "--scrape-every", "100ms"}
	out, err := runCLI(t, append([]string{"bench", "synthetic", "--url", worker, "--label", "worker", "--url", plain, "--label", "plain"}, common...)...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, w := range []string{"6/6", "not reported", "not scraped", "plain/worker"} {
		if !strings.Contains(out, w) {
			t.Errorf("A/B output lacks %q:\n%s", w, out)
		}
	}
	dirs := []string{t.TempDir(), t.TempDir()}
	for i, u := range []string{worker, plain} {
		if out, err := runCLI(t, append([]string{"bench", "synthetic", "--url", u, "--out", dirs[i]}, common...)...); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	out, err = runCLI(t, "bench", "compare", dirs[0], dirs[1], "--cost-per-hour", "1,1")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, w := range []string{"experiment compare", "goodput_tok_per_s", "break-even", "(1 trial)"} {
		if !strings.Contains(out, w) {
			t.Errorf("compare output lacks %q:\n%s", w, out)
		}
	}
	// The compared reports' own tables only: no empty summary table first.
	if _, rest, _ := strings.Cut(strings.TrimSpace(out), "\n"); !strings.HasPrefix(strings.TrimSpace(rest), "experiment compare") {
		t.Errorf("compare output does not go from its title to the comparison:\n%s", out)
	}
}

// TestServeResources checks what an experiment counts as a started
// deployment's resources.
func TestServeResources(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		workers float64
	}{
		{nil, 2},
		{[]string{"--workers=3"}, 3},
		{[]string{"--prefill-workers=1", "--decode-workers=2"}, 3},
		{[]string{"--prefill-workers=1", "--workers=2"}, 3}, // decode workers default to --workers
		{[]string{"--prefill-workers=1", "--decode-workers=1", "--disagg=never"}, 2},
	} {
		s, err := parseServe(tc.args)
		if err != nil {
			t.Fatal(err)
		}
		if r := s.Resources(); r["workers"] != tc.workers || r["kv_capacity_tokens"] <= 0 {
			t.Errorf("%v: resources %v, want %v workers", tc.args, r, tc.workers)
		}
		if s.Config.HTTPAddr != "127.0.0.1:0" {
			t.Errorf("%v: a started server listens on %s, want a fresh loopback port", tc.args, s.Config.HTTPAddr)
		}
	}
	if _, err := parseServe([]string{"--no-such-flag"}); err == nil {
		t.Error("an unknown flag was accepted")
	}
	if _, err := parseServe([]string{"stray"}); err == nil {
		t.Error("a stray argument was accepted")
	}
}
