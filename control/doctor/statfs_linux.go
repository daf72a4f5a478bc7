package doctor

import (
	"fmt"
	"syscall"
)

// statFree is the space an unprivileged writer may use on dir's file
// system.
func statFree(dir string) (int64, error) {
	var s syscall.Statfs_t
	if err := syscall.Statfs(dir, &s); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	if s.Bsize <= 0 || s.Bavail > 1<<62/uint64(s.Bsize) {
		return 0, fmt.Errorf("statfs %s: implausible block size %d or count %d", dir, s.Bsize, s.Bavail)
	}
	return int64(s.Bavail) * int64(s.Bsize), nil
}
