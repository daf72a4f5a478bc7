package e2e

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestServeDrainsOnSIGTERM(t *testing.T) {
	p := startTandem(t, "serve --http-addr 127.0.0.1:0 --workers 2 --drain-timeout 10s")
	resp, err := http.Post(p.url+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"tandem-mock","prompt":"Once upon a time","max_tokens":40,"ignore_eos":true,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil || !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
		t.Fatalf("in-flight stream did not finish: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit: %v (want status 0)", err)
		}
	case <-ctx.Done():
		t.Fatal("tandem did not exit after SIGTERM")
	}
}

// TestWorkerIsVLLMCompatible: `tandem worker --openai-addr` answers like a
// vLLM server: token-id prompts, cached tokens in usage on a re-sent
// prefix, vllm: metrics.
func TestWorkerIsVLLMCompatible(t *testing.T) {
	p := startTandem(t, "worker --engine mocker --openai-addr 127.0.0.1:0 --id w-test --speedup 50")
	prompt := `{"model":"tandem-mock","prompt":[` + strings.TrimSuffix(strings.Repeat("7,", 40), ",") + `],"max_tokens":4}`
	var cached []string
	for i := 0; i < 2; i++ {
		resp, err := http.Post(p.url+"/v1/completions", "application/json", strings.NewReader(prompt))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("X-Tandem-Worker") != "w-test" {
			t.Fatalf("status %d worker %q: %s", resp.StatusCode, resp.Header.Get("X-Tandem-Worker"), b)
		}
		m := regexp.MustCompile(`"cached_tokens":(\d+)`).FindSubmatch(b)
		if m == nil {
			t.Fatalf("no cached_tokens: %s", b)
		}
		cached = append(cached, string(m[1]))
	}
	if cached[0] != "0" || cached[1] != "32" {
		t.Fatalf("cached_tokens %v, want [0 32] (two full 16-token blocks of the 40-token prompt)", cached)
	}
	resp, err := http.Get(p.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, name := range []string{"vllm:num_requests_running", "vllm:prefix_cache_hits_total", "vllm:kv_cache_usage_perc", "vllm:time_to_first_token_seconds_bucket"} {
		if !strings.Contains(string(b), name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
}

// TestServeBannerPrefill: a disaggregated serve's banner lists its prefill
// workers and the router's cost function.
func TestServeBannerPrefill(t *testing.T) {
	p := startProc(t, "serve", "serve --http-addr 127.0.0.1:0 --prefill-workers 1 --decode-workers 1 --disagg auto --router-mode kv --instant",
		regexp.MustCompile(`prefill: (1 × mocker engine)`))
	if p.line != "1 × mocker engine" {
		t.Fatalf("banner prefill line %q", p.line)
	}
}
