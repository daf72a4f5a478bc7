package layers

import (
	"bufio"
	"fmt"
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/tandemllm/tandem"

// root is the module root (this package is internal/layers).
func root(t *testing.T) string {
	t.Helper()
	r, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(r, "go.mod")); err != nil {
		t.Fatalf("module root: %v", err)
	}
	return r
}

var cellPkg = regexp.MustCompile("`([^`]+)`")

// sectionRows returns the table rows ("| ..." lines) of ARCHITECTURE.md's
// section "## <title>".
func sectionRows(path, title string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var rows []string
	in := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			in = line == "## "+title
			continue
		}
		if in && strings.HasPrefix(line, "| ") {
			rows = append(rows, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%s: no \"## %s\" table", path, title)
	}
	return rows, nil
}

// parseLayers reads the "Import layers" table: | layer | `pkg`, ... | ... |.
func parseLayers(path string) (map[string]int, error) {
	rows, err := sectionRows(path, "Import layers")
	if err != nil {
		return nil, err
	}
	layers := map[string]int{}
	for _, line := range rows {
		cells := strings.Split(line, "|")
		if len(cells) < 4 {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(cells[1]))
		if err != nil {
			continue // the header and its rule
		}
		for _, m := range cellPkg.FindAllStringSubmatch(cells[2], -1) {
			if old, dup := layers[m[1]]; dup {
				return nil, fmt.Errorf("%s: package %s in layers %d and %d", path, m[1], old, n)
			}
			layers[m[1]] = n
		}
	}
	return layers, nil
}

var moduleLine = regexp.MustCompile(`(?m)^module\s+(\S+)\s*$`)

// ownModule reports whether the module at p (a folder with a go.mod under
// the main module's root) is one of this repository's, with the import
// path its folder gives it (control/operator: the operator's module). Its
// packages are held to the same layers and folders: go/build reads their
// imports without compiling them, so the main module's tests link none of
// their dependencies.
func ownModule(root, p string) bool {
	b, err := os.ReadFile(filepath.Join(p, "go.mod"))
	if err != nil {
		return false
	}
	m := moduleLine.FindSubmatch(b)
	rel, err := filepath.Rel(root, p)
	return m != nil && err == nil && string(m[1]) == module+"/"+filepath.ToSlash(rel)
}

// packages returns every package of the module and of the repository's
// nested modules (relative path → its non-test imports within the
// repository).
func packages(t *testing.T, dir string) map[string][]string {
	t.Helper()
	pkgs := map[string][]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if p != dir && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor" || name == "node_modules") {
			return filepath.SkipDir
		}
		if p != dir {
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil && !ownModule(dir, p) {
				return filepath.SkipDir // another module
			}
		}
		bp, err := build.ImportDir(p, 0)
		if err != nil {
			if _, ok := err.(*build.NoGoError); ok {
				return nil
			}
			return fmt.Errorf("%s: %w", p, err)
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		var own []string
		for _, imp := range bp.Imports {
			if strings.HasPrefix(imp, module+"/") {
				own = append(own, strings.TrimPrefix(imp, module+"/"))
			}
		}
		pkgs[rel] = own
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

func check(layers map[string]int, pkgs map[string][]string) []string {
	var bad []string
	for pkg, imps := range pkgs {
		l, ok := layers[pkg]
		if !ok {
			bad = append(bad, fmt.Sprintf("%s has no layer: add it to docs/ARCHITECTURE.md's \"Import layers\" table", pkg))
			continue
		}
		for _, imp := range imps {
			il, ok := layers[imp]
			switch {
			case !ok:
				bad = append(bad, fmt.Sprintf("%s imports %s, which has no layer", pkg, imp))
			case il >= l:
				bad = append(bad, fmt.Sprintf("%s (layer %d) imports %s (layer %d): a package imports only lower layers", pkg, l, imp, il))
			}
		}
	}
	for pkg := range layers {
		if _, ok := pkgs[pkg]; !ok {
			bad = append(bad, fmt.Sprintf("docs/ARCHITECTURE.md's layer table lists %s, which is no package", pkg))
		}
	}
	sort.Strings(bad)
	return bad
}

// TestImportLayers fails on every import that breaks the layers.
func TestImportLayers(t *testing.T) {
	dir := root(t)
	layers, err := parseLayers(filepath.Join(dir, "docs", "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range check(layers, packages(t, dir)) {
		t.Error(b)
	}
}

// TestCheck: the checker names an inversion, a same-layer import, an
// unlisted package and a stale row, and passes a clean graph.
func TestCheck(t *testing.T) {
	layers := map[string]int{"engine": 1, "router": 4, "httpapi": 5, "requestplane": 5, "gone": 2}
	tests := []struct {
		name string
		pkgs map[string][]string
		want []string
	}{
		{"clean", map[string][]string{"engine": nil, "router": {"engine"}, "httpapi": {"router", "engine"}, "requestplane": {"engine"}, "gone": nil}, nil},
		{"inversion", map[string][]string{"engine": {"router"}, "router": nil, "httpapi": nil, "requestplane": nil, "gone": nil},
			[]string{"engine (layer 1) imports router (layer 4): a package imports only lower layers"}},
		{"same layer", map[string][]string{"engine": nil, "router": nil, "httpapi": {"requestplane"}, "requestplane": nil, "gone": nil},
			[]string{"httpapi (layer 5) imports requestplane (layer 5): a package imports only lower layers"}},
		{"unlisted and stale", map[string][]string{"engine": nil, "router": nil, "httpapi": nil, "requestplane": nil, "fresh": nil},
			[]string{"docs/ARCHITECTURE.md's layer table lists gone, which is no package",
				"fresh has no layer: add it to docs/ARCHITECTURE.md's \"Import layers\" table"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := check(layers, tc.pkgs)
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}
