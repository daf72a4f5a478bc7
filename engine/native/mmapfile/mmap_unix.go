//go:build linux || darwin || freebsd

package mmapfile

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"
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

// Release drops this process's pages of b, a part of a mapping Map
// returned whose bytes were copied elsewhere (a tensor repacked into the
// layout its kernels read): madvise(MADV_DONTNEED) on the whole pages
// inside b. The mapping stays valid (read-only and shared, a later read
// faults the file's bytes in again), but the copied bytes no longer count
// twice in the resident set. Only for slices of a mapping: on heap memory
// it would zero live data, so callers check File.Mapped first.
func Release(b []byte) {
	if len(b) == 0 {
		return
	}
	page := uintptr(os.Getpagesize())
	p := uintptr(unsafe.Pointer(&b[0]))
	start := (p + page - 1) &^ (page - 1)
	end := (p + uintptr(len(b))) &^ (page - 1)
	if end <= start {
		return
	}
	_ = syscall.Madvise(b[start-p:end-p], syscall.MADV_DONTNEED) // advisory: the pages only stay resident
}

// Populate maps b's pages, a part of a mapping Map returned that is about
// to be read whole, in one call (madvise MADV_POPULATE_READ, Linux 5.14
// and later) instead of a page fault per few pages. Advisory: where the
// kernel lacks it the reads fault the pages in as before.
func Populate(b []byte) {
	if len(b) == 0 {
		return
	}
	page := uintptr(os.Getpagesize())
	p := uintptr(unsafe.Pointer(&b[0]))
	start := p &^ (page - 1)
	// start is inside the mapping, which Map made page-aligned.
	whole := unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(&b[0]), -int(p-start))), int(p+uintptr(len(b))-start))
	populate(whole)
}
