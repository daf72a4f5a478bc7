package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestServeConfigFile: `serve --config` reads the same YAML as frontend's
// and worker's: keys are flag names, command-line flags win, unknown keys
// are an error.
func TestServeConfigFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", "workers: 5\nrouter-mode: kv\ndrain-timeout: 3s\n")
	tests := []struct {
		name    string
		args    []string
		want    map[string]string
		wantErr string
	}{
		{"file values", []string{"--config", good}, map[string]string{"workers": "5", "router-mode": "kv", "drain-timeout": "3s"}, ""},
		{"flags win", []string{"--config", good, "--workers", "3"}, map[string]string{"workers": "3", "router-mode": "kv"}, ""},
		{"unknown key", []string{"--config", write("bad.yaml", "workers: 2\nno-such-flag: 1\n")}, nil, `unknown key "no-such-flag"`},
		{"config inside config", []string{"--config", write("loop.yaml", "config: x.yaml\n")}, nil, `unknown key "config"`},
		{"bad value", []string{"--config", write("val.yaml", "workers: many\n")}, nil, "workers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := newServeCmd()
			if err := cmd.ParseFlags(tt.args); err != nil {
				t.Fatal(err)
			}
			path, _ := cmd.Flags().GetString("config")
			err := applyConfigFile(cmd, path)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want one naming %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tt.want {
				if got := cmd.Flags().Lookup(k).Value.String(); got != v {
					t.Errorf("--%s = %s, want %s", k, got, v)
				}
			}
		})
	}
}

// TestWorkerHelpShowsWorkerFlags: `tandem worker --help` lists none of the
// flags only `serve` and `frontend` act on (routing, the HTTP frontend's
// limits, in-process pools, the disaggregation decider).
func TestWorkerHelpShowsWorkerFlags(t *testing.T) {
	worker := newWorkerCmd()
	serveOnly := map[string]bool{}
	for _, name := range []string{"router-mode", "workers", "http-addr", "prefill-workers", "decode-workers", "disagg",
		"disagg-leg-timeout", "disagg-interference-weight", "request-plane", "max-inflight", "max-queue", "queue-timeout",
		"served-model-name", "first-token-timeout", "stuck-after", "max-connections", "migration-limit"} {
		serveOnly[name] = true
	}
	var help strings.Builder
	worker.SetOut(&help)
	worker.SetArgs([]string{"--help"})
	if err := worker.Execute(); err != nil {
		t.Fatal(err)
	}
	for name := range serveOnly {
		if fl := worker.Flags().Lookup(name); fl != nil && !fl.Hidden {
			t.Errorf("worker --help shows --%s, a flag the worker does not act on", name)
		}
		if regexp.MustCompile(`(?m)^\s+(-\w, )?--` + name + ` `).MatchString(help.String()) {
			t.Errorf("worker --help text lists --%s", name)
		}
	}
}
