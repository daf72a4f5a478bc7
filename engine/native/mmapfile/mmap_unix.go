//go:build linux || darwin || freebsd

package mmapfile

import (
	"fmt"
	"os"
	"syscall"
)

// Mapped reports that Map maps files (false: it reads them).
const Mapped = true

// Map maps path read-only and shared (PROT_READ, MAP_SHARED): the
// kernel pages the weights in from the page cache on first touch and may
// drop them again under pressure, so a model costs resident memory only
// for what inference reads. An empty file cannot be mapped and is read as
// empty bytes (Parse then reports it).
func Map(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := st.Size()
	if size == 0 {
		return nil, nil
	}
	if size < 0 || int64(int(size)) != size {
		return nil, fmt.Errorf("%s: size %d cannot be mapped", path, size)
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("%s: mmap: %w", path, err)
	}
	return b, nil
}

// Unmap releases a mapping Map returned (unused where the bytes may
// still be referenced).
func Unmap(b []byte) {
	if len(b) > 0 {
		_ = syscall.Munmap(b)
	}
}
