package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tandemllm/tandem/control/planner/local"
)

// TestLocalSupervisorDrainsWorker: the planner's local actuator starts a
// real `tandem worker` process and, scaling to zero while a stream runs
// on it, SIGTERMs it and waits: the stream finishes whole and the worker
// exits cleanly.
func TestLocalSupervisorDrainsWorker(t *testing.T) {
	skipShort(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	sup := &local.Supervisor{Binary: tandemBin, StopTimeout: time.Minute, Output: os.Stderr,
		Pools: map[string]local.Pool{"agg": {Args: strings.Fields("worker --engine mocker --openai-addr " + addr + " --id {id} --drain-timeout 30s")}}}
	t.Cleanup(func() { _ = sup.Close(context.Background()) })
	ctx := context.Background()
	if err := sup.Scale(ctx, "agg", 1); err != nil {
		t.Fatal(err)
	}
	url := "http://" + addr
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(url + "/v1/models")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker never served: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	resp, err := http.Post(url+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"tandem-mock","prompt":"Once upon a time","max_tokens":150,"ignore_eos":true,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 64)
	if _, err := resp.Body.Read(buf); err != nil { // the stream is under way
		t.Fatal(err)
	}
	scaled := make(chan error, 1)
	go func() { scaled <- sup.Scale(ctx, "agg", 0) }()
	body, err := io.ReadAll(resp.Body)
	if err != nil || !strings.HasSuffix(string(body), "data: [DONE]\n\n") || !strings.Contains(string(body), `"finish_reason":"length"`) {
		t.Fatalf("the stream in flight on the removed worker did not finish: %v\n%s", err, tailBytes(body, 500))
	}
	if err := <-scaled; err != nil {
		t.Fatalf("scale to zero: %v (the worker should drain and exit 0)", err)
	}
	if n, _ := sup.Replicas(ctx); n["agg"] != 0 {
		t.Fatalf("replicas %v after scaling to zero", n)
	}
}

// TestServeAutoscaleToZeroAndBack: `tandem serve --autoscale` with a
// minimum of zero shrinks an idle pool to no worker, keeps the model
// listed, answers 503 with Retry-After, sees the demand in its own
// metrics and grows a worker that then serves.
func TestServeAutoscaleToZeroAndBack(t *testing.T) {
	if secure.on {
		t.Skip("plain HTTP test")
	}
	p := startTandem(t, "serve --http-addr 127.0.0.1:0 --workers 1 --autoscale --pool agg=aggregated:0:2 --interval 300ms --startup 300ms --down-cooldown 0 --planner-listen 127.0.0.1:0")
	live := func() int {
		resp, err := http.Get(p.url + "/health")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var h struct {
			Models []struct {
				Workers int `json:"live_workers"`
			}
		}
		if err := json.NewDecoder(resp.Body).Decode(&h); err != nil || len(h.Models) != 1 {
			t.Fatalf("/health: %v %+v", err, h)
		}
		return h.Models[0].Workers
	}
	deadline := time.Now().Add(60 * time.Second)
	for live() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the idle pool never scaled to zero")
		}
		time.Sleep(100 * time.Millisecond)
	}
	resp, err := http.Get(p.url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"id":"tandem-mock"`) {
		t.Fatalf("/v1/models with no worker: %s", b)
	}
	saw503 := false
	for {
		resp, err := http.Post(p.url+"/v1/completions", "application/json", strings.NewReader(`{"model":"tandem-mock","prompt":"hi","max_tokens":2}`))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 {
			break
		}
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("with no worker: %d Retry-After %q: %s", resp.StatusCode, resp.Header.Get("Retry-After"), b)
		}
		saw503 = true
		if time.Now().After(deadline.Add(30 * time.Second)) {
			t.Fatal("the planner never grew a worker for the demand")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !saw503 {
		t.Fatal("the first request after scaling to zero succeeded: nothing was scaled")
	}
	// The planner's decisions are on the serve process's own /metrics.
	resp, err = http.Get(p.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `tandem_planner_decisions_total{pool="agg",reason="scale_up"}`) {
		t.Fatal("serve's /metrics has no planner scale_up decision")
	}
}

// TestPlannerDryRunAgainstLiveServe: `tandem planner --dry-run` against a
// running `tandem serve` reads its metrics, decides, prints what it would
// do, and starts no worker.
func TestPlannerDryRunAgainstLiveServe(t *testing.T) {
	if secure.on {
		t.Skip("plain HTTP test")
	}
	s := startTandem(t, "serve --http-addr 127.0.0.1:0 --workers 1")
	pl := startProc(t, "planner", "planner --frontend-metrics "+s.url+"/metrics --actuator local --local-worker agg=worker_--never-started "+
		"--pool agg=aggregated:1:4 --interval 200ms --dry-run --planner-listen 127.0.0.1:0",
		regexp.MustCompile(`dry-run: would scale pool agg to (\d+)`))
	if pl.line != "1" {
		t.Fatalf("dry run would scale to %s, want 1 (the local pool is empty, its min is 1)", pl.line)
	}
	// Nothing was started: the supervisor's log names no worker.
	time.Sleep(500 * time.Millisecond)
	b, _ := os.ReadFile(pl.log)
	if strings.Contains(string(b), "worker started") {
		t.Fatalf("the dry run started a worker:\n%s", b)
	}
}
