package model

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"unsafe"

	"github.com/tandemllm/tandem/engine/native/gguf"
	"github.com/tandemllm/tandem/engine/native/kernels"
	"github.com/tandemllm/tandem/engine/native/mmapfile"
)

// maxGGUFContext caps the context length taken from GGUF metadata: the
// RoPE tables are sized by it, and a file's claim (Qwen3 says 40,960) need
// not be honoured in full by a CPU engine.
const maxGGUFContext = 32768

// LoadGGUF reads a GGUF model file.
func LoadGGUF(path string) (*Model, error) { return LoadGGUFWith(path, nil) }

// LoadGGUFWith is LoadGGUF calling onVocab (when not nil) with the file's
// vocabulary as soon as it is read, before the weights are: a caller can
// build its tokenizer on another core while they load. onVocab is not
// called for a file without a vocabulary or with a malformed one.
func LoadGGUFWith(path string, onVocab func(*Vocab)) (*Model, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	m, err := fromGGUF(f, onVocab)
	if err != nil {
		return nil, fmt.Errorf("gguf %s: %w", path, err)
	}
	m.Source, m.Mapped = path, f.Mapped
	return m, nil
}

// ParseGGUF is LoadGGUF over bytes in memory (fuzzing, tests).
func ParseGGUF(b []byte) (*Model, error) {
	f, err := gguf.Parse(b)
	if err != nil {
		return nil, err
	}
	return FromGGUF(f)
}

// FromGGUF maps a parsed GGUF file onto a Model: llama, qwen2 and qwen3
// architectures; F32, F16 and Q8_0 tensors. Anything else is refused by
// name.
func FromGGUF(f *gguf.File) (*Model, error) { return fromGGUF(f, nil) }

func fromGGUF(f *gguf.File, onVocab func(*Vocab)) (*Model, error) {
	arch, ok := f.String("general.architecture")
	if !ok {
		return nil, errors.New("general.architecture is missing")
	}
	c := Config{Arch: arch}
	switch arch {
	case "llama":
		c.Rope = RopeInterleaved
	case "qwen2":
		c.Rope, c.QKVBias = RopeHalf, true
	case "qwen3":
		c.Rope, c.QKNorm = RopeHalf, true
	default:
		return nil, fmt.Errorf("unsupported architecture %q (supported: llama, qwen2, qwen3)", arch)
	}
	geti := func(key string, dst *int, required bool) error {
		v, ok := f.Uint(arch + "." + key)
		if !ok {
			if required {
				return fmt.Errorf("metadata %s.%s is missing", arch, key)
			}
			return nil
		}
		if v > maxDim {
			return fmt.Errorf("metadata %s.%s = %d is out of range", arch, key, v)
		}
		*dst = int(v)
		return nil
	}
	for _, k := range []struct {
		key string
		dst *int
		req bool
	}{
		{"embedding_length", &c.Dim, true}, {"feed_forward_length", &c.Hidden, true},
		{"block_count", &c.Layers, true}, {"attention.head_count", &c.Heads, true},
		{"attention.head_count_kv", &c.KVHeads, false}, {"context_length", &c.SeqLen, true},
		{"attention.key_length", &c.HeadDim, false},
	} {
		if err := geti(k.key, k.dst, k.req); err != nil {
			return nil, err
		}
	}
	if c.KVHeads == 0 {
		c.KVHeads = c.Heads
	}
	if c.HeadDim == 0 && c.Heads > 0 {
		c.HeadDim = c.Dim / c.Heads
	}
	if vl, ok := f.Uint(arch + ".attention.value_length"); ok && int(vl) != c.HeadDim {
		return nil, fmt.Errorf("value_length %d differs from key_length %d: unsupported", vl, c.HeadDim)
	}
	c.SeqLen = min(c.SeqLen, maxGGUFContext)
	c.RopeTheta = 10000
	if v, ok := f.Float(arch + ".rope.freq_base"); ok {
		c.RopeTheta = v
	}
	c.NormEps = 1e-5
	if v, ok := f.Float(arch + ".attention.layer_norm_rms_epsilon"); ok {
		c.NormEps = float32(v)
	}
	if s, ok := f.String(arch + ".rope.scaling.type"); ok && s != "none" {
		return nil, fmt.Errorf("rope scaling type %q is not supported (Llama 3 scaling comes as rope_freqs.weight)", s)
	}
	// Vocabulary size comes from the embedding, as in llama.cpp.
	et, _, ok := f.Tensor("token_embd.weight")
	if !ok {
		return nil, errors.New("tensor token_embd.weight is missing")
	}
	if len(et.Dims) != 2 || et.Dims[1] > maxDim {
		return nil, fmt.Errorf("token_embd.weight has shape %v", et.Dims)
	}
	c.Vocab = int(et.Dims[1])
	if err := c.Validate(); err != nil {
		return nil, err
	}
	m := &Model{Config: c, Layers: make([]Layer, c.Layers), BOS: -1}
	// The vocabulary is read before the weights for onVocab; its error
	// is still reported after theirs.
	vocab, verr := ggufVocab(f)
	if verr == nil && vocab != nil && onVocab != nil {
		onVocab(vocab)
	}
	var err error
	mat := func(name string, rows, cols int) *kernels.Mat {
		if err != nil {
			return nil
		}
		var w *kernels.Mat
		w, err = ggufMat(f, name, rows, cols)
		return w
	}
	vec := func(name string, n int) []float32 {
		if err != nil {
			return nil
		}
		var w *kernels.Mat
		w, err = ggufMat(f, name, 1, n)
		if err != nil {
			return nil
		}
		if w.Type != kernels.F32 {
			err = fmt.Errorf("tensor %s must be F32 or F16", name)
			return nil
		}
		return w.F
	}
	m.Embed = mat("token_embd.weight", c.Vocab, c.Dim)
	if _, _, ok := f.Tensor("output.weight"); ok {
		m.Output = mat("output.weight", c.Vocab, c.Dim)
	} else {
		m.Output, m.Config.Tied = m.Embed, true
	}
	m.FinalNorm = vec("output_norm.weight", c.Dim)
	if _, _, ok := f.Tensor("rope_freqs.weight"); ok {
		m.Config.RopeFreqFactors = vec("rope_freqs.weight", c.HeadDim/2)
	}
	for i := range m.Layers {
		for _, t := range ggufLayer.tensors(&c, i, &m.Layers[i]) {
			if t.Mat != nil {
				*t.Mat = mat(t.Name, t.Rows, t.Cols)
			} else {
				*t.Vec = vec(t.Name, t.Cols)
			}
		}
	}
	if err != nil {
		return nil, err
	}
	if verr != nil {
		return nil, verr
	}
	m.Vocab = vocab
	if m.Vocab != nil {
		m.BOS = m.Vocab.BOS
		if m.Vocab.EOS >= 0 {
			m.EOS = []int32{m.Vocab.EOS}
		}
		if len(m.Vocab.Tokens) > c.Vocab {
			return nil, fmt.Errorf("tokenizer has %d tokens, the embedding only %d", len(m.Vocab.Tokens), c.Vocab)
		}
	}
	if err := m.Init(); err != nil {
		return nil, err
	}
	return m, nil
}

func ggufMat(f *gguf.File, name string, rows, cols int) (*kernels.Mat, error) {
	t, data, ok := f.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("tensor %s is missing", name)
	}
	want := []uint64{uint64(cols), uint64(rows)}
	if rows == 1 {
		want = want[:1]
	}
	if len(t.Dims) != len(want) || t.Dims[0] != want[0] || (len(want) == 2 && t.Dims[1] != want[1]) {
		return nil, fmt.Errorf("tensor %s has shape %v, want %v", name, t.Dims, want)
	}
	n := rows * cols
	w := &kernels.Mat{Rows: rows, Cols: cols}
	le := binary.LittleEndian
	switch t.Type {
	case gguf.F32:
		w.Type, w.F = kernels.F32, kernels.NewF32(n)
		for i := range w.F {
			w.F[i] = math.Float32frombits(le.Uint32(data[4*i:]))
		}
	case gguf.F16:
		if kernels.NativeF16() {
			// Kept as the file's halves, aliasing the read-only mapping
			// like the block types (widened inside the products).
			w.Type, w.H = kernels.F16, halves(data[:2*n])
			break
		}
		w.Type, w.F = kernels.F32, kernels.NewF32(n)
		for i := range w.F {
			w.F[i] = kernels.F16ToF32(le.Uint16(data[2*i:]))
		}
	case gguf.BF16:
		// bf16 is the top half of an fp32: widening is a shift.
		w.Type, w.F = kernels.F32, kernels.NewF32(n)
		for i := range w.F {
			w.F[i] = math.Float32frombits(uint32(le.Uint16(data[2*i:])) << 16)
		}
	case gguf.Q8_0, gguf.Q4_0, gguf.Q4_K, gguf.Q5_K, gguf.Q6_K:
		// Kept as the file's blocks, aliasing the read-only mapping:
		// nothing is copied and no page is touched until a product reads
		// it (for Q8_0 the layout QuantizeMat makes too).
		w.Type, w.B = blockDType[t.Type], data
		if _, err := kernels.BlockRowBytes(w.Type, cols); err != nil {
			return nil, fmt.Errorf("tensor %s: %w", name, err)
		}
	default:
		return nil, fmt.Errorf("tensor %s has unsupported type %v (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K)", name, t.Type)
	}
	if f.Mapped && w.B == nil && w.H == nil {
		// Copied out of the mapping: its pages would otherwise stay
		// resident beside the copy, the weights counted twice.
		mmapfile.Release(data)
	}
	return w, nil
}

// halves views little-endian fp16 data as []uint16 without copying when
// it is 2-byte aligned (GGUF aligns tensor data to 32 bytes; NativeF16 is
// true only on little-endian amd64), else copies it.
func halves(b []byte) []uint16 {
	if len(b) == 0 {
		return nil
	}
	if uintptr(unsafe.Pointer(&b[0]))%2 == 0 {
		return unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), len(b)/2)
	}
	h := make([]uint16, len(b)/2)
	for i := range h {
		h[i] = binary.LittleEndian.Uint16(b[2*i:])
	}
	return h
}

var blockDType = map[gguf.Type]kernels.DType{gguf.Q8_0: kernels.Q8_0, gguf.Q4_0: kernels.Q4_0, gguf.Q4_K: kernels.Q4_K, gguf.Q5_K: kernels.Q5_K, gguf.Q6_K: kernels.Q6_K}

func ggufVocab(f *gguf.File) (*Vocab, error) {
	kind, ok := f.String("tokenizer.ggml.model")
	if !ok {
		return nil, nil
	}
	v := &Vocab{Model: kind, BOS: -1, EOS: -1}
	switch kind {
	case "llama", "gpt2":
	default:
		return nil, fmt.Errorf("unsupported tokenizer model %q (supported: llama, gpt2)", kind)
	}
	v.Tokens, _ = f.KV["tokenizer.ggml.tokens"].([]string)
	if len(v.Tokens) == 0 {
		return nil, errors.New("tokenizer.ggml.tokens is missing")
	}
	if s, ok := f.KV["tokenizer.ggml.scores"].([]float32); ok {
		v.Scores = s
	}
	if s, ok := f.KV["tokenizer.ggml.token_type"].([]int32); ok {
		v.Types = s
	}
	v.Merges, _ = f.KV["tokenizer.ggml.merges"].([]string)
	v.Pre, _ = f.String("tokenizer.ggml.pre")
	if kind == "llama" && len(v.Scores) != len(v.Tokens) {
		return nil, fmt.Errorf("tokenizer has %d tokens but %d scores", len(v.Tokens), len(v.Scores))
	}
	if v.Types != nil && len(v.Types) != len(v.Tokens) {
		return nil, fmt.Errorf("tokenizer has %d tokens but %d token types", len(v.Tokens), len(v.Types))
	}
	for key, dst := range map[string]*int32{"tokenizer.ggml.bos_token_id": &v.BOS, "tokenizer.ggml.eos_token_id": &v.EOS} {
		if id, ok := f.Uint(key); ok {
			if id >= uint64(len(v.Tokens)) {
				return nil, fmt.Errorf("%s = %d outside the vocabulary", key, id)
			}
			*dst = int32(id)
		}
	}
	v.AddBOS = kind == "llama"
	if b, ok := f.KV["tokenizer.ggml.add_bos_token"].(bool); ok {
		v.AddBOS = b
	}
	v.ChatTemplate, _ = f.String("tokenizer.chat_template")
	return v, nil
}

// WriteGGUF writes m as GGUF with every matrix in typ (F32, F16 or Q8_0;
// Q8_0 matrices of m are written as they are whatever typ says) and norms
// in F32, under llama.cpp's tensor and metadata names.
func WriteGGUF(out io.Writer, m *Model, typ gguf.Type) error {
	q, err := ParseQuant(typ.String())
	if err != nil {
		return fmt.Errorf("gguf: %w", err)
	}
	q.keepQ8 = typ != gguf.Q8_0
	return WriteGGUFQuant(out, m, q)
}

// WriteGGUFQuant writes m as GGUF with its matrices typed by q (a
// llama.cpp file type: q.TypeFor picks each tensor's type the way
// llama-quantize does) and norms in F32.
func WriteGGUFQuant(out io.Writer, m *Model, q Quant) error {
	c := &m.Config
	var w gguf.Writer
	a := c.Arch
	w.Set("general.architecture", a)
	if q.FileType != 0 || q.Base == gguf.F32 {
		w.Set("general.file_type", q.FileType)
	}
	if q.Base.BlockSize() > 1 {
		w.Set("general.quantization_version", uint32(2))
	}
	w.Set("general.name", m.Source)
	w.Set(a+".context_length", uint32(c.SeqLen))
	w.Set(a+".embedding_length", uint32(c.Dim))
	w.Set(a+".feed_forward_length", uint32(c.Hidden))
	w.Set(a+".block_count", uint32(c.Layers))
	w.Set(a+".attention.head_count", uint32(c.Heads))
	w.Set(a+".attention.head_count_kv", uint32(c.KVHeads))
	w.Set(a+".attention.key_length", uint32(c.HeadDim))
	w.Set(a+".attention.value_length", uint32(c.HeadDim))
	w.Set(a+".rope.freq_base", float32(c.RopeTheta))
	w.Set(a+".attention.layer_norm_rms_epsilon", c.NormEps)
	if v := m.Vocab; v != nil {
		w.Set("tokenizer.ggml.model", v.Model)
		if v.Pre != "" {
			w.Set("tokenizer.ggml.pre", v.Pre)
		}
		w.Set("tokenizer.ggml.tokens", v.Tokens)
		if v.Scores != nil {
			w.Set("tokenizer.ggml.scores", v.Scores)
		}
		if v.Types != nil {
			w.Set("tokenizer.ggml.token_type", v.Types)
		}
		if v.Merges != nil {
			w.Set("tokenizer.ggml.merges", v.Merges)
		}
		if v.BOS >= 0 {
			w.Set("tokenizer.ggml.bos_token_id", uint32(v.BOS))
		}
		if v.EOS >= 0 {
			w.Set("tokenizer.ggml.eos_token_id", uint32(v.EOS))
		}
		w.Set("tokenizer.ggml.add_bos_token", v.AddBOS)
		if v.ChatTemplate != "" {
			// llama.cpp's key (gguf-py Keys.Tokenizer.CHAT_TEMPLATE), which
			// llama-server renders chat requests with.
			w.Set("tokenizer.chat_template", v.ChatTemplate)
		}
	}
	// A Llama in Hugging Face order (rotate-half RoPE) is written the way
	// llama.cpp's convert_hf_to_gguf.py does (LlamaModel.permute): q and k
	// rows reordered per head to interleaved pairs.
	permute := a == "llama" && c.Rope == RopeHalf
	wantArch := map[string]bool{"llama": !c.QKNorm && !c.QKVBias,
		"qwen2": c.Rope == RopeHalf && c.QKVBias && !c.QKNorm, "qwen3": c.Rope == RopeHalf && c.QKNorm && !c.QKVBias}
	if !wantArch[a] {
		return fmt.Errorf("gguf: config switches do not match architecture %q", a)
	}
	vec := func(name string, v []float32) {
		b := make([]byte, 4*len(v))
		for i, f := range v {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
		}
		w.AddTensor(name, gguf.F32, []uint64{uint64(len(v))}, b)
	}
	var err error
	mat := func(name string, x *kernels.Mat) {
		b, t, e := encodeMat(x, q.TypeFor(name, c.Layers, !c.Tied, x.Cols), q.keepQ8)
		if e != nil && err == nil {
			err = fmt.Errorf("gguf: %s: %w", name, e)
		}
		w.AddTensor(name, t, []uint64{uint64(x.Cols), uint64(x.Rows)}, b)
	}
	mat("token_embd.weight", m.Embed)
	vec("output_norm.weight", m.FinalNorm)
	if !c.Tied {
		mat("output.weight", m.Output)
	}
	if c.RopeFreqFactors != nil {
		vec("rope_freqs.weight", c.RopeFreqFactors)
	}
	for i := range m.Layers {
		l := &m.Layers[i]
		for _, t := range ggufLayer.tensors(c, i, l) {
			switch {
			case t.Vec != nil:
				vec(t.Name, *t.Vec)
			case permute && (t.Mat == &l.Wq || t.Mat == &l.Wk):
				mat(t.Name, permuteRows(*t.Mat, c.HeadDim))
			default:
				mat(t.Name, *t.Mat)
			}
		}
		if q.Progress != nil {
			q.Progress(i+1, len(m.Layers))
		}
	}
	if err != nil {
		return err
	}
	_, err = w.WriteTo(out)
	return err
}

// permuteRows reorders each head's rows of x from rotate-half order to
// interleaved pairs: new row 2i+a of a head is old row a*hd/2+i. Rows of
// every type are whole (a quantized row is its own blocks), so only rows
// move.
func permuteRows(x *kernels.Mat, hd int) *kernels.Mat {
	y := *x
	src := func(r int) int { h, j := r/hd, r%hd; return h*hd + (j%2)*(hd/2) + j/2 }
	switch x.Type {
	case kernels.F32:
		y.F = make([]float32, len(x.F))
		for r := range x.Rows {
			copy(y.F[r*x.Cols:(r+1)*x.Cols], x.F[src(r)*x.Cols:])
		}
	case kernels.F16:
		y.H = make([]uint16, len(x.H))
		for r := range x.Rows {
			copy(y.H[r*x.Cols:(r+1)*x.Cols], x.H[src(r)*x.Cols:])
		}
	default:
		rb, _ := kernels.BlockRowBytes(x.Type, x.Cols)
		y.B = make([]byte, len(x.B))
		for r := range x.Rows {
			copy(y.B[r*rb:(r+1)*rb], x.B[src(r)*rb:])
		}
	}
	return &y
}

// encodeMat encodes x as typ. A block matrix already in typ is written
// as it is (a Q8_0 matrix, loaded or quantized in memory, is the Q8_0
// tensor's bytes); keepQ8 writes Q8_0 matrices unchanged whatever typ
// says (a Q8_0 model written "as F32" keeps its quantization, as
// WriteGGUF always did). Anything else goes through fp32.
func encodeMat(x *kernels.Mat, typ gguf.Type, keepQ8 bool) ([]byte, gguf.Type, error) {
	le := binary.LittleEndian
	if x.Type == kernels.Q8_0 && keepQ8 {
		typ = gguf.Q8_0
	}
	if x.Type.IsBlock() && blockDType[typ] == x.Type {
		return x.B, typ, nil
	}
	f := x.F
	if x.Type != kernels.F32 {
		f = make([]float32, x.Rows*x.Cols)
		for r := range x.Rows {
			x.Row(f[r*x.Cols:(r+1)*x.Cols], r)
		}
	}
	switch typ {
	case gguf.Q8_0, gguf.Q4_0, gguf.Q4_K, gguf.Q5_K, gguf.Q6_K:
		b, err := kernels.QuantizeBlocks(blockDType[typ], f, x.Rows, x.Cols)
		return b, typ, err
	case gguf.F16:
		b := make([]byte, 2*len(f))
		for i, v := range f {
			le.PutUint16(b[2*i:], kernels.F32ToF16(v))
		}
		return b, gguf.F16, nil
	case gguf.BF16:
		b := make([]byte, 2*len(f))
		for i, v := range f {
			le.PutUint16(b[2*i:], F32ToBF16(v))
		}
		return b, gguf.BF16, nil
	case gguf.F32:
		b := make([]byte, 4*len(f))
		for i, v := range f {
			le.PutUint32(b[4*i:], math.Float32bits(v))
		}
		return b, gguf.F32, nil
	}
	return nil, 0, fmt.Errorf("cannot write matrices as %v", typ)
}

// F32ToBF16 rounds to the nearest bfloat16, ties to even, NaN kept quiet
// (ggml's GGML_FP32_TO_BF16).
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 64
	}
	return uint16((b + (0x7fff + (b>>16)&1)) >> 16)
}
