package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/tandemllm/tandem/router"
)

// TestOffClusterErrors: the commands that talk to Kubernetes, run outside
// a pod without --kubeconfig, name the flag to pass (and the other way to
// run) instead of client-go's in-cluster error.
func TestOffClusterErrors(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	for _, tt := range []struct {
		args []string
		want []string
	}{
		{[]string{"planner", "--frontend-metrics", "http://127.0.0.1:1/metrics", "--dry-run", "--name", "td"}, []string{"--kubeconfig FILE", "--actuator local"}},
		{[]string{"planner", "--frontend-metrics", "http://127.0.0.1:1/metrics", "--actuator", "deployment", "--deployment", "agg=d"}, []string{"--kubeconfig FILE", "--actuator local"}},
	} {
		t.Run(tt.args[0], func(t *testing.T) {
			out, err := runCLI(t, tt.args...)
			if err == nil {
				t.Fatalf("ran outside a cluster:\n%s", out)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "unable to load in-cluster configuration") {
				t.Errorf("client-go's raw error: %v", err)
			}
		})
	}
}

// TestCertsInitExistingDir: init refuses a directory that already has a
// CA before writing anything, and says what to do instead.
func TestCertsInitExistingDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	if out, err := runCLI(t, "certs", "init", "--dir", dir, "--workers", "1"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	before, _ := os.ReadDir(dir)
	_, err := runCLI(t, "certs", "init", "--dir", dir, "--workers", "3")
	if err == nil || !strings.Contains(err.Error(), "already holds a cluster CA") || !strings.Contains(err.Error(), "tandem certs issue") {
		t.Fatalf("second init: %v", err)
	}
	if after, _ := os.ReadDir(dir); len(after) != len(before) {
		t.Errorf("the refused init wrote files: %d before, %d after", len(before), len(after))
	}
}

// TestPlannerSimulateTable: the comparison names static pools as
// pool=replicas, not Go map syntax.
func TestPlannerSimulateTable(t *testing.T) {
	out, err := runCLI(t, "planner", "simulate")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if strings.Contains(out, "map[") || !regexp.MustCompile(`static-peak \(agg=\d+\)`).MatchString(out) {
		t.Fatalf("simulate table:\n%s", out)
	}
}

func TestRouterDescription(t *testing.T) {
	for _, tt := range []struct {
		mode string
		cost router.CostModel
		want string
	}{
		{"kv", "", "kv (cost ttft)"},
		{"kv", router.CostModel("dynamo"), "kv (cost dynamo)"},
		{"round-robin", "", "round-robin"},
	} {
		if got := routerDescription(tt.mode, router.KVConfig{Cost: tt.cost}); got != tt.want {
			t.Errorf("routerDescription(%q, %q) = %q, want %q", tt.mode, tt.cost, got, tt.want)
		}
	}
}

// TestStepProgress: progress lines name the step, the total and an ETA,
// and the last step is always printed.
func TestStepProgress(t *testing.T) {
	var b strings.Builder
	p := newStepProgress(&b, "model quantize: a -> b")
	for i := 1; i <= 4; i++ {
		p.step(i, 4)
	}
	if !strings.Contains(b.String(), "model quantize: a -> b: layer 4/4, ") || !strings.Contains(b.String(), "ETA 0s") {
		t.Fatalf("progress:\n%s", b.String())
	}
}
