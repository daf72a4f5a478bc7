package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestF16ToF32Rows checks every finite half, widened at every kernel level
// through strided rows of several widths (vector steps and scalar tails),
// against F16ToF32 bit for bit.
func TestF16ToF32Rows(t *testing.T) {
	var finite []uint16
	for h := range 1 << 16 {
		if h>>10&0x1f != 0x1f {
			finite = append(finite, uint16(h))
		}
	}
	for _, lv := range kernelLevels() {
		t.Run(lv, func(t *testing.T) {
			defer setKernelLevel(lv)()
			for _, sh := range []struct{ width, stride int }{{64, 64}, {64, 768}, {16, 40}, {7, 9}, {37, 50}, {128, 128}} {
				t.Run(fmt.Sprintf("%dof%d", sh.width, sh.stride), func(t *testing.T) {
					rows := (len(finite) + sh.width - 1) / sh.width
					src := make([]uint16, (rows-1)*sh.stride+sh.width)
					for i, h := range finite {
						src[i/sh.width*sh.stride+i%sh.width] = h
					}
					dst := make([]float32, rows*sh.width)
					F16ToF32Rows(dst, sh.width, src, sh.stride, rows, sh.width)
					for i := range dst {
						h := src[i/sh.width*sh.stride+i%sh.width]
						if want := F16ToF32(h); math.Float32bits(dst[i]) != math.Float32bits(want) {
							t.Fatalf("half %#04x: got %g (%#08x), want %g", h, dst[i], math.Float32bits(dst[i]), want)
						}
					}
				})
			}
		})
	}
}

// TestF32ToF16RowRoundTrip: narrowing then widening is F32ToF16 then
// F16ToF32 (round to nearest even), and exact for values a half holds.
func TestF32ToF16RowRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	src := make([]float32, 1000)
	for i := range src {
		src[i] = float32(r.NormFloat64() * math.Pow(10, float64(r.IntN(9)-5)))
	}
	src[0], src[1], src[2] = 65504, -0.5, float32(math.Ldexp(1, -24))
	h := make([]uint16, len(src))
	F32ToF16Row(h, src)
	back := make([]float32, len(src))
	F16ToF32Rows(back, len(h), h, len(h), 1, len(h))
	for i, f := range src {
		if want := F16ToF32(F32ToF16(f)); back[i] != want {
			t.Fatalf("%g: got %g, want %g", f, back[i], want)
		}
		if rel := math.Abs(float64(back[i]-f)) / math.Abs(float64(f)); math.Abs(float64(f)) > 6.2e-5 && rel > 1.0/2048 {
			t.Fatalf("%g: round trip %g, relative error %g over half an ulp", f, back[i], rel)
		}
	}
	for i := range 3 {
		if back[i] != src[i] {
			t.Fatalf("%g is a half but came back %g", src[i], back[i])
		}
	}
}

// TestF32ToF16RowLevels: every level narrows bit for bit as F32ToF16,
// on every float32 whose bits are a multiple of 997 apart (4.3 million,
// every exponent and sign, infinities and NaNs among them) plus the
// rounding boundaries of the half range.
func TestF32ToF16RowLevels(t *testing.T) {
	var src []float32
	for b := uint64(0); b < 1<<32; b += 997 {
		src = append(src, math.Float32frombits(uint32(b)))
	}
	for _, f := range []float32{65504, 65519.996, 65520, 65536, 6.1035156e-05, 6.097555e-05, 5.9604645e-08, 2.9802322e-08, 2.9802326e-08, 1.7881393e-07} {
		src = append(src, f, -f)
	}
	src = append(src, float32(math.Inf(1)), float32(math.NaN()), 0)
	for _, lv := range kernelLevels() {
		t.Run(lv, func(t *testing.T) {
			defer setKernelLevel(lv)()
			dst := make([]uint16, len(src))
			F32ToF16Row(dst, src)
			for i, f := range src {
				if want := F32ToF16(f); dst[i] != want {
					t.Fatalf("%g (%#08x): %#04x, want %#04x", f, math.Float32bits(f), dst[i], want)
				}
			}
		})
	}
}
