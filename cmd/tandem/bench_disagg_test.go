package main

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/tandemllm/tandem/engine/mocker"
	"github.com/tandemllm/tandem/frontend"
	"github.com/tandemllm/tandem/serve"
)

// startDisaggServer starts `tandem serve --timing qwen3-0.6b` with 2
// workers in total: aggregated (mode "") or 1 prefill + 1 decode.
func startDisaggServer(t *testing.T, mode string) string {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	eng := engineFlags{kind: "mocker", mock: mocker.DefaultConfig(), timing: "qwen3-0.6b", kvEvents: "on", kvFormat: "map"}
	eng.mock.KVEvents.Endpoint = "tcp://127.0.0.1:0"
	eng.mock.Speedup = 10
	model, factory, err := eng.build(log)
	if err != nil {
		t.Fatal(err)
	}
	cfg := serve.DefaultConfig()
	cfg.HTTPAddr, cfg.Workers, cfg.RouterMode = "127.0.0.1:0", 2, "kv"
	if mode != "" {
		cfg.Disagg = serve.DisaggConfig{PrefillWorkers: 1, DecodeWorkers: 1, DisaggConfig: frontend.DisaggConfig{Mode: mode}}
	}
	sys, err := serve.Start(cfg, model, factory, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sys.Shutdown(context.Background()) })
	return sys.URL()
}

func TestBenchDisaggTTFT(t *testing.T) {
	agg, auto, always := startDisaggServer(t, ""), startDisaggServer(t, "auto"), startDisaggServer(t, "always")
	out, err := runCLI(t, "--log-level", "error", "bench", "disagg-ttft",
		"--url", agg, "--label", "aggregated", "--url", auto, "--label", "auto", "--url", always, "--label", "always",
		"--rounds", "2", "--prefix-words", "200", "--tail-words", "40", "--long-words", "300", "--output", "2", "--progress", "off")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"TTFT p99 ms", "prefix-1 (200+40 words)", "fresh 300 words", "always/aggregated"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if _, err := runCLI(t, "bench", "disagg-ttft"); err == nil {
		t.Error("disagg-ttft ran without --url")
	}
}
