//go:build linux

package kernels

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// mappedCopy writes b to a file and returns a read-only shared mapping of
// it, as the GGUF loader holds Q8_0 weights (the file's pages, 4 KiB
// ones), unmapped when the benchmark ends.
func mappedCopy(tb testing.TB, b []byte) []byte {
	p := filepath.Join(tb.TempDir(), "blocks")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		tb.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	m, err := syscall.Mmap(int(f.Fd()), 0, len(b), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = syscall.Munmap(m) })
	return m
}
