package layers

import (
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// folderRow matches a row of the "Folders" table: | `dir/` | a–b | what |.
var folderRow = regexp.MustCompile("^\\| `([^`]+)/` \\| (\\d+)(?:–(\\d+))? \\|")

type folder struct {
	dir    string
	lo, hi int
}

// parseFolders reads the "## Folders" table of ARCHITECTURE.md.
func parseFolders(path string) ([]folder, error) {
	rows, err := sectionRows(path, "Folders")
	if err != nil {
		return nil, err
	}
	var out []folder
	for _, line := range rows {
		m := folderRow.FindStringSubmatch(line)
		if m == nil {
			continue // the header and its rule
		}
		lo, _ := strconv.Atoi(m[2])
		hi := lo
		if m[3] != "" {
			hi, _ = strconv.Atoi(m[3])
		}
		out = append(out, folder{m[1], lo, hi})
	}
	return out, nil
}

// checkFolders: every package lies in a listed folder whose layer range
// holds the package's layer, and every listed folder holds a package.
func checkFolders(folders []folder, layers map[string]int, pkgs map[string][]string) []string {
	var bad []string
	used := map[string]bool{}
	for pkg := range pkgs {
		if pkg == "." {
			continue
		}
		var in *folder
		for i := range folders {
			if pkg == folders[i].dir || strings.HasPrefix(pkg, folders[i].dir+"/") {
				if in == nil || len(folders[i].dir) > len(in.dir) {
					in = &folders[i]
				}
			}
		}
		if in == nil {
			bad = append(bad, fmt.Sprintf("%s is in no folder of docs/ARCHITECTURE.md's \"Folders\" table", pkg))
			continue
		}
		used[in.dir] = true
		if l, ok := layers[pkg]; ok && (l < in.lo || l > in.hi) {
			bad = append(bad, fmt.Sprintf("%s (layer %d) is in %s/, whose layers are %d–%d", pkg, l, in.dir, in.lo, in.hi))
		}
	}
	for _, f := range folders {
		if !used[f.dir] {
			bad = append(bad, fmt.Sprintf("docs/ARCHITECTURE.md's \"Folders\" table lists %s/, which holds no package", f.dir))
		}
	}
	sort.Strings(bad)
	return bad
}

// TestFolders: the folder list drawn in ARCHITECTURE.md is the tree's,
// and each folder's packages sit in the layers it is drawn with.
func TestFolders(t *testing.T) {
	dir := root(t)
	arch := filepath.Join(dir, "docs", "ARCHITECTURE.md")
	layers, err := parseLayers(arch)
	if err != nil {
		t.Fatal(err)
	}
	folders, err := parseFolders(arch)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range checkFolders(folders, layers, packages(t, dir)) {
		t.Error(b)
	}
}

// TestCheckFolders: the checker names a package outside every folder, one
// outside its folder's layers, and an empty folder.
func TestCheckFolders(t *testing.T) {
	folders := []folder{{"planes", 2, 5}, {"nodes", 7, 8}, {"gone", 0, 0}}
	layers := map[string]int{"planes/kvtransfer": 2, "nodes/serve": 8, "nodes/process": 1, "stray": 0}
	pkgs := map[string][]string{"planes/kvtransfer": nil, "nodes/serve": nil, "nodes/process": nil, "stray": nil}
	got := checkFolders(folders, layers, pkgs)
	want := []string{
		"docs/ARCHITECTURE.md's \"Folders\" table lists gone/, which holds no package",
		"nodes/process (layer 1) is in nodes/, whose layers are 7–8",
		"stray is in no folder of docs/ARCHITECTURE.md's \"Folders\" table",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got %q\nwant %q", got, want)
	}
}
