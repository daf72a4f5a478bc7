package router

import (
	"syscall"
	"unsafe"
)

// threadCPU returns the calling thread's CPU time in ns (Linux
// CLOCK_THREAD_CPUTIME_ID). Decision latencies measured with it exclude
// time the thread spent descheduled, which on a shared 2-vCPU machine
// otherwise dominates the tail.
func threadCPU() int64 {
	const clockThreadCPUTimeID = 3
	var ts syscall.Timespec
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTimeID, uintptr(unsafe.Pointer(&ts)), 0)
	return ts.Nano()
}
