package layers

import (
	"go/build"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// linked walks the module's packages that from imports, directly or not,
// and returns each import path (from → … → import) whose import is bad.
func linked(t *testing.T, from string, bad func(imp string) bool) []string {
	t.Helper()
	dir := root(t)
	seen := map[string]bool{}
	var out []string
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
			case bad(imp):
				out = append(out, strings.Join(path, " → ")+" → "+imp)
			case strings.HasPrefix(imp, module+"/"):
				walk(strings.TrimPrefix(imp, module+"/"), path)
			}
		}
	}
	walk(from, nil)
	if len(seen) < 3 {
		t.Fatalf("walked only %d packages from %s", len(seen), from)
	}
	return out
}

// TestTandemLinksNoKubernetesClient: the `tandem` binary reaches the
// Kubernetes API through internal/kubeapi only. A package in its import
// closure that imports client-go, apimachinery or an API group (directly,
// or through control/api/v1alpha1's types) would link client-go's scheme
// with every API group back in, which is most of the binary's size; the
// operator (cmd/tandem-operator) is the binary that links them.
func TestTandemLinksNoKubernetesClient(t *testing.T) {
	for _, b := range linked(t, "cmd/tandem", func(imp string) bool {
		return strings.HasPrefix(imp, "k8s.io/") || strings.HasPrefix(imp, "sigs.k8s.io/") || imp == module+"/control/api/v1alpha1"
	}) {
		t.Errorf("tandem links a Kubernetes client package: %s (use internal/kubeapi)", b)
	}
}

// TestRouterLinksNoTransport: the router decides; the planes carry. Event
// following (planes/kvevents/follow), the event plane and the request
// plane feed it through interfaces, so no socket library (ZMQ, gRPC, NATS,
// etcd's client) is in its import closure.
func TestRouterLinksNoTransport(t *testing.T) {
	transports := []string{"github.com/go-zeromq/", "google.golang.org/grpc", "github.com/nats-io/", "go.etcd.io/"}
	for _, b := range linked(t, "router", func(imp string) bool {
		return slices.ContainsFunc(transports, func(p string) bool { return strings.HasPrefix(imp, p) })
	}) {
		t.Errorf("router links a transport: %s", b)
	}
}
