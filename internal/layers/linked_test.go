package layers

import (
	"fmt"
	"go/build"
	"io/fs"
	"os"
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
// or through the operator module's packages, such as its
// control/operator/api/v1alpha1 types) would link client-go's scheme
// with every API group back in, which is most of the binary's size; the
// operator (control/operator/cmd/tandem-operator, a module of its own) is
// the binary that links them.
func TestTandemLinksNoKubernetesClient(t *testing.T) {
	for _, b := range linked(t, "cmd/tandem", func(imp string) bool {
		return isKube(imp) || imp == operatorModule || strings.HasPrefix(imp, operatorModule+"/")
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

// operatorModule is the operator's module (control/operator/go.mod), the
// repository's only code that links Kubernetes client libraries.
const operatorModule = module + "/control/operator"

func isKube(imp string) bool {
	return strings.HasPrefix(imp, "k8s.io/") || strings.HasPrefix(imp, "sigs.k8s.io/")
}

// TestMainModuleImportsNoKubernetes: no package of the main module, tests
// included, imports a Kubernetes library (client-go, apimachinery, an API
// group, controller-runtime, sigs.k8s.io/yaml) or the operator module, and
// go.mod requires none directly, so `go test ./...` compiles no Kubernetes
// client code.
// Tests reach the real kube-apiserver through internal/kubetest's JSON
// client; the operator's tests run in its own module
// (cd control/operator && go test ./...).
func TestMainModuleImportsNoKubernetes(t *testing.T) {
	dir := root(t)
	n := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		name := d.Name()
		if p != dir && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor" || name == "node_modules") {
			return filepath.SkipDir
		}
		if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil && p != dir {
			return filepath.SkipDir // another module: the operator's
		}
		bp, err := build.ImportDir(p, 0)
		if err != nil {
			if _, ok := err.(*build.NoGoError); ok {
				return nil
			}
			return fmt.Errorf("%s: %w", p, err)
		}
		n++
		rel, _ := filepath.Rel(dir, p)
		for _, imps := range [][]string{bp.Imports, bp.TestImports, bp.XTestImports} {
			for _, imp := range imps {
				if isKube(imp) || imp == operatorModule || strings.HasPrefix(imp, operatorModule+"/") {
					t.Errorf("%s imports %s: the main module links no Kubernetes library (tests use internal/kubetest's client; the operator's code lives in control/operator's module)", filepath.ToSlash(rel), imp)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 50 {
		t.Fatalf("read only %d packages", n)
	}
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	// Indirect requirements are what other modules bring: etcd's embedded
	// server (internal/etcdtest) imports sigs.k8s.io/yaml and a btree of
	// k8s.io/utils, two small leaves.
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == "require" {
			f = f[1:]
		}
		if len(f) > 0 && isKube(f[0]) && !strings.HasSuffix(line, "// indirect") {
			t.Errorf("go.mod requires %s directly: the main module needs no Kubernetes module", strings.TrimSpace(line))
		}
	}
}
