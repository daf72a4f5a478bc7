package native

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/native/model"
	"github.com/tandemllm/tandem/kvcache"
	"github.com/zeebo/xxh3"
)

// KV transfer format, version 1. docs/kv-layout.md is the normative
// description; keep the two in step.
const (
	kvMagic      = "TKV1"
	kvVersion    = 1
	kvHeaderSize = 64
	kvDTypeF32   = 0
)

// ErrKVMismatch is returned by ImportKV for a payload made by another model
// or cache geometry.
var ErrKVMismatch = errors.New("native: KV payload does not match this engine")

// Fingerprint identifies a model's weights and shape, so KV computed by one
// model is never imported into another. It hashes the configuration, every
// norm vector and the first row of every matrix: cheap at load time, and
// any two different checkpoints differ there.
func Fingerprint(m *model.Model) [32]byte {
	h := sha256.New()
	c := m.Config
	fmt.Fprintf(h, "%s|%d|%d|%d|%d|%d|%d|%d|%d|%g|%d|%g|%t|%t|%t|%v|",
		c.Arch, c.Dim, c.Hidden, c.Layers, c.Heads, c.KVHeads, c.HeadDim, c.Vocab, c.SeqLen,
		c.RopeTheta, c.Rope, c.NormEps, c.Tied, c.QKNorm, c.QKVBias, c.RopeFreqFactors)
	var b [4]byte
	put := func(v []float32) {
		for _, f := range v {
			binary.LittleEndian.PutUint32(b[:], math.Float32bits(f))
			h.Write(b[:])
		}
	}
	row := make([]float32, max(c.Dim, c.Hidden, c.QDim()))
	mat := func(w interface {
		Row([]float32, int)
	}, cols int) {
		w.Row(row[:cols], 0)
		put(row[:cols])
	}
	mat(m.Embed, c.Dim)
	mat(m.Output, c.Dim)
	put(m.FinalNorm)
	for _, l := range m.Layers {
		put(l.AttnNorm)
		put(l.FFNNorm)
		put(l.QNorm)
		put(l.KNorm)
		put(l.Bq)
		mat(l.Wq, c.Dim)
		mat(l.Wk, c.Dim)
		mat(l.Wv, c.Dim)
		mat(l.Wo, c.QDim())
		mat(l.W1, c.Dim)
		mat(l.W2, c.Hidden)
		mat(l.W3, c.Dim)
	}
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// ExportKV serialises the K/V of the longest cached prefix of tokens, in
// whole blocks, in the layout of docs/kv-layout.md. A payload holding zero
// blocks is valid (nothing was cached).
func (e *Engine) ExportKV(ctx context.Context, tokens []engine.Token) ([]byte, error) {
	var out []byte
	err := e.do(ctx, func() {
		var s kvcache.Seq
		n := e.cache.Acquire(&s, tokens)
		out = e.encodeKV(tokens[:n], s.Blocks())
		e.cache.Free(&s)
	})
	return out, err
}

func (e *Engine) encodeKV(tokens []int32, blocks []kvcache.BlockID) []byte {
	c := &e.m.Config
	bs, bf := e.kv.BlockSize, e.kv.BlockFloats()
	size := kvHeaderSize + 4*len(tokens) + len(blocks)*c.Layers*2*bf*4 + 8
	out := make([]byte, kvHeaderSize, size)
	copy(out, kvMagic)
	le := binary.LittleEndian
	le.PutUint32(out[4:], kvVersion)
	copy(out[8:40], e.fp[:])
	for i, v := range []int{kvDTypeF32, c.Layers, c.KVHeads, c.HeadDim, bs, len(blocks)} {
		le.PutUint32(out[40+4*i:], uint32(v))
	}
	for _, t := range tokens {
		out = le.AppendUint32(out, uint32(t))
	}
	tmp := make([]float32, bf)
	for _, b := range blocks {
		for l := range c.Layers {
			for _, v := range []bool{false, true} {
				e.kv.ReadBlock(tmp, l, int(b), v)
				for _, f := range tmp {
					out = le.AppendUint32(out, math.Float32bits(f))
				}
			}
		}
	}
	return le.AppendUint64(out, xxh3.Hash(out))
}

// kvPayload is a decoded, validated header plus views into the payload.
type kvPayload struct {
	tokens []int32
	data   []byte // block data, len = blocks*layers*2*blockFloats*4
}

func (e *Engine) decodeKV(p []byte) (*kvPayload, error) {
	c := &e.m.Config
	le := binary.LittleEndian
	if len(p) < kvHeaderSize+8 {
		return nil, fmt.Errorf("%w: %d bytes is shorter than the header", ErrKVMismatch, len(p))
	}
	if string(p[:4]) != kvMagic {
		return nil, fmt.Errorf("%w: bad magic %q", ErrKVMismatch, p[:4])
	}
	if v := le.Uint32(p[4:]); v != kvVersion {
		return nil, fmt.Errorf("%w: version %d, want %d", ErrKVMismatch, v, kvVersion)
	}
	if sum := le.Uint64(p[len(p)-8:]); sum != xxh3.Hash(p[:len(p)-8]) {
		return nil, fmt.Errorf("%w: checksum mismatch (corrupt payload)", ErrKVMismatch)
	}
	if [32]byte(p[8:40]) != e.fp {
		return nil, fmt.Errorf("%w: made by a different model", ErrKVMismatch)
	}
	var h [6]uint32
	for i := range h {
		h[i] = le.Uint32(p[40+4*i:])
	}
	want := [5]uint32{kvDTypeF32, uint32(c.Layers), uint32(c.KVHeads), uint32(c.HeadDim), uint32(e.kv.BlockSize)}
	if [5]uint32(h[:5]) != want {
		return nil, fmt.Errorf("%w: dtype/layers/kv_heads/head_dim/block_size %v, want %v", ErrKVMismatch, h[:5], want)
	}
	nb := int64(h[5])
	bs, bf := int64(e.kv.BlockSize), int64(e.kv.BlockFloats())
	body := int64(len(p)) - kvHeaderSize - 8
	if need := nb*bs*4 + nb*int64(c.Layers)*2*bf*4; need != body {
		return nil, fmt.Errorf("%w: %d blocks need %d bytes after the header, payload has %d", ErrKVMismatch, nb, need, body)
	}
	out := &kvPayload{tokens: make([]int32, nb*bs)}
	q := p[kvHeaderSize:]
	for i := range out.tokens {
		out.tokens[i] = int32(le.Uint32(q[4*i:]))
		if out.tokens[i] < 0 || int(out.tokens[i]) >= c.Vocab {
			return nil, fmt.Errorf("%w: token %d outside the vocabulary", ErrKVMismatch, out.tokens[i])
		}
	}
	out.data = q[4*len(out.tokens) : len(q)-8]
	return out, nil
}

// ImportKV stores the blocks of a payload from ExportKV in this engine's
// prefix cache, so a later request whose prompt starts with those tokens
// reuses them instead of computing them. It returns the tokens now cached.
// Blocks already present are left as they are (they hold the same bytes).
func (e *Engine) ImportKV(ctx context.Context, payload []byte) (int, error) {
	kp, err := e.decodeKV(payload)
	if err != nil {
		return 0, err
	}
	var n int
	err = e.do(ctx, func() {
		var s kvcache.Seq
		fill, ierr := e.cache.Import(&s, kp.tokens)
		if ierr != nil {
			err = fmt.Errorf("native: import KV: %w", ierr)
			e.cache.Free(&s)
			return
		}
		per := e.KVBlockBytes()
		blocks := s.Blocks()
		tmp := make([]float32, e.kv.BlockFloats())
		for _, i := range fill {
			e.writeBlock(int(blocks[i]), kp.data[i*per:(i+1)*per], tmp)
		}
		n = len(blocks) * e.kv.BlockSize
		e.cache.Free(&s)
	})
	return n, err
}

// writeBlock stores one block of the fp32 wire layout (per layer, K then
// V, BlockFloats little-endian floats each; KVBlockBytes in all) as cache
// block b, rounding to halves in an fp16 store; tmp holds BlockFloats
// values.
func (e *Engine) writeBlock(b int, src []byte, tmp []float32) {
	bf := e.kv.BlockFloats()
	tmp = tmp[:bf]
	for l := range e.m.Config.Layers {
		for _, v := range []bool{false, true} {
			for j := range tmp {
				tmp[j] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*j:]))
			}
			e.kv.WriteBlock(tmp, l, b, v)
			src = src[4*bf:]
		}
	}
}
