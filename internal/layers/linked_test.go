package layers

import (
	"go/build"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestTandemLinksNoKubernetesClient: the `tandem` binary reaches the
// Kubernetes API through internal/kubeapi only. A package in its import
// closure that imports client-go, apimachinery or an API group (directly,
// or through control/api/v1alpha1's types) would link client-go's scheme with every
// API group back in, which is most of the binary's size; the operator
// (cmd/tandem-operator) is the binary that links them.
func TestTandemLinksNoKubernetesClient(t *testing.T) {
	dir := root(t)
	seen := map[string]bool{}
	var bad []string
	var walk func(rel string, via []string)
	walk = func(rel string, via []string) {
		if seen[rel] {
			return
		}
		seen[rel] = true
		bp, err := build.ImportDir(filepath.Join(dir, filepath.FromSlash(rel)), 0)
		if err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		path := append(slices.Clone(via), rel)
		for _, imp := range bp.Imports {
			switch {
			case strings.HasPrefix(imp, "k8s.io/") || strings.HasPrefix(imp, "sigs.k8s.io/") || imp == module+"/api/v1alpha1":
				bad = append(bad, strings.Join(path, " → ")+" → "+imp)
			case strings.HasPrefix(imp, module+"/"):
				walk(strings.TrimPrefix(imp, module+"/"), path)
			}
		}
	}
	walk("cmd/tandem", nil)
	if len(seen) < 10 {
		t.Fatalf("walked only %d packages from cmd/tandem", len(seen))
	}
	for _, b := range bad {
		t.Errorf("tandem links a Kubernetes client package: %s (use internal/kubeapi)", b)
	}
}
