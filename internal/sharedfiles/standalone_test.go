package sharedfiles

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStandsAlone: no comment, help string (both live in non-test .go
// files) or doc of the repository points into the fixture directory or at
// a file that exists only there. Tests may read fixtures from it (they
// skip when it is absent); nothing else may depend on it.
func TestStandsAlone(t *testing.T) {
	root := filepath.Join("..", "..")
	banned := []string{"../shared", "/work/shared", "router-guide.md"}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "shared" || name == "testdata" && strings.Contains(path, "fuzz")) {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case strings.HasSuffix(name, "_test.go"), name == "standalone_test.go":
			return nil
		case strings.HasSuffix(name, ".go"), strings.HasSuffix(name, ".md"), strings.HasSuffix(name, ".sh"),
			strings.HasSuffix(name, ".yaml"), strings.HasSuffix(name, ".proto"), name == "Dockerfile":
		default:
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range bytes.Split(b, []byte("\n")) {
			for _, s := range banned {
				if bytes.Contains(line, []byte(s)) {
					t.Errorf("%s:%d names %q: the repository must stand alone (cite a public source instead)", path, i+1, s)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
