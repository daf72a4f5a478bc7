package operator_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	// The operator's codes, registered as the tandem-operator binary
	// registers them.
	_ "github.com/tandemllm/tandem/control/operator"
	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/internal/diagdoc"
)

// TestDiagnosticCodesDocumented: every code the operator's process
// registers (the operator's own and those of the main module's packages
// it links) has a row in docs/ARCHITECTURE.md's "Diagnostic codes" table,
// and the codes the main module's test reads from the operator's source
// are the ones it registers. (The main module's TestDiagnosticCodesDocumented
// checks the other direction: every documented code is registered.)
func TestDiagnosticCodesDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented, err := diagdoc.Documented(string(doc))
	if err != nil {
		t.Fatal(err)
	}
	registered := health.Registered()
	for _, c := range registered {
		if !slices.Contains(documented, c) {
			t.Errorf("diagnostic code %s is registered but has no row in docs/ARCHITECTURE.md's table", c)
		}
	}
	fromSource, err := diagdoc.RegisteredIn(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range fromSource {
		if !slices.Contains(registered, c) {
			t.Errorf("the source registers %s but the linked registry has no such code", c)
		}
	}
	if len(fromSource) < 4 {
		t.Errorf("read %v from the operator's source, want its 4 codes", fromSource)
	}
}
