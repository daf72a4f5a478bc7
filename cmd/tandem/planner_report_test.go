package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tandemllm/tandem/control/planner"
)

// TestPlannerSimulateHTML: --html writes the report next to the table,
// and a --profile written by hand (the bench profile's format) is read.
func TestPlannerSimulateHTML(t *testing.T) {
	dir := t.TempDir()
	html := filepath.Join(dir, "r.html")
	out, err := runCLI(t, "planner", "simulate", "--day-low", "1", "--html", html)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	b, err := os.ReadFile(html)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`id="replicas-agg"`, `id="load"`, `id="attainment"`, `id="worker-seconds"`, "static-peak"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("report lacks %s", want)
		}
	}
	if !strings.Contains(out, "| tandem |") {
		t.Errorf("no table:\n%s", out)
	}
	// A bad profile is refused with the field named.
	p := &planner.Profile{Version: 1, KVCapacityTokens: 1000}
	bad, _ := json.Marshal(p)
	path := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(path, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := runCLI(t, "planner", "simulate", "--day-low", "1", "--profile", path); err == nil || !strings.Contains(err.Error(), "prefill.isl") {
		t.Fatalf("bad profile: %v", err)
	}
}

// TestBenchProfileFlags: bad sweeps are refused before any request.
func TestBenchProfileFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--url", "http://127.0.0.1:1"}, "--profile FILE is required"},
		{[]string{"--url", "http://127.0.0.1:1", "--profile", "x.json", "--isl", "512,128"}, "--isl"},
		{[]string{"--url", "http://127.0.0.1:1", "--profile", "x.json", "--cached-fraction", "0,1"}, "--cached-fraction"},
		{[]string{"--url", "http://127.0.0.1:1", "--profile", "x.json", "--repeats", "-1"}, "--repeats"},
		{[]string{"--url", "http://127.0.0.1:1", "--url", "http://127.0.0.1:2", "--profile", "x.json"}, "one worker"},
	} {
		_, err := runCLI(t, append([]string{"bench", "profile"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}
