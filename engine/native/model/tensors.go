package model

import (
	"fmt"

	"github.com/tandemllm/tandem/engine/native/kernels"
)

// layerNames is one file format's names for the tensors of a decoder
// layer. The loaders, the writers and Validate all walk a layer through
// layerNames.tensors, so a tensor added to Layer is named, shaped, read,
// written and checked in one place.
type layerNames struct {
	prefix                                        string // fmt pattern taking the layer index
	attnNorm, q, k, v, o, ffnNorm, gate, down, up string
	qBias, kBias, vBias                           string // Config.QKVBias (Qwen2)
	qNorm, kNorm                                  string // Config.QKNorm (Qwen3)
}

// ggufLayer is llama.cpp's naming (gguf-py/gguf/constants.py, MODEL_TENSOR).
var ggufLayer = layerNames{prefix: "blk.%d.",
	attnNorm: "attn_norm.weight", q: "attn_q.weight", k: "attn_k.weight", v: "attn_v.weight", o: "attn_output.weight",
	ffnNorm: "ffn_norm.weight", gate: "ffn_gate.weight", down: "ffn_down.weight", up: "ffn_up.weight",
	qBias: "attn_q.bias", kBias: "attn_k.bias", vBias: "attn_v.bias",
	qNorm: "attn_q_norm.weight", kNorm: "attn_k_norm.weight"}

// hfLayer is Hugging Face transformers' naming (LlamaDecoderLayer,
// Qwen2DecoderLayer, Qwen3DecoderLayer state dicts).
var hfLayer = layerNames{prefix: "model.layers.%d.",
	attnNorm: "input_layernorm.weight", q: "self_attn.q_proj.weight", k: "self_attn.k_proj.weight",
	v: "self_attn.v_proj.weight", o: "self_attn.o_proj.weight",
	ffnNorm: "post_attention_layernorm.weight", gate: "mlp.gate_proj.weight", down: "mlp.down_proj.weight",
	up:    "mlp.up_proj.weight",
	qBias: "self_attn.q_proj.bias", kBias: "self_attn.k_proj.bias", vBias: "self_attn.v_proj.bias",
	qNorm: "self_attn.q_norm.weight", kNorm: "self_attn.k_norm.weight"}

// layerTensor is one tensor of a layer: its name in the file, where it
// lives in the Layer, and its shape. Exactly one of Mat and Vec is set; a
// vector has Cols values.
type layerTensor struct {
	Name       string
	Mat        **kernels.Mat
	Vec        *[]float32
	Rows, Cols int
}

// tensors lists layer i's tensors in file order; the optional ones only
// when c has them.
func (n layerNames) tensors(c *Config, i int, l *Layer) []layerTensor {
	p := fmt.Sprintf(n.prefix, i)
	mat := func(name string, w **kernels.Mat, rows, cols int) layerTensor {
		return layerTensor{Name: p + name, Mat: w, Rows: rows, Cols: cols}
	}
	vec := func(name string, v *[]float32, cols int) layerTensor {
		return layerTensor{Name: p + name, Vec: v, Cols: cols}
	}
	ts := []layerTensor{
		vec(n.attnNorm, &l.AttnNorm, c.Dim),
		mat(n.q, &l.Wq, c.QDim(), c.Dim),
		mat(n.k, &l.Wk, c.KVDim(), c.Dim),
		mat(n.v, &l.Wv, c.KVDim(), c.Dim),
		mat(n.o, &l.Wo, c.Dim, c.QDim()),
		vec(n.ffnNorm, &l.FFNNorm, c.Dim),
		mat(n.gate, &l.W1, c.Hidden, c.Dim),
		mat(n.down, &l.W2, c.Dim, c.Hidden),
		mat(n.up, &l.W3, c.Hidden, c.Dim),
	}
	if c.QKVBias {
		ts = append(ts, vec(n.qBias, &l.Bq, c.QDim()), vec(n.kBias, &l.Bk, c.KVDim()), vec(n.vBias, &l.Bv, c.KVDim()))
	}
	if c.QKNorm {
		ts = append(ts, vec(n.qNorm, &l.QNorm, c.HeadDim), vec(n.kNorm, &l.KNorm, c.HeadDim))
	}
	return ts
}
