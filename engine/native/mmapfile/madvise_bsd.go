//go:build darwin || freebsd

package mmapfile

// Release is a no-op where package syscall has no madvise: the copied
// pages stay resident until the kernel reclaims them (clean, file-backed
// pages, so under pressure they go first).
func Release([]byte) {}
