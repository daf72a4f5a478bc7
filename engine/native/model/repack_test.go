package model

import (
	"encoding/binary"
	"testing"

	"github.com/tandemllm/tandem/engine/native/kernels"
)

// TestRepackQ8: the parallel repack of Q8_0 blocks gives every quant and
// scale of the file, for sizes below, at and across the goroutine split.
func TestRepackQ8(t *testing.T) {
	for _, groups := range []int{1, 7, 1 << 15, 3<<15 + 5} {
		r := NewRand(uint64(groups))
		data := make([]byte, 34*groups)
		for i := range data {
			data[i] = byte(r.Uint64())
		}
		for g := range groups { // finite fp16 scales
			data[34*g+1] &= 0x3b
		}
		q, s := make([]int8, 32*groups), kernels.NewScales(groups)
		repackQ8(q, s, data)
		for g := range groups {
			if want := kernels.F16ToF32(binary.LittleEndian.Uint16(data[34*g:])); s[g] != want {
				t.Fatalf("%d groups: scale %d is %v, want %v", groups, g, s[g], want)
			}
			for i := range 32 {
				if q[32*g+i] != int8(data[34*g+2+i]) {
					t.Fatalf("%d groups: quant %d of group %d is %d, want %d", groups, i, g, q[32*g+i], int8(data[34*g+2+i]))
				}
			}
		}
	}
}
