package kernels

// Q8_0: Q8_0 weights in the file's 34-byte blocks (fp16 scale, then 32
// int8 quants), the one layout of Q8_0 weights: read where a GGUF file's
// mapping holds them, or made in memory by QuantizeMat. The products take
// Q8_0 activations (int8 quants and one fp32 scale per 32 values,
// QuantizeRows). Each level reads the quants at a 34-byte stride and
// widens each fp16 scale exactly to fp32 before its one fp32 multiply
// with the activation scale; the levels differ in integer lanes and
// float order (dispatch_simd.go), and each agrees with the portable loops
// below within the Q8_0 tolerance (TestQ8BlocksLevels).

// q8BlockBytes is the size of one Q8_0 block.
const q8BlockBytes = 34

// matQ8BPortable computes rows [lo,hi) of a Q8_0 product against T
// Q8_0 activation rows. Order of one output: per group in order, four
// exact int32 partial sums (values i mod 4) added, converted to float and
// multiplied by (weight scale × activation scale) into one accumulator.
func matQ8BPortable(out []float32, w *Mat, xq []int8, xs []float32, lo, hi, T int) {
	rows, cols := w.Rows, w.Cols
	g := cols / QK
	rb := g * q8BlockBytes
	for r := lo; r < hi; r++ {
		blk := w.B[r*rb : (r+1)*rb]
		for t := range T {
			out[t*rows+r] = dotQ8BPortable(blk, xq[t*cols:(t+1)*cols], xs[t*g:(t+1)*g])
		}
	}
}

func dotQ8BPortable(blk []byte, xq []int8, xs []float32) float32 {
	var acc float32
	_ = blk[len(xs)*q8BlockBytes-1]
	for g := range xs {
		x := blk[q8BlockBytes*g : q8BlockBytes*g+q8BlockBytes : q8BlockBytes*g+q8BlockBytes]
		a := x[2:34:34]
		b := xq[g*QK : g*QK+QK : g*QK+QK]
		var s0, s1, s2, s3 int32
		for i := 0; i < QK; i += 4 {
			s0 += int32(int8(a[i])) * int32(b[i])
			s1 += int32(int8(a[i+1])) * int32(b[i+1])
			s2 += int32(int8(a[i+2])) * int32(b[i+2])
			s3 += int32(int8(a[i+3])) * int32(b[i+3])
		}
		acc += float32(s0+s1+s2+s3) * (f16At(x, 0) * xs[g])
	}
	return acc
}

// checkQ8B panics unless a Q8_0 product over rows [lo,hi) and T ≥ 1
// tokens stays inside its slices; it returns the groups per row and the
// bytes per row.
func checkQ8B(out []float32, w *Mat, xq []int8, xs []float32, lo, hi, T int) (G, rb int) {
	rows, cols := w.Rows, w.Cols
	G = cols / QK
	rb = G * q8BlockBytes
	if w.Type != Q8_0 || G <= 0 || cols != G*QK || lo < 0 || hi > rows || T < 1 ||
		len(w.B) < hi*rb || len(xq) < T*cols || len(xs) < T*G || len(out) < (T-1)*rows+hi {
		panic("kernels: Q8_0 block product bounds")
	}
	return G, rb
}
