package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestQuantizeRowsK checks quantize_row_q8_K_ref's rules one by one: the
// scale from the first value of largest magnitude (its sign decides the
// sign of d), round half to even, the 127 clamp, all-zero blocks, and
// bsums equal to the sums of their sixteen values.
func TestQuantizeRowsK(t *testing.T) {
	super := func(f func(i int) float32) []float32 {
		x := make([]float32, QKK)
		for i := range x {
			x[i] = f(i)
		}
		return x
	}
	for _, c := range []struct {
		name  string
		x     []float32
		d     float32
		check map[int]int8 // value index → wanted quant
	}{
		// The first largest magnitude is x[0] = −127 → iscale = 1, d = 1: q = x.
		{"identity", super(func(i int) float32 { return float32(i%255 - 127) }), 1, map[int]int8{0: -127, 254: 127, 127: 0}},
		// Ties round to even: ±0.5 → 0, 1.5 → −2 (iscale −1), 2.5 → −2.
		{"ties-even", super(func(i int) float32 {
			return [...]float32{127, 0.5, -0.5, 1.5, 2.5, -1.5}[min(i, 5)]
		}), -1, map[int]int8{1: 0, 2: 0, 3: -2, 4: -2, 5: 2}},
		// −127 first, +127 later: the first wins, so d = +1 and q = x.
		{"first-of-tie", super(func(i int) float32 {
			switch i {
			case 3:
				return -127
			case 9:
				return 127
			}
			return 1
		}), 1, map[int]int8{3: -127, 9: 127, 0: 1}},
		{"zeros", make([]float32, QKK), 0, map[int]int8{0: 0, 255: 0}},
	} {
		t.Run(c.name, func(t *testing.T) {
			q, d, bs := make([]int8, QKK), make([]float32, 1), make([]int16, QKK/bsumsPer)
			quantizeRowsK(c.x, q, d, bs)
			if d[0] != c.d {
				t.Fatalf("d = %g, want %g", d[0], c.d)
			}
			for i, w := range c.check {
				if q[i] != w {
					t.Errorf("q[%d] = %d, want %d", i, q[i], w)
				}
			}
			checkBsums(t, q, bs)
		})
	}
	// Random rows: |d·q − x| ≤ |d|/2 (plus rounding) and q in [−127, 127].
	r := rand.New(rand.NewPCG(5, 6))
	x := randVec(r, 8*QKK)
	x[3*QKK+17] = 40 // one outlier sets a block's scale
	q, d, bs := make([]int8, len(x)), make([]float32, len(x)/QKK), make([]int16, len(x)/bsumsPer)
	quantizeRowsK(x, q, d, bs)
	for i, v := range x {
		if q[i] == -128 {
			t.Fatalf("q[%d] = −128", i)
		}
		if e := math.Abs(float64(d[i/QKK])*float64(q[i]) - float64(v)); e > math.Abs(float64(d[i/QKK]))*0.5001 {
			t.Fatalf("value %d: |d·q − x| = %g, d = %g", i, e, d[i/QKK])
		}
	}
	checkBsums(t, q, bs)
}

func checkBsums(t *testing.T, q []int8, bs []int16) {
	t.Helper()
	for k := range bs {
		var s int
		for _, v := range q[16*k : 16*k+16] {
			s += int(v)
		}
		if int(bs[k]) != s {
			t.Fatalf("bsum %d = %d, want %d", k, bs[k], s)
		}
	}
}

// TestKQuantIntegerBounds states the worst cases the integer kernels rely
// on (q8k_amd64.go's header) and checks them against int16 (VPMADDUBSW
// saturates there) and int32, so a change of ranges fails here first.
func TestKQuantIntegerBounds(t *testing.T) {
	const amax = 127 // quantizeSuperK never writes −128
	for _, c := range []struct {
		name       string
		vmax, smax int // largest unsigned weight value, largest |scale|
	}{{"Q4_K", 15, 63}, {"Q5_K", 31, 63}, {"Q6_K", 63, 128}} {
		pair := 2 * c.vmax * amax // one VPMADDUBSW lane
		if pair > math.MaxInt16 {
			t.Errorf("%s: pair sum %d saturates int16", c.name, pair)
		}
		// One int32 lane over a super-block: every pair of 16 lanes
		// scaled, eight times (the 32-value chunks of 256).
		lane := 8 * 2 * pair * c.smax
		if lane > math.MaxInt32/8 { // eight lanes summed must fit too
			t.Errorf("%s: lane sum %d too close to int32", c.name, lane)
		}
	}
	if b := 16 * 127; b > math.MaxInt16 {
		t.Errorf("bsum %d overflows int16", b)
	}
	if o := 2 * (32 * 128) * (16 * 127); 32*128 > math.MaxInt16 || o > math.MaxInt32/8 {
		t.Errorf("Q6_K offset lane %d too large", o)
	}
}

// kquantCase is a random k-quant matrix and its Q8_K activations.
type kquantCase struct {
	w *Mat
	a q8kRows
	x []float32
}

func newKQuantCase(t testing.TB, r *rand.Rand, typ DType, rows, cols, T int) kquantCase {
	t.Helper()
	b, err := QuantizeBlocks(typ, randVec(r, rows*cols), rows, cols)
	if err != nil {
		t.Fatal(err)
	}
	x := randVec(r, T*cols)
	var sc Scratch
	return kquantCase{&Mat{Type: typ, Rows: rows, Cols: cols, B: b}, sc.prepareK(x, T, cols), x}
}

// TestKQuantMatchesPortable: every level's k-quant products against the
// portable loops (integer sums exact, float order differs), every token
// alone bitwise equal to the batch, a row range starting inside a tile.
func TestKQuantMatchesPortable(t *testing.T) {
	for _, lv := range kernelLevels() {
		t.Run(lv, func(t *testing.T) {
			defer setKernelLevel(lv)()
			r := rand.New(rand.NewPCG(11, 12))
			for _, typ := range []DType{Q4_K, Q5_K, Q6_K} {
				for _, sh := range []struct{ rows, cols, T int }{{1, 256, 1}, {3, 512, 2}, {5, 768, 3}, {13, 1024, 5}, {6, 256, 67}} {
					t.Run(fmt.Sprintf("%v/%dx%dxT%d", typ, sh.rows, sh.cols, sh.T), func(t *testing.T) {
						c := newKQuantCase(t, r, typ, sh.rows, sh.cols, sh.T)
						checkKQuant(t, c, sh.rows, sh.cols, sh.T)
					})
				}
			}
		})
	}
}

func checkKQuant(t *testing.T, c kquantCase, rows, cols, T int) {
	t.Helper()
	got := make([]float32, T*rows)
	matKQuant(got, c.w, c.a, 0, rows, T)
	want := make([]float32, len(got))
	matKQuantPortable(want, c.w, c.a, 0, rows, T)
	dec := make([]float32, cols)
	for j := range rows {
		c.w.Row(dec, j)
		for tk := range T {
			var mag float64
			for i := range cols {
				mag += math.Abs(float64(dec[i]) * float64(c.a.q[tk*cols+i]) * float64(c.a.d[(tk*cols+i)/QKK]))
			}
			o := tk*rows + j
			if d := math.Abs(float64(got[o] - want[o])); d > relTolQ8*mag+1e-7 {
				t.Fatalf("out[%d][%d] = %g, portable %g (|Σ| %g)", tk, j, got[o], want[o], mag)
			}
		}
	}
	for tk := range T {
		one := make([]float32, rows)
		a1 := q8kRows{q: c.a.q[tk*cols : (tk+1)*cols], d: c.a.d[tk*cols/QKK : (tk+1)*cols/QKK], bs: c.a.bs[tk*cols/bsumsPer : (tk+1)*cols/bsumsPer]}
		matKQuant(one, c.w, a1, 0, rows, 1)
		if !slices.Equal(one, got[tk*rows:(tk+1)*rows]) {
			t.Fatalf("token %d alone differs from the batch", tk)
		}
	}
	if rows > 2 {
		part := make([]float32, len(got))
		matKQuant(part, c.w, c.a, 1, rows, T)
		for tk := range T {
			if !slices.Equal(part[tk*rows+1:(tk+1)*rows], got[tk*rows+1:(tk+1)*rows]) {
				t.Fatalf("rows [1,%d) differ from the full product", rows)
			}
		}
	}
}

// TestMixedLayouts: one fused call over Q4_K, Q6_K and Q8_0 weights (a
// Q4_K_M file's mix) gives each product bitwise what it gives alone.
func TestMixedLayouts(t *testing.T) {
	pool := NewPool(2)
	defer pool.Close()
	r := rand.New(rand.NewPCG(13, 14))
	rows, cols, T := 20, 512, 3
	var mats []*Mat
	for _, typ := range []DType{Q4_K, Q6_K} {
		b, err := QuantizeBlocks(typ, randVec(r, rows*cols), rows, cols)
		if err != nil {
			t.Fatal(err)
		}
		mats = append(mats, &Mat{Type: typ, Rows: rows, Cols: cols, B: b})
	}
	q8, err := QuantizeMat(&Mat{Type: F32, Rows: rows, Cols: cols, F: randVec(r, rows*cols)})
	if err != nil {
		t.Fatal(err)
	}
	mats = append(mats, q8)
	x := randVec(r, T*cols)
	prods := make([]Prod, len(mats))
	for i, m := range mats {
		prods[i] = Prod{Out: make([]float32, T*rows), W: m}
	}
	pool.MatMulMulti(prods, x, T, &Scratch{})
	for i, m := range mats {
		one := make([]float32, T*rows)
		pool.MatMul(one, m, x, T, &Scratch{})
		if !slices.Equal(one, prods[i].Out) {
			t.Fatalf("%v: fused product differs from MatMul alone", m.Type)
		}
	}
}

// TestQuantizeRowsKLevels: every level writes the portable quantizer's
// bytes (q, d, bsums), including ties between +a and −a (the first one
// sets the sign), a single outlier, denormals and zero blocks.
func TestQuantizeRowsKLevels(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	x := randVec(r, 12*QKK)
	x[QKK+5], x[QKK+200] = -50, 50 // a tie: −50 comes first
	x[2*QKK+7], x[2*QKK+9] = 50, -50
	clear(x[3*QKK : 4*QKK])
	x[4*QKK+255] = 1e-40
	for i := 5 * QKK; i < 6*QKK; i++ {
		x[i] = float32(i%7) - 3 // many ties and exact halves
	}
	want := [3]any{make([]int8, len(x)), make([]float32, len(x)/QKK), make([]int16, len(x)/bsumsPer)}
	quantizeRowsKPortable(x, want[0].([]int8), want[1].([]float32), want[2].([]int16))
	for _, lv := range kernelLevels() {
		t.Run(lv, func(t *testing.T) {
			defer setKernelLevel(lv)()
			q, d, bs := make([]int8, len(x)), make([]float32, len(x)/QKK), make([]int16, len(x)/bsumsPer)
			quantizeRowsK(x, q, d, bs)
			if !slices.Equal(q, want[0].([]int8)) || !slices.Equal(d, want[1].([]float32)) || !slices.Equal(bs, want[2].([]int16)) {
				t.Fatalf("differs from the portable quantizer")
			}
		})
	}
}
