package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tandemllm/tandem/health"
	// The operator is its own binary (cmd/tandem-operator); linked here
	// so its codes are checked with the rest.
	_ "github.com/tandemllm/tandem/control/operator"
)

// TestDiagnosticCodesDocumented: the codes registered with health.Register
// by the packages this binary links (all of them, and the operator's) and the codes in
// docs/ARCHITECTURE.md's "Diagnostic codes" table are the same set, and no
// Raise, Clear or "diagnostic_code" log attribute names a code with a
// string literal (which would bypass the registry).
func TestDiagnosticCodesDocumented(t *testing.T) {
	root := filepath.Join("..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "docs", "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented := docCodes(t, string(doc))
	registered := health.Registered()
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

var docCode = regexp.MustCompile("`([a-z0-9_]+)`")

// docCodes reads the first column of the table under "## Diagnostic codes".
func docCodes(t *testing.T, doc string) []string {
	_, sec, ok := strings.Cut(doc, "\n## Diagnostic codes\n")
	if !ok {
		t.Fatal("docs/ARCHITECTURE.md has no \"## Diagnostic codes\" section")
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	var codes []string
	for _, line := range strings.Split(sec, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 || !strings.Contains(cells[1], "`") {
			continue
		}
		for _, m := range docCode.FindAllStringSubmatch(cells[1], -1) {
			codes = append(codes, m[1])
		}
	}
	slices.Sort(codes)
	return slices.Compact(codes)
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
