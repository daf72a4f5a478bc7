package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestOffCluster: outside a pod and without --kubeconfig the operator
// names the flag to pass, not client-go's in-cluster error.
func TestOffCluster(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	cmd := newRootCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(nil)
	err := cmd.Execute()
	if err == nil || !strings.Contains(err.Error(), "--kubeconfig FILE") || strings.Contains(err.Error(), "unable to load in-cluster configuration") {
		t.Fatalf("err = %v", err)
	}
}
