//go:build !linux

package kernels

import "unsafe"

func adviseHuge(unsafe.Pointer, int) {}
