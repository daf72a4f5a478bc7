package kernels

import "math"

// Q8_K activations for the k-quants (Q4_K, Q5_K, Q6_K), ggml's block_q8_K
// (ggml/src/ggml-common.h of https://github.com/ggml-org/llama.cpp) kept
// as three parallel slices instead of one struct per block:
//
//	q   int8 per value, in [−127, 127]
//	d   one fp32 scale per super-block of QKK = 256 values
//	bs  int16 per 16 values: the sum of those 16 quantized values
//
// One scale per 256 values (instead of one per 32, the Q8_0 layout)
// lets a k-quant product keep the whole super-block's sum in int32 and
// convert and scale once per 256 values; the bsums give the Q4_K/Q5_K
// min terms (Σ_j m_j·Σ_{sub-block j} x) and Q6_K's −32 offset
// (Σ_k sc_k·32·Σ_{16 values} x) without touching the values again.
//
// The quantizer follows quantize_row_q8_K_ref of ggml/src/ggml-quants.c:
// the scale comes from the value of largest magnitude (the first one, on
// a tie), iscale = −127/max, each value is nearest_int(iscale·x) (round
// half to even) clamped to at most 127, and d = 1/iscale.

// QKK is the k-quant super-block: 256 activations share one fp32 scale.
const QKK = 256

// bsumsPer is the number of values each Q8_K bsum covers.
const bsumsPer = 16

// q8kRows is the Q8_K form of T activation rows.
type q8kRows struct {
	q  []int8    // T*cols values
	d  []float32 // T*cols/QKK scales
	bs []int16   // T*cols/16 sums
}

// isKQuant reports a weight type whose products take Q8_K activations.
func isKQuant(t DType) bool { return t == Q4_K || t == Q5_K || t == Q6_K }

// quantizeRowsK quantizes len(x)/QKK super-blocks of x into q, d and bs.
// Every kernel level gives the same bytes (TestQuantizeRowsKLevels).
func quantizeRowsK(x []float32, q []int8, d []float32, bs []int16) {
	n := len(x) / QKK
	if n == 0 {
		return
	}
	_, _, _ = q[n*QKK-1], d[n-1], bs[n*QKK/bsumsPer-1]
	quantizeK(x[:n*QKK], q, d, bs)
}

func quantizeRowsKPortable(x []float32, q []int8, d []float32, bs []int16) {
	for i := range len(x) / QKK {
		quantizeSuperK(x[i*QKK:(i+1)*QKK:(i+1)*QKK], q[i*QKK:(i+1)*QKK:(i+1)*QKK], &d[i], bs[i*16:(i+1)*16:(i+1)*16])
	}
}

func quantizeSuperK(x []float32, q []int8, d *float32, bs []int16) {
	var amax, vmax float32
	for _, v := range x {
		if a := abs32(v); a > amax {
			amax, vmax = a, v
		}
	}
	if amax == 0 {
		*d = 0
		clear(q)
		clear(bs)
		return
	}
	iscale := -127 / vmax
	for i, v := range x {
		// |iscale·v| ≤ 127 up to one rounding, so only the top needs the
		// clamp (ggml's MIN(127, v)); the bottom is −127 at worst.
		q[i] = int8(min(127, math.RoundToEven(float64(iscale*v))))
	}
	for k := range bs {
		var s int16 // |s| ≤ 16·127 = 2032
		for _, v := range q[16*k : 16*k+16] {
			s += int16(v)
		}
		bs[k] = s
	}
	*d = 1 / iscale
}

// prepareK quantizes x (T rows of cols values, cols a multiple of QKK)
// into the Q8_K buffers of sc.
func (sc *Scratch) prepareK(x []float32, T, cols int) q8kRows {
	n := T * cols
	if cap(sc.kq) < n {
		sc.kq = make([]int8, n)
		sc.kd = make([]float32, n/QKK)
		sc.kbs = make([]int16, n/bsumsPer)
	}
	r := q8kRows{q: sc.kq[:n], d: sc.kd[:n/QKK], bs: sc.kbs[:n/bsumsPer]}
	quantizeRowsK(x[:n], r.q, r.d, r.bs)
	return r
}

// matKQuant computes rows [lo,hi) of a k-quant product against T Q8_K
// activation rows.
func matKQuant(out []float32, w *Mat, a q8kRows, lo, hi, T int) {
	if matKQuantFast(out, w, a, lo, hi, T) {
		return
	}
	matKQuantPortable(out, w, a, lo, hi, T)
}

func matKQuantPortable(out []float32, w *Mat, a q8kRows, lo, hi, T int) {
	rows, cols := w.Rows, w.Cols
	rb, _ := BlockRowBytes(w.Type, cols)
	nb := cols / QKK
	for r := lo; r < hi; r++ {
		blk := w.B[r*rb : (r+1)*rb]
		for t := range T {
			y := a.q[t*cols : (t+1)*cols]
			d := a.d[t*nb : (t+1)*nb]
			bs := a.bs[t*cols/bsumsPer : (t+1)*cols/bsumsPer]
			out[t*rows+r] = dotKQuant(w.Type, blk, y, d, bs)
		}
	}
}

// dotKQuant is one output of the portable k-quant loops: per super-block
// the exact int32 sums, then d·dx·sumi − dmin·dx·mins in float.
func dotKQuant(typ DType, blk []byte, y []int8, d []float32, bs []int16) float32 {
	_, size := blockGeom(typ)
	var acc float32
	for i, dx := range d {
		x := blk[size*i : size*(i+1) : size*(i+1)]
		yi := y[QKK*i : QKK*(i+1) : QKK*(i+1)]
		bi := bs[16*i : 16*(i+1) : 16*(i+1)]
		switch typ {
		case Q4_K, Q5_K:
			var sumi, mins int32
			if typ == Q4_K {
				sumi, mins = q4kSums(x, yi, bi)
			} else {
				sumi, mins = q5kSums(x, yi, bi)
			}
			acc += f16At(x, 0)*dx*float32(sumi) - f16At(x, 2)*dx*float32(mins)
		case Q6_K:
			acc += f16At(x, 208) * dx * float32(q6kSums(x, yi, bi))
		}
	}
	return acc
}

// q4kSums is one Q4_K super-block x against 256 Q8_K values y with
// bsums bs: sumi = Σ_j sc_j·Σ_{sub-block j} q·y and mins = Σ_j m_j·Σ_{sub-block j} y,
// both exact (|sumi| ≤ 256·15·127·63 < 2^25, |mins| ≤ 256·127·63 < 2^21).
func q4kSums(x []byte, y []int8, bs []int16) (sumi, mins int32) {
	sc, qs := x[4:16], x[16:144:144]
	for j := range 4 {
		q := qs[32*j : 32*j+32 : 32*j+32]
		y0, y1 := y[64*j:64*j+32:64*j+32], y[64*j+32:64*j+64:64*j+64]
		var p0, p1 int32
		for l := range 32 {
			p0 += int32(q[l]&0xF) * int32(y0[l])
			p1 += int32(q[l]>>4) * int32(y1[l])
		}
		sumi, mins = addSubBlocks(sumi, mins, sc, j, p0, p1, bs)
	}
	return sumi, mins
}

// q5kSums is q4kSums for Q5_K (values 0..31: the fifth bit from qh).
func q5kSums(x []byte, y []int8, bs []int16) (sumi, mins int32) {
	sc, qh, qs := x[4:16], x[16:48:48], x[48:176:176]
	for j := range 4 {
		q := qs[32*j : 32*j+32 : 32*j+32]
		y0, y1 := y[64*j:64*j+32:64*j+32], y[64*j+32:64*j+64:64*j+64]
		var p0, p1 int32
		for l := range 32 {
			h := qh[l] >> (2 * j)
			p0 += int32(q[l]&0xF|(h&1)<<4) * int32(y0[l])
			p1 += int32(q[l]>>4|(h&2)<<3) * int32(y1[l])
		}
		sumi, mins = addSubBlocks(sumi, mins, sc, j, p0, p1, bs)
	}
	return sumi, mins
}

// addSubBlocks adds sub-blocks 2j and 2j+1 (raw sums p0, p1) to the
// scaled sum and their mins times their bsums to the min sum.
func addSubBlocks(sumi, mins int32, sc []byte, j int, p0, p1 int32, bs []int16) (int32, int32) {
	c0, m0 := scaleMinK4(2*j, sc)
	c1, m1 := scaleMinK4(2*j+1, sc)
	sumi += int32(c0)*p0 + int32(c1)*p1
	mins += int32(m0)*(int32(bs[4*j])+int32(bs[4*j+1])) + int32(m1)*(int32(bs[4*j+2])+int32(bs[4*j+3]))
	return sumi, mins
}

// q6kSums is one Q6_K super-block against 256 Q8_K values: Σ_k sc_k ·
// Σ_{16 values of k} (q−32)·y, computed as ggml's vec_dot_q6_K_q8_K does,
// on the unsigned q (0..63) with 32·sc_k·bsum_k subtracted; exact
// (|result| ≤ 256·63·127·128 + 32·256·127·128 < 2^29).
func q6kSums(x []byte, y []int8, bs []int16) int32 {
	var s [16]int32 // Σ q·y per 16 values, in value order
	for n := range 2 {
		ql, qh := x[64*n:64*n+64:64*n+64], x[128+32*n:128+32*n+32:128+32*n+32]
		a := y[128*n : 128*n+128 : 128*n+128]
		for l := range 32 {
			is := 8*n + l/16
			s[is] += int32(ql[l]&0xF|(qh[l]&3)<<4) * int32(a[l])
			s[is+2] += int32(ql[l+32]&0xF|(qh[l]>>2&3)<<4) * int32(a[l+32])
			s[is+4] += int32(ql[l]>>4|(qh[l]>>4&3)<<4) * int32(a[l+64])
			s[is+6] += int32(ql[l+32]>>4|(qh[l]>>6&3)<<4) * int32(a[l+96])
		}
	}
	sc := x[192:208:208]
	var sumi int32
	for k := range 16 {
		c := int32(int8(sc[k]))
		sumi += c * (s[k] - 32*int32(bs[k]))
	}
	return sumi
}
