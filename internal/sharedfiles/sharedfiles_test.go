package sharedfiles

import (
	"os"
	"path/filepath"
	"testing"
)

func TestPathFindsReferenceModel(t *testing.T) {
	p, err := Path("models", "stories260K", "stories260K.bin")
	if err != nil {
		t.Skipf("no shared directory here: %v", err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("stat %s: %v", p, err)
	}
}

func TestEnvOverride(t *testing.T) {
	d := t.TempDir()
	t.Setenv("TANDEM_SHARED", d)
	p, err := Path("x")
	if err != nil || p != filepath.Join(d, "x") {
		t.Fatalf("Path = %q, %v", p, err)
	}
}
