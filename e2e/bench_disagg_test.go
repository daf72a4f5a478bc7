package e2e

import (
	"strings"
	"testing"
)

// startDisaggServer starts `tandem serve --timing qwen3-0.6b` with 2
// workers in total: aggregated (mode "") or 1 prefill + 1 decode.
func startDisaggServer(t *testing.T, mode string) string {
	t.Helper()
	args := "serve --http-addr 127.0.0.1:0 --router-mode kv --timing qwen3-0.6b --speedup 10 --kv-events on --kv-events-format map " +
		"--kv-events-endpoint tcp://127.0.0.1:0 --log-level error"
	if mode == "" {
		args += " --workers 2"
	} else {
		args += " --prefill-workers 1 --decode-workers 1 --disagg " + mode
	}
	return startTandem(t, args).url
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
