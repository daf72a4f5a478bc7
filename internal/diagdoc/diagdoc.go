// Package diagdoc reads what the diagnostic-code checks compare: the codes
// of docs/ARCHITECTURE.md's "Diagnostic codes" table, and the codes a
// package's sources pass to health.Register (read from the source, for a
// package that a test cannot link: the operator, a module of its own).
package diagdoc

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

var docCode = regexp.MustCompile("`([a-z0-9_]+)`")

// Documented returns the codes in the first column of the table under
// "## Diagnostic codes" of doc (docs/ARCHITECTURE.md's text), sorted.
func Documented(doc string) ([]string, error) {
	_, sec, ok := strings.Cut(doc, "\n## Diagnostic codes\n")
	if !ok {
		return nil, errors.New("diagdoc: no \"## Diagnostic codes\" section")
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
	return slices.Compact(codes), nil
}

// RegisteredIn returns the codes that the non-test Go files of the
// package in dir pass to health.Register, as constants of that package
// with string values (how every package declares them), sorted. A
// Register argument that is not such a constant is an error.
func RegisteredIn(dir string) ([]string, error) {
	fset := token.NewFileSet()
	consts := map[string]string{}
	var args []ast.Expr
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, fmt.Errorf("diagdoc: %w", err)
		}
		ast.Inspect(af, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ValueSpec:
				for i, name := range n.Names {
					if i < len(n.Values) {
						if l, ok := n.Values[i].(*ast.BasicLit); ok && l.Kind == token.STRING {
							if s, err := strconv.Unquote(l.Value); err == nil {
								consts[name.Name] = s
							}
						}
					}
				}
			case *ast.CallExpr:
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Register" {
					if x, ok := sel.X.(*ast.Ident); ok && x.Name == "health" {
						args = append(args, n.Args...)
					}
				}
			}
			return true
		})
	}
	var codes []string
	for _, a := range args {
		id, ok := a.(*ast.Ident)
		if !ok {
			return nil, fmt.Errorf("diagdoc: %s: health.Register argument is not a constant of the package", fset.Position(a.Pos()))
		}
		c, ok := consts[id.Name]
		if !ok {
			return nil, fmt.Errorf("diagdoc: %s: %s is not a string constant of the package", fset.Position(a.Pos()), id.Name)
		}
		codes = append(codes, c)
	}
	if len(codes) == 0 {
		return nil, fmt.Errorf("diagdoc: %s registers no code", dir)
	}
	slices.Sort(codes)
	return slices.Compact(codes), nil
}
