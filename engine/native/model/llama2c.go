package model

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"

	"github.com/tandemllm/tandem/engine/native/kernels"
)

// LoadLlama2C reads a llama2.c "version 0" checkpoint: a 7×int32 header
// (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len; a
// negative vocab_size means a separate classifier), then fp32 tensors in
// llama2.c's order. The file size must match the header exactly, which is
// how truncated or foreign files are told apart from checkpoints.
func LoadLlama2C(path string) (*Model, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	m, err := readLlama2C(bufio.NewReaderSize(f, 1<<20), st.Size())
	if err != nil {
		return nil, fmt.Errorf("llama2.c checkpoint %s: %w", path, err)
	}
	m.Source = path
	return m, nil
}

// ParseLlama2C is LoadLlama2C over bytes already in memory (fuzzing, tests).
func ParseLlama2C(b []byte) (*Model, error) {
	return readLlama2C(bytesReader(b), int64(len(b)))
}

func bytesReader(b []byte) *bufio.Reader {
	return bufio.NewReaderSize(&sliceReader{b: b}, 1<<16)
}

type sliceReader struct{ b []byte }

func (r *sliceReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

const llama2CHeader = 28

func readLlama2C(r *bufio.Reader, size int64) (*Model, error) {
	var h [7]int32
	if size < llama2CHeader {
		return nil, fmt.Errorf("file has %d bytes, shorter than the 28-byte header", size)
	}
	if err := binary.Read(r, binary.LittleEndian, &h); err != nil {
		return nil, fmt.Errorf("reading header: %w", err)
	}
	if h[0] == 0x616b3432 { // "ak42": llama2.c export versions 1 and 2
		return nil, errors.New("llama2.c export version 1/2 (magic ak42) is not supported; use a version 0 checkpoint or GGUF")
	}
	tied := h[5] > 0
	vocab := h[5]
	if vocab < 0 {
		vocab = -vocab
	}
	c := Config{
		Arch: "llama", Dim: int(h[0]), Hidden: int(h[1]), Layers: int(h[2]), Heads: int(h[3]),
		KVHeads: int(h[4]), Vocab: int(vocab), SeqLen: int(h[6]), RopeTheta: 10000,
		Rope: RopeInterleaved, NormEps: 1e-5, Tied: tied,
	}
	if c.Heads > 0 && c.Dim%c.Heads != 0 {
		return nil, fmt.Errorf("dim %d is not a multiple of n_heads %d", c.Dim, c.Heads)
	}
	if c.Heads > 0 {
		c.HeadDim = c.Dim / c.Heads
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	// Sizes in floats, in int64 so a hostile header cannot overflow them.
	d, hd, L, kv := int64(c.Dim), int64(c.Hidden), int64(c.Layers), int64(c.KVDim())
	want := int64(c.Vocab)*d + L*d + L*d*d + 2*L*d*kv + L*d*d + L*d + 3*L*hd*d + d +
		int64(c.SeqLen)*int64(c.HeadDim)
	if !tied {
		want += int64(c.Vocab) * d
	}
	if want*4+llama2CHeader != size {
		return nil, fmt.Errorf("file has %d bytes, but the header (dim %d, hidden %d, %d layers, %d heads, %d kv heads, vocab %d, seq_len %d) implies %d",
			size, c.Dim, c.Hidden, c.Layers, c.Heads, c.KVHeads, c.Vocab, c.SeqLen, want*4+llama2CHeader)
	}
	rd := &f32Reader{r: r}
	mat := func(rows, cols int) *kernels.Mat {
		return &kernels.Mat{Type: kernels.F32, Rows: rows, Cols: cols, F: rd.read(rows * cols)}
	}
	m := &Model{Config: c, Layers: make([]Layer, c.Layers), BOS: 1, EOS: []int32{2}}
	m.Embed = mat(c.Vocab, c.Dim)
	for i := range m.Layers {
		m.Layers[i].AttnNorm = rd.read(c.Dim)
	}
	for i := range m.Layers {
		m.Layers[i].Wq = mat(c.Dim, c.Dim)
	}
	for i := range m.Layers {
		m.Layers[i].Wk = mat(c.KVDim(), c.Dim)
	}
	for i := range m.Layers {
		m.Layers[i].Wv = mat(c.KVDim(), c.Dim)
	}
	for i := range m.Layers {
		m.Layers[i].Wo = mat(c.Dim, c.Dim)
	}
	for i := range m.Layers {
		m.Layers[i].FFNNorm = rd.read(c.Dim)
	}
	for i := range m.Layers {
		m.Layers[i].W1 = mat(c.Hidden, c.Dim)
	}
	for i := range m.Layers {
		m.Layers[i].W2 = mat(c.Dim, c.Hidden)
	}
	for i := range m.Layers {
		m.Layers[i].W3 = mat(c.Hidden, c.Dim)
	}
	m.FinalNorm = rd.read(c.Dim)
	rd.skip(c.SeqLen * c.HeadDim) // freq_cis_real and _imag: RoPE is recomputed
	if tied {
		m.Output = m.Embed
	} else {
		m.Output = mat(c.Vocab, c.Dim)
	}
	if rd.err != nil {
		return nil, fmt.Errorf("reading weights: %w", rd.err)
	}
	if err := m.Init(); err != nil {
		return nil, err
	}
	return m, nil
}

// f32Reader decodes little-endian floats and remembers the first error, so
// the loader reads straight through and checks once.
type f32Reader struct {
	r   *bufio.Reader
	buf []byte
	err error
}

func (f *f32Reader) read(n int) []float32 {
	out := kernels.NewF32(n)
	if f.err != nil {
		return out
	}
	const chunk = 1 << 16
	if f.buf == nil {
		f.buf = make([]byte, 4*chunk)
	}
	for i := 0; i < n; i += chunk {
		m := min(chunk, n-i)
		b := f.buf[:4*m]
		if _, err := io.ReadFull(f.r, b); err != nil {
			f.err = err
			return out
		}
		for j := range m {
			out[i+j] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*j:]))
		}
	}
	return out
}

func (f *f32Reader) skip(n int) {
	if f.err != nil {
		return
	}
	if _, err := f.r.Discard(4 * n); err != nil {
		f.err = err
	}
}

// WriteLlama2C writes m as a llama2.c version 0 checkpoint. Only fp32
// llama-architecture models with Dim = Heads*HeadDim fit that format.
func WriteLlama2C(w io.Writer, m *Model) error {
	c := &m.Config
	if c.Arch != "llama" || c.QKNorm || c.QKVBias || c.Rope != RopeInterleaved || c.RopeFreqFactors != nil ||
		c.QDim() != c.Dim || c.RopeTheta != 10000 {
		return errors.New("llama2.c format holds only plain llama models (theta 10000, no qk-norm, bias or rope scaling)")
	}
	vocab := int32(c.Vocab)
	if !c.Tied {
		vocab = -vocab
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	h := [7]int32{int32(c.Dim), int32(c.Hidden), int32(c.Layers), int32(c.Heads), int32(c.KVHeads), vocab, int32(c.SeqLen)}
	if err := binary.Write(bw, binary.LittleEndian, h); err != nil {
		return err
	}
	var err error
	put := func(v []float32) {
		if err != nil {
			return
		}
		var b [4]byte
		for _, f := range v {
			binary.LittleEndian.PutUint32(b[:], math.Float32bits(f))
			if _, err = bw.Write(b[:]); err != nil {
				return
			}
		}
	}
	mat := func(x *kernels.Mat) {
		if x.Type != kernels.F32 && err == nil {
			err = errors.New("llama2.c format holds only F32 weights")
		}
		put(x.F)
	}
	mat(m.Embed)
	each := func(f func(l *Layer)) {
		for i := range m.Layers {
			f(&m.Layers[i])
		}
	}
	each(func(l *Layer) { put(l.AttnNorm) })
	each(func(l *Layer) { mat(l.Wq) })
	each(func(l *Layer) { mat(l.Wk) })
	each(func(l *Layer) { mat(l.Wv) })
	each(func(l *Layer) { mat(l.Wo) })
	each(func(l *Layer) { put(l.FFNNorm) })
	each(func(l *Layer) { mat(l.W1) })
	each(func(l *Layer) { mat(l.W2) })
	each(func(l *Layer) { mat(l.W3) })
	put(m.FinalNorm)
	put(make([]float32, c.SeqLen*c.HeadDim))
	if !c.Tied {
		mat(m.Output)
	}
	if err != nil {
		return err
	}
	return bw.Flush()
}
