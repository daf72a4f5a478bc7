//go:build !linux

package router

// threadCPU is unavailable off Linux; the CPU-time metrics then read 0.
func threadCPU() int64 { return 0 }
