package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"sync"
)

// QuantizeBlocks encodes rows×cols fp32 values (row-major) as ggml blocks
// of type t, the bytes a GGUF tensor of that type holds. Q8_0 is
// QuantizeMat's blocks. Q4_0 follows quantize_row_q4_0_ref of
// ggml/src/ggml-quants.c exactly. The k-quants follow the reference layout and its two-pass scheme (per-sub-block
// scale and min, quantized to 6 bits, or 8 for Q6_K, against a
// super-block scale, then every value re-quantized with the rounded
// scales) but take each sub-block's scale from its range directly instead
// of ggml's iterative search (make_qkx2_quants): the files decode
// identically in llama.cpp, with somewhat higher error than
// llama-quantize's on real weights. Rows are spread over the cores.
func QuantizeBlocks(t DType, x []float32, rows, cols int) ([]byte, error) {
	rb, err := BlockRowBytes(t, cols)
	if err != nil {
		return nil, err
	}
	if rows < 0 || len(x) != rows*cols {
		return nil, fmt.Errorf("quantize: %d values for %dx%d", len(x), rows, cols)
	}
	out := make([]byte, rows*rb)
	return out, quantizeBlocksInto(out, t, x, rows, cols)
}

// quantizeBlocksInto is QuantizeBlocks into out (rows·BlockRowBytes(t,
// cols) bytes).
func quantizeBlocksInto(out []byte, t DType, x []float32, rows, cols int) error {
	rb, err := BlockRowBytes(t, cols)
	if err != nil {
		return err
	}
	if rows < 0 || len(x) != rows*cols || len(out) != rows*rb {
		return fmt.Errorf("quantize: %d values and %d bytes for %v %dx%d", len(x), len(out), t, rows, cols)
	}
	vals, size := blockGeom(t)
	nw := min(runtime.GOMAXPROCS(0), max(1, rows/16))
	var wg sync.WaitGroup
	for w := range nw {
		lo, hi := rows*w/nw, rows*(w+1)/nw
		wg.Go(func() {
			for r := lo; r < hi; r++ {
				for b := range cols / vals {
					src := x[r*cols+b*vals : r*cols+(b+1)*vals]
					dst := out[r*rb+b*size : r*rb+(b+1)*size]
					switch t {
					case Q8_0:
						quantQ8_0(src, dst)
					case Q4_0:
						quantQ4_0(src, dst)
					case Q4_K:
						quantQ45K(src, dst, 15)
					case Q5_K:
						quantQ45K(src, dst, 31)
					case Q6_K:
						quantQ6K(src, dst)
					}
				}
			}
		})
	}
	wg.Wait()
	return nil
}

// quantQ8_0 is QuantizeMat's quantization of one group of 32, written as
// a block: the same fp16 scale and quants.
func quantQ8_0(x []float32, y []byte) {
	var amax float32
	for _, v := range x {
		amax = max(amax, abs32(v))
	}
	h := F32ToF16(amax / 127)
	binary.LittleEndian.PutUint16(y, h)
	d := F16ToF32(h)
	var id float32
	if d != 0 {
		id = 1 / d
	}
	for i, v := range x {
		y[2+i] = byte(int8(max(-127, min(127, roundAway(v*id)))))
	}
}

func putF16(b []byte, f float32) { binary.LittleEndian.PutUint16(b, F32ToF16(f)) }

func nearestInt(f float32) int { return int(math.RoundToEven(float64(f))) }

func quantQ4_0(x []float32, y []byte) {
	var amax, vmax float32
	for _, v := range x {
		if a := abs32(v); amax < a {
			amax, vmax = a, v
		}
	}
	d := vmax / -8
	var id float32
	if d != 0 {
		id = 1 / d
	}
	putF16(y, d)
	for j := range 16 {
		// (int8_t)(x*id + 8.5f) truncates toward zero, as C's conversion.
		q0 := min(15, int8(x[j]*id+8.5))
		q1 := min(15, int8(x[16+j]*id+8.5))
		y[2+j] = uint8(q0) | uint8(q1)<<4
	}
}

// quantQ45K writes a Q4_K (nmax 15) or Q5_K (nmax 31) block.
func quantQ45K(x []float32, y []byte, nmax int) {
	var scales, mins [8]float32
	var maxScale, maxMin float32
	for j := range 8 {
		s := x[32*j : 32*j+32]
		lo, hi := s[0], s[0]
		for _, v := range s {
			lo, hi = min(lo, v), max(hi, v)
		}
		lo = min(lo, 0)
		scales[j], mins[j] = (hi-lo)/float32(nmax), -lo
		maxScale, maxMin = max(maxScale, scales[j]), max(maxMin, mins[j])
	}
	var invS, invM float32
	if maxScale > 0 {
		invS = 63 / maxScale
	}
	if maxMin > 0 {
		invM = 63 / maxMin
	}
	sc := y[4:16]
	clear(sc)
	for j := range 8 {
		ls := uint8(min(63, nearestInt(invS*scales[j])))
		lm := uint8(min(63, nearestInt(invM*mins[j])))
		if j < 4 {
			sc[j], sc[j+4] = ls, lm
		} else {
			sc[j+4] = ls&0xF | (lm&0xF)<<4
			sc[j-4] |= (ls >> 4) << 6
			sc[j] |= (lm >> 4) << 6
		}
	}
	putF16(y[0:], maxScale/63)
	putF16(y[2:], maxMin/63)
	d, dmin := f16At(y, 0), f16At(y, 2)
	var L [256]uint8
	for j := range 8 {
		s, m := scaleMinK4(j, sc)
		dd := d * float32(s)
		if dd == 0 {
			continue
		}
		dm := dmin * float32(m)
		for i := range 32 {
			L[32*j+i] = uint8(max(0, min(nmax, nearestInt((x[32*j+i]+dm)/dd))))
		}
	}
	if nmax == 15 {
		qs := y[16:144]
		for j := range 4 {
			for l := range 32 {
				qs[32*j+l] = L[64*j+l] | L[64*j+32+l]<<4
			}
		}
		return
	}
	qh, qs := y[16:48], y[48:176]
	clear(qh)
	for j := range 4 {
		for l := range 32 {
			l1, l2 := L[64*j+l], L[64*j+32+l]
			if l1 > 15 {
				l1 -= 16
				qh[l] |= 1 << (2 * j)
			}
			if l2 > 15 {
				l2 -= 16
				qh[l] |= 2 << (2 * j)
			}
			qs[32*j+l] = l1 | l2<<4
		}
	}
}

func quantQ6K(x []float32, y []byte) {
	var scales [16]float32
	var maxScale, maxAbs float32
	for j := range 16 {
		var amax, vmax float32
		for _, v := range x[16*j : 16*j+16] {
			if a := abs32(v); a > amax {
				amax, vmax = a, v
			}
		}
		scales[j] = vmax / -32
		if a := abs32(scales[j]); a > maxAbs {
			maxAbs, maxScale = a, scales[j]
		}
	}
	sc := y[192:208]
	if maxAbs == 0 {
		clear(y)
		return
	}
	iscale := -128 / maxScale
	for j := range 16 {
		sc[j] = uint8(int8(max(-128, min(127, nearestInt(iscale*scales[j])))))
	}
	putF16(y[208:], 1/iscale)
	d := f16At(y, 208)
	var L [256]uint8
	for j := range 16 {
		dd := d * float32(int8(sc[j]))
		if dd == 0 {
			for i := range 16 {
				L[16*j+i] = 32
			}
			continue
		}
		for i := range 16 {
			L[16*j+i] = uint8(max(-32, min(31, nearestInt(x[16*j+i]/dd))) + 32)
		}
	}
	ql, qh := y[0:128], y[128:192]
	for n := range 2 {
		for l := range 32 {
			a, b, c, e := L[128*n+l], L[128*n+l+32], L[128*n+l+64], L[128*n+l+96]
			ql[64*n+l] = a&0xF | (c&0xF)<<4
			ql[64*n+l+32] = b&0xF | (e&0xF)<<4
			qh[32*n+l] = a>>4 | (b>>4)<<2 | (c>>4)<<4 | (e>>4)<<6
		}
	}
}
