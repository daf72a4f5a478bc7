//go:build !(linux || darwin || freebsd)

package mmapfile

import "os"

// Mapped reports that Map maps files (false: it reads them).
const Mapped = false

// Map reads the whole file where this package does not map files.
func Map(path string) ([]byte, error) { return os.ReadFile(path) }

// Unmap releases a mapping Map returned (unused where the bytes may
// still be referenced).
func Unmap([]byte) {}

// Release is a no-op where Map reads files (the bytes are the heap's).
func Release([]byte) {}
