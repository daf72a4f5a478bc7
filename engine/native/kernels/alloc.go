package kernels

import "unsafe"

// NewF32 allocates n weights. Large allocations are advised for huge pages
// before they are first touched (see adviseHuge): decode streams every
// weight once per token, and with 4 KiB pages that is a TLB miss every
// 1,024 values.
func NewF32(n int) []float32 {
	s := make([]float32, n)
	if n > 0 {
		adviseHuge(unsafe.Pointer(&s[0]), 4*n)
	}
	return s
}

// NewBytes is NewF32 for raw blocks (a model's weights copied out of its
// file's mapping, Model.CopyOutOfMapping, or quantized in memory,
// QuantizeMat).
func NewBytes(n int) []byte {
	s := make([]byte, n)
	if n > 0 {
		adviseHuge(unsafe.Pointer(&s[0]), n)
	}
	return s
}
