package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runCLI runs `tandem args...` in process and returns its stdout.
func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	return out.String(), err
}

// TestBenchPrefixReuseStartsServers runs the per-mode table end to end:
// bench starts a Tandem per mode through benchServerStarter, a mode the
// router lacks is an error row, and the report directory is written.
func TestBenchPrefixReuseStartsServers(t *testing.T) {
	dir := t.TempDir()
	out, err := runCLI(t, "--log-level", "error", "bench", "prefix-reuse", "--start-server", "--modes", "round-robin,no-such-mode",
		"--prefixes", "4", "--prefix-words", "300", "--rounds", "2", "--output", "2", "--speedup", "4", "--progress", "off", "--out", dir)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"prefix-reuse hits per run", "round-robin", "no-such-mode (run 1): starting a server in mode no-such-mode"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, f := range []string{"records.jsonl", "records.csv", "summary.json", "report.html"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// TestBenchSyntheticAB runs an A/B synthetic run against two started
// servers and checks the ratio column.
func TestBenchSyntheticAB(t *testing.T) {
	start := benchServerStarter(slog.New(slog.DiscardHandler), 1, 16384, 20)
	var urls []string
	for range 2 {
		url, stop, err := start(context.Background(), "round-robin")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stop)
		urls = append(urls, url)
	}
	out, err := runCLI(t, "bench", "synthetic", "--url", urls[0], "--label", "one", "--url", urls[1], "--label", "two",
		"--requests", "6", "--input", "uniform:20,60", "--output", "4", "--progress", "off")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "two/one") || !strings.Contains(out, "6/6") {
		t.Fatalf("no A/B summary:\n%s", out)
	}
	if _, err := runCLI(t, "bench", "frontend-overhead", "--url", urls[0]); err == nil {
		t.Error("frontend-overhead accepted one --url")
	}
}
