package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain lets the test binary act as the tandem binary: the CLI tests
// start it as a real subprocess, so flags, the banner and signal handling
// are tested as a user meets them.
func TestMain(m *testing.M) {
	if os.Getenv("TANDEM_AS_MAIN") == "1" {
		os.Args = append([]string{"tandem"}, strings.Fields(os.Getenv("TANDEM_ARGS"))...)
		main()
		os.Exit(0)
	}
	cleanup, err := setUpSecure()
	if err != nil {
		fmt.Fprintln(os.Stderr, "secure test mode:", err)
		os.Exit(1)
	}
	code := m.Run()
	cleanup()
	os.Exit(code)
}

type proc struct {
	cmd   *exec.Cmd
	out   *bufio.Reader
	url   string
	model string // the banner's model line, when it has one
}

func startTandem(t *testing.T, args string) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "TANDEM_AS_MAIN=1", "TANDEM_ARGS="+secureArgs(args))
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	p := &proc{cmd: cmd, out: bufio.NewReader(stdout)}
	urlRE := regexp.MustCompile(`url:\s+(https?://\S+)/v1`)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		line, err := p.out.ReadString('\n')
		if err != nil {
			t.Fatalf("tandem exited before its banner: %v", err)
		}
		if m := urlRE.FindStringSubmatch(line); m != nil {
			p.url = m[1]
			if next, err := p.out.ReadString('\n'); err == nil {
				if name, ok := strings.CutPrefix(strings.TrimSpace(next), "model:"); ok {
					p.model = strings.TrimSpace(name)
				}
			}
			go func() { _, _ = io.Copy(io.Discard, p.out) }()
			return p
		}
	}
	t.Fatal("no banner within 30s")
	return nil
}

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
