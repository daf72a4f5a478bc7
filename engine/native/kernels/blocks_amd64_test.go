//go:build goexperiment.simd && amd64

package kernels

import (
	"math"
	"simd/archsimd"
	"testing"
	"unsafe"
)

// TestF16Bits: the vector kernels' widening gives F16ToF32's value for every half (subnormals, infinities, NaNs included).
func TestF16Bits(t *testing.T) {
	k := pow112()
	var out [8]float32
	for h := range 1 << 16 {
		b := [2]byte{byte(h), byte(h >> 8)}
		bcastF16(unsafe.Pointer(&b), k).Store(&out)
		archsimd.ClearAVXUpperBits()
		want := F16ToF32(uint16(h))
		if got := out[7]; math.Float32bits(got) != math.Float32bits(want) && !(math.IsNaN(float64(got)) && math.IsNaN(float64(want))) {
			t.Fatalf("bcastF16(%#04x) = %g (%#08x), want %g", h, got, math.Float32bits(got), want)
		}
	}
}
