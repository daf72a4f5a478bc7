package mmapfile

import "syscall"

// madvPopulateRead is MADV_POPULATE_READ (Linux 5.14), absent from package
// syscall.
const madvPopulateRead = 22

func populate(b []byte) {
	_ = syscall.Madvise(b, madvPopulateRead) // advisory: EINVAL on older kernels, the reads fault instead
}
