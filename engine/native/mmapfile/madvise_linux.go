//go:build linux

package mmapfile

import (
	"os"
	"syscall"
	"unsafe"
)

// Release drops this process's pages of b, a part of a mapping Map
// returned whose bytes were copied elsewhere (a tensor widened to fp32):
// madvise(MADV_DONTNEED) on the whole pages inside b. The mapping stays valid (read-only and shared, a later read
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
