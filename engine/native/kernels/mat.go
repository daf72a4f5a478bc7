package kernels

import (
	"fmt"
	"math"
)

// DType is the storage type of a weight matrix in memory. F16 files are
// widened to F32 at load: the products are bandwidth-bound either way and
// one fp32 path is simpler to keep exact.
type DType uint8

const (
	F32 DType = iota
	// Block types (blocks.go): raw ggml blocks in Mat.B.
	Q4_0
	Q4_K
	Q5_K
	Q6_K
	// F16 keeps IEEE halves (Mat.H), widened a few rows at a time inside
	// the product (f16mat.go): decode reads half the bytes of F32.
	F16
	// Q8_0 is a block type as a GGUF file stores it: 34-byte blocks of an
	// fp16 scale and 32 int8 quants (q8blocks.go). It is the one Q8_0
	// weight layout: read in place from a file's mapping, and what
	// QuantizeMat makes in memory.
	Q8_0
)

func (d DType) String() string {
	switch d {
	case F32:
		return "F32"
	case Q4_0:
		return "Q4_0"
	case Q4_K:
		return "Q4_K"
	case Q5_K:
		return "Q5_K"
	case Q6_K:
		return "Q6_K"
	case F16:
		return "F16"
	case Q8_0:
		return "Q8_0"
	}
	return fmt.Sprintf("DType(%d)", uint8(d))
}

// QK is the Q8_0 group size: 32 int8 values share one scale.
const QK = 32

// Mat is a row-major weight matrix: Rows outputs, Cols inputs.
type Mat struct {
	Type DType
	Rows int
	Cols int
	F    []float32 // F32: Rows*Cols values
	B    []byte    // block types: Rows rows of BlockRowBytes(Type, Cols) bytes
	H    []uint16  // F16: Rows*Cols halves
}

// Validate reports a Mat whose slices do not match its shape, so a corrupt
// file is refused at load instead of faulting in a product.
func (m *Mat) Validate() error {
	if m.Rows <= 0 || m.Cols <= 0 {
		return fmt.Errorf("bad shape %dx%d", m.Rows, m.Cols)
	}
	n := m.Rows * m.Cols
	switch m.Type {
	case F32:
		if len(m.F) != n {
			return fmt.Errorf("F32 %dx%d has %d values", m.Rows, m.Cols, len(m.F))
		}
	case F16:
		if len(m.H) != n {
			return fmt.Errorf("F16 %dx%d has %d values", m.Rows, m.Cols, len(m.H))
		}
	case Q4_0, Q4_K, Q5_K, Q6_K, Q8_0:
		rb, err := BlockRowBytes(m.Type, m.Cols)
		if err != nil {
			return err
		}
		if len(m.B) != m.Rows*rb {
			return fmt.Errorf("%v %dx%d has %d bytes, want %d", m.Type, m.Rows, m.Cols, len(m.B), m.Rows*rb)
		}
	default:
		return fmt.Errorf("unsupported type %v", m.Type)
	}
	return nil
}

// ScalePad is the spare capacity NewScales leaves after the fp32 scales
// of Q8_0 activations, so the vector code can store 16 scales at a time
// up to the last group without a partial (masked or copied) store.
const ScalePad = 16

// NewScales allocates n activation scales with ScalePad spare capacity.
func NewScales(n int) []float32 { return make([]float32, n, n+ScalePad) }

// Bytes is the in-memory weight size.
func (m *Mat) Bytes() int64 {
	if m.Type.IsBlock() {
		return int64(len(m.B))
	}
	if m.Type == F16 {
		return 2 * int64(len(m.H))
	}
	return 4 * int64(len(m.F))
}

// Row copies row r into dst as fp32 (the embedding lookup).
func (m *Mat) Row(dst []float32, r int) {
	switch m.Type {
	case F32:
		copy(dst, m.F[r*m.Cols:(r+1)*m.Cols])
	case F16:
		F16ToF32Rows(dst, m.Cols, m.H[r*m.Cols:(r+1)*m.Cols], m.Cols, 1, m.Cols)
	default:
		rb, _ := BlockRowBytes(m.Type, m.Cols)
		DequantizeRow(m.Type, m.B[r*rb:(r+1)*rb], dst[:m.Cols])
	}
}

// QuantizeMat converts an F32 (or F16) matrix to Q8_0 blocks the
// way llama.cpp does (scale = absmax/127, round half away from zero), the
// scale stored as the fp16 a GGUF file holds and the quants rounded
// against that fp16 scale: quantizing in memory and loading a written
// Q8_0 file give the same bytes. The blocks are allocated with NewBytes.
func QuantizeMat(m *Mat) (*Mat, error) {
	if m.Type == F16 {
		m = m.Widened()
	}
	if m.Type != F32 {
		return nil, fmt.Errorf("quantize: matrix is %v, not F32", m.Type)
	}
	if m.Cols%QK != 0 {
		return nil, fmt.Errorf("quantize: %d columns not divisible by %d", m.Cols, QK)
	}
	if len(m.F) != m.Rows*m.Cols {
		return nil, fmt.Errorf("quantize: %d values for %dx%d", len(m.F), m.Rows, m.Cols)
	}
	b := NewBytes(len(m.F) / QK * q8BlockBytes)
	if err := quantizeBlocksInto(b, Q8_0, m.F, m.Rows, m.Cols); err != nil {
		return nil, err
	}
	return &Mat{Type: Q8_0, Rows: m.Rows, Cols: m.Cols, B: b}, nil
}

// QuantizeRows quantizes T activation rows of n values (n%QK == 0) into q and
// per-group scales s, keeping fp32 scales: activations never hit a file.
// Every kernel level gives the same bytes.
func QuantizeRows(x []float32, q []int8, s []float32) { quantizeRows(x, q, s) }

func quantizeRowsPortable(x []float32, q []int8, s []float32) {
	for g := range len(x) / QK {
		v := x[g*QK : (g+1)*QK]
		var amax float32
		for _, f := range v {
			amax = max(amax, abs32(f))
		}
		d := amax / 127
		s[g] = d
		var id float32
		if d != 0 {
			id = 1 / d
		}
		qq := q[g*QK : (g+1)*QK]
		for i, f := range v {
			qq[i] = int8(roundAway(f * id))
		}
	}
}

func abs32(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ (1 << 31)) }

func roundAway(v float32) float32 {
	if v < 0 {
		return -float32(math.Floor(float64(-v) + 0.5))
	}
	return float32(math.Floor(float64(v) + 0.5))
}

// F16ToF32 widens an IEEE half.
func F16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch {
	case exp == 0:
		if man == 0 {
			return math.Float32frombits(sign)
		}
		// Subnormal: value = man * 2^-24.
		f := float32(man) * (1.0 / (1 << 24))
		if sign != 0 {
			f = -f
		}
		return f
	case exp == 0x1f:
		return math.Float32frombits(sign | 0xff<<23 | man<<13)
	}
	return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
}

// F32ToF16 rounds to the nearest half, ties to even.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	man := b & 0x7fffff
	if exp == 0xff {
		if man != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 {
			return sign
		}
		man |= 0x800000
		shift := uint32(14 - e)
		half := uint32(1) << (shift - 1)
		r := man >> shift
		rem := man & (1<<shift - 1)
		if rem > half || (rem == half && r&1 == 1) {
			r++
		}
		return sign | uint16(r)
	}
	r := uint32(e)<<10 | man>>13
	rem := man & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && r&1 == 1) {
		r++ // may carry into the exponent, which is the right rounding
	}
	return sign | uint16(r)
}
