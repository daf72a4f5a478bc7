//go:build !linux

package structured

import "time"

// threadCPU is not measured here: the CPU-time figures read 0.
func threadCPU() time.Duration { return 0 }
