//go:build darwin || freebsd

package mmapfile

// populate is a no-op where madvise has no MADV_POPULATE_READ: the reads
// fault the pages in.
func populate([]byte) {}
