package model

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/tandemllm/tandem/engine/native/kernels"
	"github.com/tandemllm/tandem/engine/native/mmapfile"
)

// Layer holds one decoder block's weights.
type Layer struct {
	AttnNorm   []float32
	Wq, Wk, Wv *kernels.Mat
	Wo         *kernels.Mat
	Bq, Bk, Bv []float32 // QKVBias only
	QNorm      []float32 // QKNorm only: [HeadDim]
	KNorm      []float32
	FFNNorm    []float32
	W1, W2, W3 *kernels.Mat // gate, down, up
}

// Model is a loaded, validated decoder ready to run.
type Model struct {
	Config    Config
	Embed     *kernels.Mat // Vocab x Dim
	Layers    []Layer
	FinalNorm []float32
	Output    *kernels.Mat // Vocab x Dim; the same *Mat as Embed when tied
	// Source names where the weights came from, for error messages.
	Source string
	// BOS is the beginning-of-sequence token (-1: none); EOS the tokens
	// that end generation. llama2.c checkpoints use 1 and [2].
	BOS int32
	EOS []int32
	// Vocab is the tokenizer carried in the model file (GGUF); nil for
	// llama2.c checkpoints, whose tokenizer is a separate file.
	Vocab *Vocab

	// Mapped: the weights file is memory-mapped, and the matrices kept in
	// the file's layout (block types, F16 halves) alias the mapping.
	Mapped bool

	cos, sin []float32 // [SeqLen][HeadDim/2]
}

// Vocab is the tokenizer data of a GGUF file, as llama.cpp names it
// (tokenizer.ggml.*), for the tokenizer package to build an encoder from.
type Vocab struct {
	Model  string // "llama" (SentencePiece-style BPE) or "gpt2" (byte-level BPE)
	Pre    string // pre-tokenizer name (gpt2 models)
	Tokens []string
	Scores []float32 // llama only
	Types  []int32
	Merges []string // gpt2 only
	BOS    int32    // -1 when absent
	EOS    int32    // -1 when absent
	AddBOS bool
	// ChatTemplate is the Jinja chat template (tokenizer.chat_template),
	// "" when the file carries none.
	ChatTemplate string
}

// Init validates the weights against the config and builds the RoPE
// tables. Loaders call it last; a Model is unusable before.
func (m *Model) Init() error {
	c := &m.Config
	if err := c.Validate(); err != nil {
		return err
	}
	check := func(name string, w *kernels.Mat, rows, cols int) error {
		if w == nil {
			return fmt.Errorf("tensor %s is missing", name)
		}
		if w.Rows != rows || w.Cols != cols {
			return fmt.Errorf("tensor %s is %dx%d, want %dx%d", name, w.Rows, w.Cols, rows, cols)
		}
		if err := w.Validate(); err != nil {
			return fmt.Errorf("tensor %s: %w", name, err)
		}
		return nil
	}
	vec := func(name string, v []float32, n int) error {
		if len(v) != n {
			return fmt.Errorf("tensor %s has %d values, want %d", name, len(v), n)
		}
		return nil
	}
	if err := check("token_embd", m.Embed, c.Vocab, c.Dim); err != nil {
		return err
	}
	if err := check("output", m.Output, c.Vocab, c.Dim); err != nil {
		return err
	}
	if err := vec("output_norm", m.FinalNorm, c.Dim); err != nil {
		return err
	}
	if len(m.Layers) != c.Layers {
		return fmt.Errorf("%d layers loaded, config says %d", len(m.Layers), c.Layers)
	}
	for i := range m.Layers {
		for _, t := range ggufLayer.tensors(c, i, &m.Layers[i]) {
			var err error
			if t.Mat != nil {
				err = check(t.Name, *t.Mat, t.Rows, t.Cols)
			} else {
				err = vec(t.Name, *t.Vec, t.Cols)
			}
			if err != nil {
				return err
			}
		}
	}
	m.buildRope()
	return nil
}

// buildRope follows llama2.c's float32 arithmetic (powf, then pos*freq,
// then cosf/sinf) so the reference model's greedy output is reproduced.
func (m *Model) buildRope() {
	c := &m.Config
	half := c.HeadDim / 2
	freq := make([]float32, half)
	for j := range freq {
		e := float32(2*j) / float32(c.HeadDim)
		freq[j] = 1 / float32(math.Pow(c.RopeTheta, float64(e)))
		if c.RopeFreqFactors != nil {
			freq[j] /= c.RopeFreqFactors[j]
		}
	}
	m.cos = make([]float32, c.SeqLen*half)
	m.sin = make([]float32, c.SeqLen*half)
	for p := range c.SeqLen {
		for j, f := range freq {
			v := float32(p) * f
			m.cos[p*half+j] = float32(math.Cos(float64(v)))
			m.sin[p*half+j] = float32(math.Sin(float64(v)))
		}
	}
}

// WeightBytes is the in-memory size of all weight matrices.
func (m *Model) WeightBytes() int64 {
	var n int64
	for _, w := range m.mats() {
		n += w.Bytes()
	}
	return n
}

// MappedWeightBytes is the part of WeightBytes read in place from the
// file's mapping (zero where the file was read into memory): the page
// cache holds it, paged in as products first read it, and it is shared
// with every process that maps the same file.
func (m *Model) MappedWeightBytes() int64 {
	if !m.Mapped {
		return 0
	}
	var n int64
	for _, w := range m.mats() {
		if w.B != nil || w.H != nil {
			n += w.Bytes()
		}
	}
	return n
}

// CopyOutOfMapping copies the matrices read in place from the file's
// mapping (block types, F16 halves) into memory of the process's own,
// advised for huge pages, and gives the mapping's pages back: llama.cpp's
// --no-mmap. Decode reads every weight once per token, and the page cache
// maps a file in 4 KiB pages, a TLB miss every 4 KiB, where the copy's
// huge pages take one every 2 MiB; the price is the copy at start and
// weights no longer shared with other processes mapping the file. It must
// run before any engine uses the model; without a mapping it does nothing.
func (m *Model) CopyOutOfMapping() {
	total := m.MappedWeightBytes()
	if total == 0 {
		return
	}
	const align = 64 // each matrix on a cache line of its own
	mats := m.mats()
	var n int64
	for _, w := range mats {
		if w.B != nil || w.H != nil {
			n += (w.Bytes() + align - 1) &^ (align - 1)
		}
	}
	slab := kernels.NewBytes(int(n))
	off := 0
	take := func(b []byte) []byte {
		c := slab[off : off+len(b) : off+len(b)]
		copy(c, b)
		off += (len(b) + align - 1) &^ (align - 1)
		mmapfile.Release(b)
		return c
	}
	for _, w := range mats {
		switch {
		case w.B != nil:
			w.B = take(w.B)
		case w.H != nil:
			w.H = halves(take(halfBytes(w.H))) // 64-byte aligned: a view, not a copy
		}
	}
	m.Mapped = false
}

// halfBytes views halves as their bytes (halves' inverse).
func halfBytes(h []uint16) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(h))), 2*len(h))
}

// mats is every weight matrix of the model once (a tied output is the
// embedding).
func (m *Model) mats() []*kernels.Mat {
	ws := []*kernels.Mat{m.Embed}
	if m.Output != m.Embed {
		ws = append(ws, m.Output)
	}
	for _, l := range m.Layers {
		ws = append(ws, l.Wq, l.Wk, l.Wv, l.Wo, l.W1, l.W2, l.W3)
	}
	return ws
}

// Quantize converts every matrix with a column count divisible by 32 to
// Q8_0 blocks (kernels.Q8_0) in place (the embedding included; it is
// dequantized per row). It refuses when some matrix cannot be quantized,
// so a "Q8_0 model" never silently keeps fp32 layers. A model read in
// place from its file's mapping is copied out of it first
// (CopyOutOfMapping) and no longer counts as mapped: the quantized
// matrices are the process's own, which MappedWeightBytes and
// CopyOutOfMapping must not take for the file's.
func (m *Model) Quantize() error {
	m.CopyOutOfMapping()
	m.Mapped = false
	q := func(w **kernels.Mat, name string) error {
		if (*w).Type == kernels.Q8_0 {
			return nil
		}
		n, err := kernels.QuantizeMat(*w)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		*w = n
		return nil
	}
	tied := m.Output == m.Embed
	if err := q(&m.Embed, "token_embd"); err != nil {
		return err
	}
	if tied {
		m.Output = m.Embed
	} else if err := q(&m.Output, "output"); err != nil {
		return err
	}
	for i := range m.Layers {
		l := &m.Layers[i]
		for _, w := range []**kernels.Mat{&l.Wq, &l.Wk, &l.Wv, &l.Wo, &l.W1, &l.W2, &l.W3} {
			if err := q(w, fmt.Sprintf("blk.%d", i)); err != nil {
				return err
			}
		}
	}
	return nil
}
