package kernels

// Scratch holds per-caller buffers of the products (the quantized
// activations of a Q8_0 product), so steady-state decoding allocates nothing.
type Scratch struct {
	q []int8
	s []float32
}

// rowGrain keeps each thread's row range a multiple of the widest row tile.
const rowGrain = 16

// MatMul computes out[t*w.Rows+r] = dot(w row r, x[t*w.Cols:(t+1)*w.Cols])
// for T activation rows. Each output is reduced in the same order whatever
// T is, so batched and single-token passes agree bitwise.
func (p *Pool) MatMul(out []float32, w *Mat, x []float32, T int, sc *Scratch) {
	rows, cols := w.Rows, w.Cols
	out, x = out[:T*rows], x[:T*cols]
	switch w.Type {
	case F32:
		p.Run(rows, rowGrain, func(lo, hi int) { matF32(out, w.F, x, lo, hi, rows, cols, T) })
	case Q8_0:
		n := T * cols
		if cap(sc.q) < n {
			sc.q = make([]int8, n)
			sc.s = make([]float32, n/QK)
		}
		q, s := sc.q[:n], sc.s[:n/QK]
		QuantizeRows(x, q, s)
		p.Run(rows, rowGrain, func(lo, hi int) { matQ8(out, w.Q, w.S, q, s, lo, hi, rows, cols, T) })
	}
}

// Dot is the fp32 dot product used outside the matrix products (attention
// scores). It has the same fixed reduction order in every call.
func Dot(a, b []float32) float32 { return dotF32(a, b[:len(a)]) }

// Axpy adds a*x to y.
func Axpy(a float32, x, y []float32) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] += a * v
	}
}

func matF32Portable(out, w, x []float32, lo, hi, rows, cols, T int) {
	for r := lo; r < hi; r++ {
		wr := w[r*cols : (r+1)*cols]
		for t := range T {
			out[t*rows+r] = dotF32Portable(wr, x[t*cols:(t+1)*cols])
		}
	}
}

// dotF32Portable keeps four partial sums so the adds pipeline; the order
// (lanes i mod 4, then pairwise, then the tail) is part of the contract.
func dotF32Portable(a, b []float32) float32 {
	n := len(a)
	b = b[:n]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= n; i += 4 {
		aa, bb := a[i:i+4:i+4], b[i:i+4:i+4]
		s0 += aa[0] * bb[0]
		s1 += aa[1] * bb[1]
		s2 += aa[2] * bb[2]
		s3 += aa[3] * bb[3]
	}
	s := (s0 + s1) + (s2 + s3)
	for ; i < n; i++ {
		s += a[i] * b[i]
	}
	return s
}

func matQ8Portable(out []float32, wq []int8, ws []float32, xq []int8, xs []float32, lo, hi, rows, cols, T int) {
	g := cols / QK
	for r := lo; r < hi; r++ {
		rq, rs := wq[r*cols:(r+1)*cols], ws[r*g:(r+1)*g]
		for t := range T {
			out[t*rows+r] = dotQ8Portable(rq, rs, xq[t*cols:(t+1)*cols], xs[t*g:(t+1)*g])
		}
	}
}

func dotQ8Portable(wq []int8, ws []float32, xq []int8, xs []float32) float32 {
	var acc float32
	xs = xs[:len(ws)]
	for g := range ws {
		a := wq[g*QK : g*QK+QK : g*QK+QK]
		b := xq[g*QK : g*QK+QK : g*QK+QK]
		var s0, s1, s2, s3 int32
		for i := 0; i < QK; i += 4 {
			s0 += int32(a[i]) * int32(b[i])
			s1 += int32(a[i+1]) * int32(b[i+1])
			s2 += int32(a[i+2]) * int32(b[i+2])
			s3 += int32(a[i+3]) * int32(b[i+3])
		}
		acc += float32(s0+s1+s2+s3) * (ws[g] * xs[g])
	}
	return acc
}
