package kernels

// Scratch holds per-caller buffers of the products (the quantized
// activations: Q8_0 layout for Q8_0 and Q4_0 weights, Q8_K for the
// k-quants), so steady-state decoding allocates nothing.
type Scratch struct {
	q   []int8
	s   []float32
	sum []int32
	kq  []int8
	kd  []float32
	kbs []int16
}

// rowGrain keeps each range of rows a multiple of the widest row tile (and
// of a 64-byte line of fp32 outputs).
const rowGrain = 16

// Prod is one product of a fused MatMulMulti: Out[t*W.Rows+r] = W row r ·
// x_t.
type Prod struct {
	Out []float32
	W   *Mat
}

// maxProds bounds how many products one fused call carries (Q, K and V).
const maxProds = 3

// matJob is the pool's product job: up to maxProds matrices sharing one
// input, their rows concatenated into one range, and an optional SwiGLU
// applied by the thread that computed both of its operands.
type matJob struct {
	prods  [maxProds]Prod
	n      int
	x      []float32
	xq     []int8
	xs     []float32
	xsum   []int32     // per-group sums of xq, for Q4_0
	k      q8kRows     // Q8_K activations, for the k-quants
	f16    [][]float32 // per thread: F16 rows widened (f16Tile·cols)
	T      int
	swiglu bool // prods[0] is the gate, prods[1] the up projection
}

// Run computes the outputs of rows [lo,hi) of the concatenated products.
func (j *matJob) Run(w, lo, hi int) {
	if j.swiglu {
		g, u := j.prods[0], j.prods[1]
		j.one(w, g, lo, hi)
		j.one(w, u, lo, hi)
		rows := g.W.Rows
		for t := range j.T {
			SwiGLU(g.Out[t*rows+lo:t*rows+hi], u.Out[t*rows+lo:t*rows+hi])
		}
		return
	}
	base := 0
	for _, pr := range j.prods[:j.n] {
		rows := pr.W.Rows
		if a, b := max(lo, base), min(hi, base+rows); a < b {
			j.one(w, pr, a-base, b-base)
		}
		base += rows
	}
}

func (j *matJob) one(thread int, pr Prod, lo, hi int) {
	w := pr.W
	switch w.Type {
	case F32:
		matF32(pr.Out, w.F, j.x, lo, hi, w.Rows, w.Cols, j.T)
	case F16:
		matF16(pr.Out, w, j.x, lo, hi, j.T, j.f16[thread])
	case Q8_0:
		matQ8B(pr.Out, w, j.xq, j.xs, lo, hi, j.T)
	case Q4_K, Q5_K, Q6_K:
		matKQuant(pr.Out, w, j.k, lo, hi, j.T)
	default:
		matBlocks(pr.Out, w, j.xq, j.xs, j.xsum, lo, hi, j.T)
	}
}

// prepare checks shapes and quantizes x once per activation layout the
// products need: a fused call over a mixed file (Q4_K_M mixes Q4_K and
// Q6_K, sometimes Q8_0) may need both. F16 products get their threads'
// widening buffers from the pool.
func (j *matJob) prepare(p *Pool, x []float32, T int, sc *Scratch) {
	cols := j.prods[0].W.Cols
	j.x, j.T = x[:T*cols], T
	j.xq, j.xs, j.xsum, j.k = nil, nil, nil, q8kRows{}
	for _, pr := range j.prods[:j.n] {
		if pr.W.Cols != cols {
			panic("kernels: fused products need one input width")
		}
		_ = pr.Out[:T*pr.W.Rows]
		switch t := pr.W.Type; {
		case t == F16:
			j.f16 = p.f16Buffers(cols)
		case isKQuant(t):
			if j.k.q == nil {
				j.k = sc.prepareK(j.x, T, cols)
			}
		case t != F32 && t != F16 && j.xq == nil:
			n := T * cols
			if cap(sc.q) < n {
				sc.q = make([]int8, n)
				sc.s = NewScales(n / QK)
			}
			j.xq, j.xs = sc.q[:n], sc.s[:n/QK]
			QuantizeRows(j.x, j.xq, j.xs)
		}
		if pr.W.Type == Q4_0 && j.xsum == nil {
			n := T * cols / QK
			if cap(sc.sum) < n {
				sc.sum = make([]int32, n)
			}
			j.xsum = sc.sum[:n]
		}
	}
	if j.xsum != nil {
		GroupSums(j.xq, j.xsum)
	}
}

// MatMul computes out[t*w.Rows+r] = dot(w row r, x[t*w.Cols:(t+1)*w.Cols])
// for T activation rows. Each output is reduced in the same order whatever
// T is, so batched and single-token passes agree bitwise.
func (p *Pool) MatMul(out []float32, w *Mat, x []float32, T int, sc *Scratch) {
	p.matMu.Lock()
	defer p.matMu.Unlock()
	j := &p.mat
	*j = matJob{n: 1}
	j.prods[0] = Prod{out, w}
	j.prepare(p, x, T, sc)
	p.RunJob(w.Rows, rowGrain, j)
}

// MatMulMulti runs up to three products that share the input x (the Q, K
// and V projections) as one parallel pass, quantizing x once. Every output
// is bitwise what MatMul alone would give.
func (p *Pool) MatMulMulti(prods []Prod, x []float32, T int, sc *Scratch) {
	if len(prods) == 0 || len(prods) > maxProds {
		panic("kernels: MatMulMulti takes 1 to 3 products")
	}
	p.matMu.Lock()
	defer p.matMu.Unlock()
	j := &p.mat
	*j = matJob{n: len(prods)}
	copy(j.prods[:], prods)
	j.prepare(p, x, T, sc)
	rows := 0
	for _, pr := range prods {
		rows += pr.W.Rows
	}
	p.RunJob(rows, rowGrain, j)
}

// MatMulSwiGLU sets g = silu(w1·x) * (w3·x) for T rows (u receives w3·x)
// as one parallel pass: each thread applies SwiGLU to the rows it just
// computed. The results are bitwise those of two MatMuls and SwiGLU.
func (p *Pool) MatMulSwiGLU(g, u []float32, w1, w3 *Mat, x []float32, T int, sc *Scratch) {
	if w1.Rows != w3.Rows {
		panic("kernels: gate and up projections differ in shape")
	}
	p.matMu.Lock()
	defer p.matMu.Unlock()
	j := &p.mat
	*j = matJob{n: 2, swiglu: true}
	j.prods[0], j.prods[1] = Prod{g, w1}, Prod{u, w3}
	j.prepare(p, x, T, sc)
	p.RunJob(w1.Rows, rowGrain, j)
}

// f16Buffers returns one widening buffer per thread for F16 products of
// cols columns, grown as needed and kept across calls (held under matMu).
func (p *Pool) f16Buffers(cols int) [][]float32 {
	for len(p.f16) < p.n {
		p.f16 = append(p.f16, nil)
	}
	for i, b := range p.f16 {
		if len(b) < f16Tile*cols {
			p.f16[i] = make([]float32, f16Tile*cols)
		}
	}
	return p.f16
}

// Dot is the fp32 dot product used outside the matrix products (attention
// scores). It has the same fixed reduction order in every call.
func Dot(a, b []float32) float32 { return dotF32(a, b[:len(a)]) }

// Axpy adds a*x to y.
func Axpy(a float32, x, y []float32) { axpyF32(a, x, y[:len(x)]) }

// DotStrided sets out[i] = Dot(q, m[i*stride:i*stride+len(q)]) for every i:
// the scores of a query against the keys of one KV block. Each result is
// bitwise what Dot gives.
func DotStrided(out, q, m []float32, stride int) {
	if len(out) == 0 {
		return
	}
	_ = m[(len(out)-1)*stride+len(q)-1]
	dotStrided(out, q, m, stride)
}

// AxpyStrided adds a[i]*m[i*stride:i*stride+len(y)] to y for every i in
// order: the value rows of one KV block weighted by their attention. The
// result is bitwise that of the same Axpy calls in sequence.
func AxpyStrided(a, m []float32, stride int, y []float32) {
	if len(a) == 0 {
		return
	}
	_ = m[(len(a)-1)*stride+len(y)-1]
	axpyStrided(a, m, stride, y)
}

// DotStridedN is DotStrided for nq queries against the same n keys:
// out[j*ostride+i] = Dot(q[j*qstride:j*qstride+hd], m[i*stride:i*stride+hd]).
// Each result is bitwise what DotStrided (and Dot) gives; the vector levels
// compute several queries per key load, so a KV block is read once per
// batch of queries instead of once per query.
func DotStridedN(out []float32, ostride int, q []float32, qstride, hd, nq int, m []float32, stride, n int) {
	if n <= 0 || nq <= 0 || hd <= 0 {
		return
	}
	_ = out[(nq-1)*ostride+n-1]
	_ = q[(nq-1)*qstride+hd-1]
	_ = m[(n-1)*stride+hd-1]
	dotStridedN(out, ostride, q, qstride, hd, nq, m, stride, n)
}

// AxpyStridedN is AxpyStrided for nq weight rows over the same n value
// rows: y[j*ystride:j*ystride+hd] += a[j*astride+i]*m[i*stride:...] for i
// in order, for each j < nq. Each y row is bitwise what AxpyStrided gives.
func AxpyStridedN(a []float32, astride, n int, m []float32, stride int, y []float32, ystride, hd, nq int) {
	if n <= 0 || nq <= 0 || hd <= 0 {
		return
	}
	_ = a[(nq-1)*astride+n-1]
	_ = y[(nq-1)*ystride+hd-1]
	_ = m[(n-1)*stride+hd-1]
	axpyStridedN(a, astride, n, m, stride, y, ystride, hd, nq)
}

// dotStridedNLoop and axpyStridedNLoop are the per-query fallbacks (the
// portable and AVX2 levels): the same results, one query at a time.
func dotStridedNLoop(out []float32, ostride int, q []float32, qstride, hd, nq int, m []float32, stride, n int) {
	for j := range nq {
		dotStrided(out[j*ostride:j*ostride+n], q[j*qstride:j*qstride+hd], m, stride)
	}
}

func axpyStridedNLoop(a []float32, astride, n int, m []float32, stride int, y []float32, ystride, hd, nq int) {
	for j := range nq {
		axpyStrided(a[j*astride:j*astride+n], m, stride, y[j*ystride:j*ystride+hd])
	}
}

// dotStridedNPortable is dotStridedPortable for two queries per key row
// loaded (eight partial sums in flight instead of four); each score keeps
// dotF32Portable's order.
func dotStridedNPortable(out []float32, ostride int, q []float32, qstride, hd, nq int, m []float32, stride, n int) {
	j := 0
	for ; j+2 <= nq; j += 2 {
		q0, q1 := q[j*qstride:j*qstride+hd], q[(j+1)*qstride:(j+1)*qstride+hd]
		o0, o1 := out[j*ostride:j*ostride+n], out[(j+1)*ostride:(j+1)*ostride+n]
		for i := range n {
			o0[i], o1[i] = dot2Portable(q0, q1, m[i*stride:i*stride+hd])
		}
	}
	if j < nq {
		dotStridedPortable(out[j*ostride:j*ostride+n], q[j*qstride:j*qstride+hd], m, stride)
	}
}

// dot2Portable is dotF32Portable(a, k) and dotF32Portable(b, k).
func dot2Portable(a, b, k []float32) (float32, float32) {
	n := len(k)
	a, b = a[:n], b[:n]
	var s0, s1, s2, s3, t0, t1, t2, t3 float32
	i := 0
	for ; i+4 <= n; i += 4 {
		kk, aa, bb := k[i:i+4:i+4], a[i:i+4:i+4], b[i:i+4:i+4]
		s0 += aa[0] * kk[0]
		t0 += bb[0] * kk[0]
		s1 += aa[1] * kk[1]
		t1 += bb[1] * kk[1]
		s2 += aa[2] * kk[2]
		t2 += bb[2] * kk[2]
		s3 += aa[3] * kk[3]
		t3 += bb[3] * kk[3]
	}
	s, t := (s0+s1)+(s2+s3), (t0+t1)+(t2+t3)
	for ; i < n; i++ {
		s += a[i] * k[i]
		t += b[i] * k[i]
	}
	return s, t
}

// axpyStridedNPortable is axpyStridedPortable for two weight rows per pass
// over the value rows, four values of each output held in locals; every
// value still gets its row terms one by one in row order.
func axpyStridedNPortable(a []float32, astride, n int, m []float32, stride int, y []float32, ystride, hd, nq int) {
	j := 0
	for ; j+2 <= nq; j += 2 {
		a0, a1 := a[j*astride:j*astride+n], a[(j+1)*astride:(j+1)*astride+n]
		y0, y1 := y[j*ystride:j*ystride+hd], y[(j+1)*ystride:(j+1)*ystride+hd]
		e := 0
		for ; e+4 <= hd; e += 4 {
			axpy2x4Portable(a0, a1, m[e:], stride, y0[e:e+4:e+4], y1[e:e+4:e+4])
		}
		for ; e < hd; e++ {
			u, w := y0[e], y1[e]
			for i := range n {
				v := m[i*stride+e]
				u += a0[i] * v
				w += a1[i] * v
			}
			y0[e], y1[e] = u, w
		}
	}
	if j < nq {
		axpyStridedPortable(a[j*astride:j*astride+n], m, stride, y[j*ystride:j*ystride+hd])
	}
}

func axpy2x4Portable(a0, a1, m []float32, stride int, y0, y1 []float32) {
	a1 = a1[:len(a0)]
	u0, u1, u2, u3 := y0[0], y0[1], y0[2], y0[3]
	w0, w1, w2, w3 := y1[0], y1[1], y1[2], y1[3]
	for i, x := range a0 {
		z := a1[i]
		r := m[i*stride : i*stride+4 : i*stride+4]
		u0 += x * r[0]
		w0 += z * r[0]
		u1 += x * r[1]
		w1 += z * r[1]
		u2 += x * r[2]
		w2 += z * r[2]
		u3 += x * r[3]
		w3 += z * r[3]
	}
	y0[0], y0[1], y0[2], y0[3] = u0, u1, u2, u3
	y1[0], y1[1], y1[2], y1[3] = w0, w1, w2, w3
}

func dotStridedPortable(out, q, m []float32, stride int) {
	for i := range out {
		out[i] = dotF32Portable(q, m[i*stride:i*stride+len(q)])
	}
}

func axpyStridedPortable(a, m []float32, stride int, y []float32) {
	for i, ai := range a {
		axpyPortable(ai, m[i*stride:i*stride+len(y)], y)
	}
}

func axpyPortable(a float32, x, y []float32) {
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
