package v1alpha1_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestCRDUpToDate regenerates the CRD YAML, the deepcopy code and the
// operator's ClusterRole with the
// pinned controller-gen (scripts/gen-crd.sh) into a temporary directory
// and fails when the committed files differ: they are generated, never
// edited by hand.
func TestCRDUpToDate(t *testing.T) {
	// Building controller-gen takes minutes on a cold cache, so the check
	// runs in CI's generate step (.ci/run sets TANDEM_CRD_CHECK=1), not in
	// every go test ./...
	if os.Getenv("TANDEM_CRD_CHECK") != "1" {
		t.Skip("set TANDEM_CRD_CHECK=1 to regenerate the CRD, deepcopy and RBAC with controller-gen and compare (.ci/run's generate step does)")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to run controller-gen")
	}
	tmp := t.TempDir()
	crdDir, objDir, rbacDir := filepath.Join(tmp, "crd"), filepath.Join(tmp, "obj"), filepath.Join(tmp, "rbac")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "../../../../scripts/gen-crd.sh")
	cmd.Env = append(os.Environ(), "OUT="+crdDir, "OBJECT_OUT="+objDir, "RBAC_OUT="+rbacDir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/gen-crd.sh: %v\n%s", err, out)
	}
	// The chart's copies (scripts/gen-crd.sh copies them) must match too.
	for copy, orig := range map[string]string{
		"../../../../deploy/helm/tandem-operator/crds/tandem.dev_tandemdeployments.yaml": CRDFile,
		"../../../../deploy/helm/tandem-operator/templates/clusterrole.yaml":             "../../../../deploy/operator/role.yaml",
	} {
		a, err1 := os.ReadFile(copy)
		b, err2 := os.ReadFile(orig)
		if err1 != nil || err2 != nil || !bytes.Equal(a, b) {
			t.Errorf("%s differs from %s: run scripts/gen-crd.sh (%v, %v)", copy, orig, err1, err2)
		}
	}
	for gen, committed := range map[string]string{
		filepath.Join(crdDir, "tandem.dev_tandemdeployments.yaml"): CRDFile,
		filepath.Join(objDir, "zz_generated.deepcopy.go"):          "zz_generated.deepcopy.go",
		filepath.Join(rbacDir, "role.yaml"):                        "../../../../deploy/operator/role.yaml",
	} {
		g, err := os.ReadFile(gen)
		if err != nil {
			t.Fatal(err)
		}
		c, err := os.ReadFile(committed)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(g, c) {
			t.Errorf("%s is stale: run scripts/gen-crd.sh and commit the result", committed)
		}
	}
}
