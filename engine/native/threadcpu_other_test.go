//go:build !linux

package native

import "time"

// threadCPU is not measured here: the thread CPU figures read 0.
func threadCPU() time.Duration { return 0 }
