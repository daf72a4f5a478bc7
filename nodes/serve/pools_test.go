package serve

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/tokenizer"
)

// streamOnce runs one streamed completion and fails unless it is a 200
// that ends with a finish reason and [DONE].
func streamOnce(url string, maxTokens int) error {
	body := fmt.Sprintf(`{"model":%q,"prompt":"drain me","max_tokens":%d,"ignore_eos":true,"stream":true}`, tokenizer.DefaultModelName, maxTokens)
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("status %s: %s", resp.Status, b)
	}
	sc := bufio.NewScanner(resp.Body)
	finished, done := false, false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.Contains(line, `"error"`):
			return fmt.Errorf("error event: %s", line)
		case strings.Contains(line, `"finish_reason":"length"`):
			finished = true
		case line == "data: [DONE]":
			done = true
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if !finished || !done {
		return fmt.Errorf("stream ended early (finish %v, done %v)", finished, done)
	}
	return nil
}

// activeOn reads the router's in-flight gauge of one worker.
func activeOn(t *testing.T, sys *System, id string) float64 {
	t.Helper()
	// The test's mockers share one engine label, a duplicate Gather
	// reports; it still returns every family it could.
	fams, _ := sys.Registry.Gather()
	for _, f := range fams {
		if f.GetName() != "tandem_router_worker_active_requests" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "worker" && l.GetValue() == id {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return 0
}

// TestScaleDownDrainsUnderLoad removes workers while streams run on them:
// every request, those in flight on the removed workers included,
// finishes whole.
func TestScaleDownDrainsUnderLoad(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Workers = 3
	cfg.DrainTimeout = time.Minute
	sys := startTest(t, cfg, slowTestEngines)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		failures []error
		ok       int
	)
	for c := 0; c < 9; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				err := streamOnce(sys.URL(), 40) // ~250 ms of decode each
				mu.Lock()
				if err != nil {
					failures = append(failures, err)
				} else {
					ok++
				}
				mu.Unlock()
			}
		}()
	}
	for _, victim := range []string{"worker-2", "worker-1"} {
		// Wait until the worker to be removed holds streams.
		deadline := time.Now().Add(30 * time.Second)
		for activeOn(t, sys, victim) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%s never got a stream", victim)
			}
			time.Sleep(5 * time.Millisecond)
		}
		before := sys.PoolSize()
		if err := sys.ScalePool(context.Background(), before-1); err != nil {
			t.Fatal(err)
		}
		if got := sys.PoolWorkers(); len(got) != before-1 || got[len(got)-1] == victim {
			t.Fatalf("after removing %s the pool is %v", victim, got)
		}
	}
	time.Sleep(300 * time.Millisecond) // more requests on the one left
	cancel()
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d of %d requests failed while scaling down, first: %v", len(failures), len(failures)+ok, failures[0])
	}
	if ok < 9 {
		t.Fatalf("only %d requests ran", ok)
	}
	// Growing again routes to a fresh worker.
	if err := sys.ScalePool(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	if err := streamOnce(sys.URL(), 4); err != nil {
		t.Fatal(err)
	}
	if got := sys.PoolWorkers(); len(got) != 2 || got[1] != "worker-3" {
		t.Fatalf("pool after growing %v, want [worker-0 worker-3]", got)
	}
}

// gatedEngines builds the first worker at once and every later one only
// when the test opens the gate: a worker that takes time to start.
func gatedEngines(gate <-chan struct{}) func(*tokenizer.Model) EngineFactory {
	return func(model *tokenizer.Model) EngineFactory {
		return func(i int) (engine.Engine, error) {
			if i > 0 {
				select {
				case <-gate:
				case <-time.After(time.Minute):
					return nil, errors.New("test gate never opened")
				}
			}
			return newInstantEngine(model)
		}
	}
}

// TestScaleToZeroKeepsModelAdvertised: with no worker the model is still
// listed and requests get 503 with Retry-After, also while a worker is
// starting; once it has started they succeed.
func TestScaleToZeroKeepsModelAdvertised(t *testing.T) {
	gate := make(chan struct{})
	cfg := DefaultConfig()
	cfg.Workers = 1
	sys := startTest(t, cfg, gatedEngines(gate))
	if err := sys.ScalePool(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	if n := sys.PoolSize(); n != 0 {
		t.Fatalf("pool size %d after scaling to zero", n)
	}
	check503 := func(when string) {
		t.Helper()
		resp, err := http.Post(sys.URL()+"/v1/completions", "application/json",
			strings.NewReader(fmt.Sprintf(`{"model":%q,"prompt":"hi","max_tokens":2}`, tokenizer.DefaultModelName)))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("%s: %s Retry-After %q: %s; want 503 with Retry-After", when, resp.Status, resp.Header.Get("Retry-After"), b)
		}
	}
	resp, err := http.Get(sys.URL() + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"id":"`+tokenizer.DefaultModelName+`"`) {
		t.Fatalf("/v1/models with no worker: %s", b)
	}
	check503("no worker")

	scaled := make(chan error, 1)
	go func() { scaled <- sys.ScalePool(context.Background(), 1) }()
	check503("while a worker starts")
	close(gate)
	select {
	case err := <-scaled:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("scaling up never finished")
	}
	resp, err = http.Post(sys.URL()+"/v1/completions", "application/json",
		strings.NewReader(fmt.Sprintf(`{"model":%q,"prompt":"hi","max_tokens":2}`, tokenizer.DefaultModelName)))
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("after the worker started: %s %s", resp.Status, b)
	}
}

// TestScalePoolRefusesFixedShapes: a gRPC request plane (a port per
// worker) cannot be resized at runtime, and says so.
func TestScalePoolRefusesFixedShapes(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Workers = 1
	cfg.RequestPlane = "grpc"
	sys := startTest(t, cfg, defaultTestEngines)
	if err := sys.ScalePool(context.Background(), 2); !errors.Is(err, ErrPoolFixed) {
		t.Fatalf("ScalePool on grpc: %v, want ErrPoolFixed", err)
	}
	if err := sys.ScalePool(context.Background(), -1); err == nil {
		t.Fatal("negative size accepted")
	}
}
