package kernels

import (
	"encoding/binary"
	"fmt"
)

// Block types keep a matrix exactly as the GGUF file stores it (Mat.B,
// usually a slice of the file's read-only memory map): nothing is widened
// or copied at load. The layouts are ggml's, from ggml/src/ggml-common.h
// of https://github.com/ggml-org/llama.cpp, and the dequantization below
// follows dequantize_row_* in ggml/src/ggml-quants.c value for value:
//
//	Q8_0  32 values, 34 bytes: fp16 d; 32 int8 q; x = q·d.
//	Q4_0  32 values, 18 bytes: fp16 d; 16 bytes, low nibbles are values
//	      0..15, high nibbles 16..31; x = d·(q−8).
//	Q4_K  256 values, 144 bytes: fp16 d, fp16 dmin, 12 bytes of eight 6-bit
//	      scales and eight 6-bit mins (get_scale_min_k4), 128 bytes of
//	      nibbles (per 64 values: low nibbles the first 32, high the next);
//	      x = d·sc·q − dmin·m.
//	Q5_K  256 values, 176 bytes: Q4_K plus 32 bytes of fifth bits (qh)
//	      before the nibbles.
//	Q6_K  256 values, 210 bytes: 128 bytes of low nibbles, 64 bytes of
//	      2-bit high parts, 16 int8 scales (one per 16 values), fp16 d;
//	      x = d·sc·(q−32).
//
// Products reduce each weight block against int8 activations in
// integers, then scale. Q8_0 and Q4_0 take the Q8_0 activations (one fp32 scale
// per 32 values, as ggml's vec_dot_q4_0_q8_0); the k-quants take Q8_K
// activations (one fp32 scale per 256 values plus int16 sums of every 16,
// q8k.go), ggml's vec_dot_q*_K_q8_K scheme.

// blockGeom is a block type's values and bytes per block.
func blockGeom(t DType) (vals, bytes int) {
	switch t {
	case Q8_0:
		return 32, 34
	case Q4_0:
		return 32, 18
	case Q4_K:
		return 256, 144
	case Q5_K:
		return 256, 176
	case Q6_K:
		return 256, 210
	}
	return 0, 0
}

// IsBlock reports a type stored as raw ggml blocks in Mat.B.
func (d DType) IsBlock() bool { v, _ := blockGeom(d); return v > 0 }

// BlockRowBytes is the byte size of one row of cols values of a block
// type, or an error when cols is not whole blocks.
func BlockRowBytes(t DType, cols int) (int, error) {
	v, b := blockGeom(t)
	if v == 0 {
		return 0, fmt.Errorf("%v is not a block type", t)
	}
	if cols <= 0 || cols%v != 0 {
		return 0, fmt.Errorf("%v rows of %d values are not whole blocks of %d", t, cols, v)
	}
	return cols / v * b, nil
}

func f16At(b []byte, i int) float32 { return F16ToF32(binary.LittleEndian.Uint16(b[i:])) }

// scaleMinK4 is get_scale_min_k4 of ggml-quants.c: the j-th 6-bit scale
// and min of a Q4_K/Q5_K block's 12 scale bytes.
func scaleMinK4(j int, q []byte) (sc, m uint8) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return (q[j+4] & 0xF) | ((q[j-4] >> 6) << 4), (q[j+4] >> 4) | ((q[j] >> 6) << 4)
}

// DequantizeRow widens one row of blocks of type t into dst (len(dst)
// values).
func DequantizeRow(t DType, blk []byte, dst []float32) {
	vals, size := blockGeom(t)
	for b := range len(dst) / vals {
		x, y := blk[b*size:(b+1)*size], dst[b*vals:(b+1)*vals]
		switch t {
		case Q8_0:
			// Mat.Row's Q8_0 order (quant times scale).
			d := f16At(x, 0)
			for l := range 32 {
				y[l] = float32(int8(x[2+l])) * d
			}
		case Q4_0:
			d := f16At(x, 0)
			for l := range 16 {
				y[l] = d * float32(int(x[2+l]&0xF)-8)
				y[l+16] = d * float32(int(x[2+l]>>4)-8)
			}
		case Q4_K, Q5_K:
			d, dmin := f16At(x, 0), f16At(x, 2)
			sc := x[4:16]
			var qh, qs []byte
			if t == Q5_K {
				qh, qs = x[16:48], x[48:176]
			} else {
				qs = x[16:144]
			}
			for j := range 4 {
				s0, m0 := scaleMinK4(2*j, sc)
				s1, m1 := scaleMinK4(2*j+1, sc)
				d0, n0 := d*float32(s0), dmin*float32(m0)
				d1, n1 := d*float32(s1), dmin*float32(m1)
				q := qs[32*j : 32*j+32]
				for l := range 32 {
					lo, hi := int(q[l]&0xF), int(q[l]>>4)
					if qh != nil {
						lo += int(qh[l]>>(2*j)&1) << 4
						hi += int(qh[l]>>(2*j+1)&1) << 4
					}
					y[64*j+l] = d0*float32(lo) - n0
					y[64*j+32+l] = d1*float32(hi) - n1
				}
			}
		case Q6_K:
			d := f16At(x, 208)
			for n := range 2 {
				ql, qh, sc := x[64*n:64*n+64], x[128+32*n:128+32*n+32], x[192+8*n:192+8*n+8]
				for l := range 32 {
					is := l / 16
					q1 := int(ql[l]&0xF|(qh[l]>>0&3)<<4) - 32
					q2 := int(ql[l+32]&0xF|(qh[l]>>2&3)<<4) - 32
					q3 := int(ql[l]>>4|(qh[l]>>4&3)<<4) - 32
					q4 := int(ql[l+32]>>4|(qh[l]>>6&3)<<4) - 32
					y[128*n+l] = d * float32(int8(sc[is])) * float32(q1)
					y[128*n+l+32] = d * float32(int8(sc[is+2])) * float32(q2)
					y[128*n+l+64] = d * float32(int8(sc[is+4])) * float32(q3)
					y[128*n+l+96] = d * float32(int8(sc[is+6])) * float32(q4)
				}
			}
		}
	}
}

// GroupSums sets sum[g] to the sum of the int8 activations of group g:
// the portable Q4_0 offset needs it once per activation row, not once per
// weight row.
func GroupSums(xq []int8, sum []int32) {
	for g := range sum {
		var s int32
		for _, v := range xq[g*QK : g*QK+QK] {
			s += int32(v)
		}
		sum[g] = s
	}
}

// matBlocks computes rows [lo,hi) of a Q4_0 product against T Q8_0
// activation rows (the k-quants take Q8_K activations: matKQuant).
func matBlocks(out []float32, w *Mat, xq []int8, xs []float32, xsum []int32, lo, hi, T int) {
	if matBlocksFast(out, w, xq, xs, lo, hi, T) {
		return
	}
	rows, cols := w.Rows, w.Cols
	rb, _ := BlockRowBytes(w.Type, cols)
	g := cols / QK
	for r := lo; r < hi; r++ {
		blk := w.B[r*rb : (r+1)*rb]
		for t := range T {
			out[t*rows+r] = dotQ4_0(blk, xq[t*cols:(t+1)*cols], xs[t*g:(t+1)*g], xsum[t*g:(t+1)*g])
		}
	}
}

func dotQ4_0(blk []byte, xq []int8, xs []float32, xsum []int32) float32 {
	var acc float32
	for b := range xs {
		x := blk[18*b : 18*b+18 : 18*b+18]
		a := xq[32*b : 32*b+32 : 32*b+32]
		var s0, s1 int32
		for l := range 16 {
			s0 += int32(x[2+l]&0xF) * int32(a[l])
			s1 += int32(x[2+l]>>4) * int32(a[l+16])
		}
		acc += f16At(x, 0) * xs[b] * float32(s0+s1-8*xsum[b])
	}
	return acc
}
