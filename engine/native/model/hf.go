package model

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/tandemllm/tandem/engine/native/kernels"
	"github.com/tandemllm/tandem/engine/native/safetensors"
)

// HFConfig is the part of a Hugging Face config.json the loader reads
// (transformers' LlamaConfig / Qwen2Config / Qwen3Config field names).
type HFConfig struct {
	Architectures []string `json:"architectures"`
	ModelType     string   `json:"model_type"`
	Hidden        int      `json:"hidden_size"`
	Intermediate  int      `json:"intermediate_size"`
	Layers        int      `json:"num_hidden_layers"`
	Heads         int      `json:"num_attention_heads"`
	KVHeads       int      `json:"num_key_value_heads"`
	HeadDim       int      `json:"head_dim,omitempty"`
	Vocab         int      `json:"vocab_size"`
	MaxPos        int      `json:"max_position_embeddings"`
	RopeTheta     float64  `json:"rope_theta"`
	RMSNormEps    float64  `json:"rms_norm_eps"`
	Tie           bool     `json:"tie_word_embeddings"`
	TorchDType    string   `json:"torch_dtype,omitempty"`
	AttnBias      *bool    `json:"attention_bias,omitempty"`
	BOS           *int     `json:"bos_token_id,omitempty"`
	EOS           any      `json:"eos_token_id,omitempty"` // int or [int]
	RopeScaling   *struct {
		Type     string  `json:"rope_type"`
		Factor   float64 `json:"factor"`
		Low      float64 `json:"low_freq_factor"`
		High     float64 `json:"high_freq_factor"`
		Original int     `json:"original_max_position_embeddings"`
	} `json:"rope_scaling,omitempty"`
}

// hfArch maps config.json's architectures to Tandem's.
var hfArch = map[string]string{"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3"}

// LoadHF reads a Hugging Face model directory: config.json and
// model.safetensors or the shards of model.safetensors.index.json, in
// F32, F16 or BF16 (widened to fp32 in memory: the fp32 kernels are the
// fast path; `tandem model quantize` writes a GGUF file that is mapped as
// it is instead). HF keeps q/k in rotate-half order, so every
// architecture runs with RopeHalf here (llama.cpp's converter permutes
// Llama's q/k to interleaved order instead; WriteGGUF does the same).
func LoadHF(dir string) (*Model, error) {
	c, hc, err := ReadHFConfig(dir)
	if err != nil {
		return nil, err
	}
	set, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, err
	}
	m := &Model{Config: c, Layers: make([]Layer, c.Layers), BOS: -1, Source: dir}
	if hc.BOS != nil {
		m.BOS = int32(*hc.BOS)
	}
	switch e := hc.EOS.(type) {
	case float64:
		m.EOS = []int32{int32(e)}
	case []any:
		for _, x := range e {
			if f, ok := x.(float64); ok {
				m.EOS = append(m.EOS, int32(f))
			}
		}
	}
	mat := func(name string, rows, cols int) *kernels.Mat {
		if err != nil {
			return nil
		}
		var f []float32
		f, err = hfTensor(set, name, rows, cols)
		if err != nil {
			return nil
		}
		return &kernels.Mat{Type: kernels.F32, Rows: rows, Cols: cols, F: f}
	}
	vec := func(name string, n int) []float32 {
		if err != nil {
			return nil
		}
		var f []float32
		f, err = hfTensor(set, name, 0, n)
		return f
	}
	m.Embed = mat("model.embed_tokens.weight", c.Vocab, c.Dim)
	if _, ok := set.Tensors["lm_head.weight"]; ok && !c.Tied {
		m.Output = mat("lm_head.weight", c.Vocab, c.Dim)
	} else {
		m.Output, m.Config.Tied = m.Embed, true
	}
	m.FinalNorm = vec("model.norm.weight", c.Dim)
	for i := range m.Layers {
		for _, t := range hfLayer.tensors(&c, i, &m.Layers[i]) {
			if t.Mat != nil {
				*t.Mat = mat(t.Name, t.Rows, t.Cols)
			} else {
				*t.Vec = vec(t.Name, t.Cols)
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	if err := m.Init(); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return m, nil
}

// ReadHFConfig reads config.json into a Config.
func ReadHFConfig(dir string) (Config, *HFConfig, error) {
	p := filepath.Join(dir, "config.json")
	b, err := os.ReadFile(p)
	if err != nil {
		return Config{}, nil, err
	}
	var hc HFConfig
	if err := json.Unmarshal(b, &hc); err != nil {
		return Config{}, nil, fmt.Errorf("%s: %w", p, err)
	}
	arch := ""
	for _, a := range hc.Architectures {
		if hfArch[a] != "" {
			arch = hfArch[a]
		}
	}
	if arch == "" {
		return Config{}, nil, fmt.Errorf("%s: architectures %v: supported are LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM", p, hc.Architectures)
	}
	c := Config{Arch: arch, Dim: hc.Hidden, Hidden: hc.Intermediate, Layers: hc.Layers, Heads: hc.Heads, KVHeads: hc.KVHeads,
		HeadDim: hc.HeadDim, Vocab: hc.Vocab, SeqLen: min(hc.MaxPos, maxGGUFContext), RopeTheta: hc.RopeTheta,
		Rope: RopeHalf, NormEps: float32(hc.RMSNormEps), Tied: hc.Tie}
	if c.KVHeads == 0 {
		c.KVHeads = c.Heads
	}
	if c.HeadDim == 0 && c.Heads > 0 {
		c.HeadDim = c.Dim / c.Heads
	}
	if c.RopeTheta == 0 {
		c.RopeTheta = 10000
	}
	switch arch {
	case "qwen2":
		c.QKVBias = true
	case "qwen3":
		c.QKNorm = true
	}
	if hc.AttnBias != nil && *hc.AttnBias && arch != "qwen2" {
		return Config{}, nil, fmt.Errorf("%s: attention_bias on %s is not supported", p, arch)
	}
	if rs := hc.RopeScaling; rs != nil && rs.Type != "" && rs.Type != "default" {
		if rs.Type != "llama3" || rs.Factor <= 0 || rs.Original <= 0 {
			return Config{}, nil, fmt.Errorf("%s: rope_scaling %q is not supported (llama3 is)", p, rs.Type)
		}
		if c.HeadDim <= 0 || c.HeadDim > maxDim {
			return Config{}, nil, fmt.Errorf("%s: head_dim %d out of range", p, c.HeadDim)
		}
		c.RopeFreqFactors = Llama3FreqFactors(c.HeadDim, c.RopeTheta, rs.Factor, rs.Low, rs.High, rs.Original)
	}
	if err := c.Validate(); err != nil {
		return Config{}, nil, fmt.Errorf("%s: %w", p, err)
	}
	return c, &hc, nil
}

// hfTensor widens a tensor to fp32 after checking its shape (rows 0: a
// vector of cols values).
func hfTensor(set *safetensors.Set, name string, rows, cols int) ([]float32, error) {
	t, ok := set.Tensors[name]
	if !ok {
		return nil, fmt.Errorf("tensor %s is missing", name)
	}
	want := []int{rows, cols}
	if rows == 0 {
		want = want[1:]
	}
	if len(t.Shape) != len(want) || t.Shape[0] != want[0] || (len(want) == 2 && t.Shape[1] != want[1]) {
		return nil, fmt.Errorf("tensor %s has shape %v, want %v", name, t.Shape, want)
	}
	n := max(rows, 1) * cols
	out := kernels.NewF32(n)
	le := binary.LittleEndian
	switch t.DType {
	case "F32":
		for i := range out {
			out[i] = math.Float32frombits(le.Uint32(t.Data[4*i:]))
		}
	case "F16":
		for i := range out {
			out[i] = kernels.F16ToF32(le.Uint16(t.Data[2*i:]))
		}
	case "BF16":
		for i := range out {
			out[i] = math.Float32frombits(uint32(le.Uint16(t.Data[2*i:])) << 16)
		}
	default:
		return nil, fmt.Errorf("tensor %s has dtype %s (supported: F32, F16, BF16)", name, t.DType)
	}
	return out, nil
}

// WriteHF writes m as a Hugging Face directory: config.json and
// model.safetensors, or shards of at most shardBytes with
// model.safetensors.index.json (shardBytes 0: one file), in dtype "f32",
// "f16" or "bf16". m must be in HF rotate-half order (RopeHalf).
func WriteHF(dir string, m *Model, dtype string, shardBytes int64) error {
	c := &m.Config
	if c.Rope != RopeHalf {
		return errors.New("hf: model is in interleaved RoPE order; Hugging Face checkpoints are rotate-half")
	}
	var st string
	var enc func(f float32, b []byte)
	switch strings.ToLower(dtype) {
	case "", "bf16":
		st, enc = "BF16", func(f float32, b []byte) { binary.LittleEndian.PutUint16(b, F32ToBF16(f)) }
	case "f16":
		st, enc = "F16", func(f float32, b []byte) { binary.LittleEndian.PutUint16(b, kernels.F32ToF16(f)) }
	case "f32":
		st, enc = "F32", func(f float32, b []byte) { binary.LittleEndian.PutUint32(b, math.Float32bits(f)) }
	default:
		return fmt.Errorf("hf: dtype %q (f32, f16, bf16)", dtype)
	}
	es := map[string]int{"BF16": 2, "F16": 2, "F32": 4}[st]
	var tensors []safetensors.Tensor
	add := func(name string, shape []int, f []float32) {
		b := make([]byte, es*len(f))
		for i, v := range f {
			enc(v, b[es*i:])
		}
		tensors = append(tensors, safetensors.Tensor{Name: name, DType: st, Shape: shape, Data: b})
	}
	mat := func(name string, x *kernels.Mat) {
		f := x.F
		if x.Type != kernels.F32 {
			f = make([]float32, x.Rows*x.Cols)
			for r := range x.Rows {
				x.Row(f[r*x.Cols:(r+1)*x.Cols], r)
			}
		}
		add(name, []int{x.Rows, x.Cols}, f)
	}
	vec := func(name string, v []float32) { add(name, []int{len(v)}, v) }
	mat("model.embed_tokens.weight", m.Embed)
	if !c.Tied {
		mat("lm_head.weight", m.Output)
	}
	vec("model.norm.weight", m.FinalNorm)
	for i := range m.Layers {
		for _, t := range hfLayer.tensors(c, i, &m.Layers[i]) {
			if t.Mat != nil {
				mat(t.Name, *t.Mat)
			} else {
				vec(t.Name, *t.Vec)
			}
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	archName := map[string]string{"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}[c.Arch]
	hc := HFConfig{Architectures: []string{archName}, ModelType: c.Arch, Hidden: c.Dim, Intermediate: c.Hidden, Layers: c.Layers,
		Heads: c.Heads, KVHeads: c.KVHeads, HeadDim: c.HeadDim, Vocab: c.Vocab, MaxPos: c.SeqLen, RopeTheta: c.RopeTheta,
		RMSNormEps: float64(c.NormEps), Tie: c.Tied, TorchDType: map[string]string{"BF16": "bfloat16", "F16": "float16", "F32": "float32"}[st]}
	if m.BOS >= 0 {
		b := int(m.BOS)
		hc.BOS = &b
	}
	if len(m.EOS) > 0 {
		hc.EOS = int(m.EOS[0])
	}
	cj, _ := json.MarshalIndent(hc, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "config.json"), append(cj, '\n'), 0o644); err != nil {
		return err
	}
	// Shards in name order, as many tensors per shard as fit.
	var shards [][]safetensors.Tensor
	var size int64
	for _, t := range tensors {
		if len(shards) == 0 || (shardBytes > 0 && size+int64(len(t.Data)) > shardBytes && len(shards[len(shards)-1]) > 0) {
			shards = append(shards, nil)
			size = 0
		}
		shards[len(shards)-1] = append(shards[len(shards)-1], t)
		size += int64(len(t.Data))
	}
	weightMap := map[string]string{}
	for i, sh := range shards {
		name := "model.safetensors"
		if len(shards) > 1 {
			name = fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(shards))
		}
		for _, t := range sh {
			weightMap[t.Name] = name
		}
		if err := writeFile(filepath.Join(dir, name), func(w *bufio.Writer) error { return safetensors.Write(w, sh, map[string]string{"format": "pt"}) }); err != nil {
			return err
		}
	}
	if len(shards) > 1 {
		ix, _ := json.MarshalIndent(map[string]any{"metadata": map[string]any{}, "weight_map": weightMap}, "", "  ")
		if err := os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), ix, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func writeFile(path string, fn func(*bufio.Writer) error) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	w := bufio.NewWriterSize(f, 1<<20)
	if err := fn(w); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return w.Flush()
}
