//go:build !(linux || darwin || freebsd)

package gguf

import "os"

const isMapped = false

// mapFile reads the whole file where this package does not map files.
func mapFile(path string) ([]byte, error) { return os.ReadFile(path) }

func unmapFile([]byte) {}
