//go:build linux

package structured

import (
	"syscall"
	"time"
	"unsafe"
)

// threadCPU is the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID):
// per-step costs on a loaded machine without the time the thread waited
// for a core. The caller locks its goroutine to the thread.
func threadCPU() time.Duration {
	var ts syscall.Timespec
	const clockThreadCPUTime = 3
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTime, uintptr(unsafe.Pointer(&ts)), 0)
	return time.Duration(ts.Nano())
}
