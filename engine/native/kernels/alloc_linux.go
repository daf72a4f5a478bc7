//go:build linux

package kernels

import (
	"syscall"
	"unsafe"
)

const hugePage = 2 << 20

// adviseHuge asks Linux to back the 2 MiB-aligned interior of the n bytes
// at p with transparent huge pages (MADV_HUGEPAGE; it matters where THP is
// in "madvise" mode, the common default). Fresh large allocations are not
// yet touched, so the pages are huge from the first fault. Failure is
// harmless and ignored: the memory just keeps 4 KiB pages.
func adviseHuge(p unsafe.Pointer, n int) {
	if n < 2*hugePage {
		return
	}
	start := (uintptr(p) + hugePage - 1) &^ (hugePage - 1)
	end := (uintptr(p) + uintptr(n)) &^ (hugePage - 1)
	if end <= start {
		return
	}
	b := unsafe.Slice((*byte)(unsafe.Add(p, int(start-uintptr(p)))), int(end-start))
	_ = syscall.Madvise(b, syscall.MADV_HUGEPAGE)
}
