package sharedfiles

import (
	"errors"
	"os"
	"path/filepath"
)

// ErrNotFound is returned when no shared directory can be located.
var ErrNotFound = errors.New("shared directory not found (set TANDEM_SHARED)")

// Dir returns the shared directory: $TANDEM_SHARED if set, else the "shared"
// directory beside the nearest ancestor of the working directory that holds
// go.mod (the repository root), else "shared" in any ancestor.
func Dir() (string, error) {
	if d := os.Getenv("TANDEM_SHARED"); d != "" {
		return d, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			if s := filepath.Join(filepath.Dir(d), "shared"); isDir(s) {
				return s, nil
			}
		}
		if s := filepath.Join(d, "shared"); isDir(s) && d != wd {
			return s, nil
		}
		if filepath.Dir(d) == d {
			return "", ErrNotFound
		}
	}
}

// Path joins elems onto Dir.
func Path(elems ...string) (string, error) {
	d, err := Dir()
	if err != nil {
		return "", err
	}
	return filepath.Join(append([]string{d}, elems...)...), nil
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}
