package httpapi

import (
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestReachesRouterOnlyThroughDispatch: the HTTP layer runs requests
// through dispatch and imports neither the router nor the disaggregation
// drivers (issue 32), which its layer alone would allow.
func TestReachesRouterOnlyThroughDispatch(t *testing.T) {
	const mod = "github.com/tandemllm/tandem/"
	banned := []string{mod + "router", mod + "disagg"}
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			for _, b := range banned {
				if path == b || strings.HasPrefix(path, b+"/") {
					t.Errorf("%s imports %s; reach it through dispatch", name, path)
				}
			}
		}
	}
}
