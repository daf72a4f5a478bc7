package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tandemllm/tandem/health"
	"github.com/tandemllm/tandem/internal/diagdoc"
)

// TestDiagnosticCodesDocumented: the codes registered with health.Register
// by the packages this binary links (all of them) and by the operator and
// the codes in docs/ARCHITECTURE.md's "Diagnostic codes" table are the
// same set, and no Raise, Clear or "diagnostic_code" log attribute names a
// code with a string literal (which would bypass the registry). The
// operator is a module of its own (control/operator), not linked here: its
// codes are read from its source, and its own TestDiagnosticCodesDocumented
// checks them against its linked registry.
func TestDiagnosticCodesDocumented(t *testing.T) {
	root := filepath.Join("..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "docs", "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented, err := diagdoc.Documented(string(doc))
	if err != nil {
		t.Fatal(err)
	}
	op, err := diagdoc.RegisteredIn(filepath.Join(root, "control", "operator"))
	if err != nil {
		t.Fatal(err)
	}
	registered := append(health.Registered(), op...)
	for _, c := range registered {
		if !slices.Contains(documented, c) {
			t.Errorf("diagnostic code %s is registered but has no row in docs/ARCHITECTURE.md's table", c)
		}
	}
	for _, c := range documented {
		if !slices.Contains(registered, c) {
			t.Errorf("diagnostic code %s is in docs/ARCHITECTURE.md's table but no package registers it (health.Register)", c)
		}
	}
	for _, bad := range literalCodes(t, root) {
		t.Errorf("%s: a diagnostic code as a string literal; declare it as a constant and health.Register it", bad)
	}
}

// literalCodes finds string literals where a diagnostic code goes, in the
// repository's non-test Go files.
func literalCodes(t *testing.T, root string) []string {
	var bad []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "shared") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			var at []int
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
				switch sel.Sel.Name {
				case "Raise":
					at = []int{0}
				case "Clear":
					at = []int{0, 2}
				}
			}
			for i, a := range call.Args {
				if s, ok := stringLit(a); ok && s == "diagnostic_code" {
					at = append(at, i+1)
				}
			}
			for _, i := range at {
				if i >= len(call.Args) {
					continue
				}
				if s, ok := stringLit(call.Args[i]); ok && s != "" {
					bad = append(bad, fset.Position(call.Args[i].Pos()).String()+" "+strconv.Quote(s))
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return bad
}

func stringLit(e ast.Expr) (string, bool) {
	l, ok := e.(*ast.BasicLit)
	if !ok || l.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(l.Value)
	return s, err == nil
}
