package main

import (
	"bufio"
	"context"
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
	os.Exit(m.Run())
}

type proc struct {
	cmd *exec.Cmd
	out *bufio.Reader
	url string
}

func startTandem(t *testing.T, args string) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "TANDEM_AS_MAIN=1", "TANDEM_ARGS="+args)
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	p := &proc{cmd: cmd, out: bufio.NewReader(stdout)}
	urlRE := regexp.MustCompile(`url:\s+(http://\S+)/v1`)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		line, err := p.out.ReadString('\n')
		if err != nil {
			t.Fatalf("tandem exited before its banner: %v", err)
		}
		if m := urlRE.FindStringSubmatch(line); m != nil {
			p.url = m[1]
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
