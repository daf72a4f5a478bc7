package model

import (
	"context"
	"fmt"
	"math"

	"github.com/tandemllm/tandem/engine/native/kernels"
)

// KVStore is the paged key/value memory of one model: per layer, NumBlocks
// blocks of BlockSize token slots, each slot holding KVDim keys (or values)
// laid out [kv_head][head_dim]. Sequences address it through block tables,
// so blocks can be shared between sequences (prefix caching) and copied
// out and in whole (KV transfer).
type KVStore struct {
	BlockSize int
	NumBlocks int
	KVDim     int
	K, V      [][]float32 // [layer][NumBlocks*BlockSize*KVDim]
}

// NewKVStore allocates a store for the model's shape.
func NewKVStore(c *Config, blockSize, numBlocks int) (*KVStore, error) {
	if blockSize <= 0 || numBlocks <= 0 {
		return nil, fmt.Errorf("kv store: block size %d and block count %d must be positive", blockSize, numBlocks)
	}
	kv := &KVStore{BlockSize: blockSize, NumBlocks: numBlocks, KVDim: c.KVDim()}
	n := blockSize * numBlocks * kv.KVDim
	for range c.Layers {
		kv.K = append(kv.K, make([]float32, n))
		kv.V = append(kv.V, make([]float32, n))
	}
	return kv, nil
}

// BlockFloats is the number of floats of one block in one layer's K (or V).
func (kv *KVStore) BlockFloats() int { return kv.BlockSize * kv.KVDim }

// Seq is one sequence's share of a forward batch: Tokens at positions
// Pos, Pos+1, ... whose K/V go to the slots named by Blocks (the block table
// covering positions [0, Pos+len(Tokens))).
type Seq struct {
	Tokens []int32
	Pos    int
	Blocks []int32
	// Logits, when non-nil (len Vocab), receives the last token's logits.
	Logits []float32
}

// State holds the activations of a forward pass, reused across calls.
type State struct {
	x, xb, q, k, v, att, hb, hb2, logits []float32
	tokSeq                               []int32
	tokPos                               []int32
	sc                                   kernels.Scratch
	attn                                 attnJob
}

func grow(b []float32, n int) []float32 {
	if cap(b) < n {
		return make([]float32, n)
	}
	return b[:n]
}

// Forward runs the tokens of seqs through the model, writing their K/V into
// kv and the requested logits. It checks ctx between layers so a cancelled
// step stops within one layer's time.
func (m *Model) Forward(ctx context.Context, pool *kernels.Pool, st *State, kv *KVStore, seqs []Seq) error {
	c := &m.Config
	if kv.KVDim != c.KVDim() || len(kv.K) != c.Layers {
		return fmt.Errorf("forward: kv store shape does not match the model")
	}
	T, S := 0, 0
	for i := range seqs {
		s := &seqs[i]
		end := s.Pos + len(s.Tokens)
		if s.Pos < 0 || end > c.SeqLen {
			return fmt.Errorf("forward: positions [%d,%d) exceed the context length %d", s.Pos, end, c.SeqLen)
		}
		if len(s.Blocks)*kv.BlockSize < end {
			return fmt.Errorf("forward: %d blocks cannot hold %d positions", len(s.Blocks), end)
		}
		for _, b := range s.Blocks[:(end+kv.BlockSize-1)/kv.BlockSize] {
			if b < 0 || int(b) >= kv.NumBlocks {
				return fmt.Errorf("forward: block %d out of range [0,%d)", b, kv.NumBlocks)
			}
		}
		for _, tok := range s.Tokens {
			if tok < 0 || int(tok) >= c.Vocab {
				return fmt.Errorf("forward: token %d out of range [0,%d)", tok, c.Vocab)
			}
		}
		if s.Logits != nil {
			if len(s.Tokens) == 0 || len(s.Logits) != c.Vocab {
				return fmt.Errorf("forward: logits need a token and %d slots", c.Vocab)
			}
			S++
		}
		T += len(s.Tokens)
	}
	if T == 0 {
		return nil
	}
	dim, qd, kvd, hd := c.Dim, c.QDim(), c.KVDim(), c.HeadDim
	st.x, st.xb = grow(st.x, T*dim), grow(st.xb, T*max(dim, qd))
	st.q, st.att = grow(st.q, T*qd), grow(st.att, T*qd)
	st.k, st.v = grow(st.k, T*kvd), grow(st.v, T*kvd)
	st.hb, st.hb2 = grow(st.hb, T*c.Hidden), grow(st.hb2, T*c.Hidden)
	st.tokSeq, st.tokPos = st.tokSeq[:0], st.tokPos[:0]
	maxPos := 0
	for i := range seqs {
		s := &seqs[i]
		for j, tok := range s.Tokens {
			t := len(st.tokSeq)
			m.Embed.Row(st.x[t*dim:(t+1)*dim], int(tok))
			st.tokSeq = append(st.tokSeq, int32(i))
			st.tokPos = append(st.tokPos, int32(s.Pos+j))
		}
		maxPos = max(maxPos, s.Pos+len(s.Tokens))
	}
	x, xb, q, k, v, att := st.x, st.xb[:T*dim], st.q, st.k, st.v, st.att
	for li := range m.Layers {
		l := &m.Layers[li]
		for t := range T {
			kernels.RMSNorm(xb[t*dim:(t+1)*dim], x[t*dim:(t+1)*dim], l.AttnNorm, c.NormEps)
		}
		pool.MatMulMulti([]kernels.Prod{{Out: q, W: l.Wq}, {Out: k, W: l.Wk}, {Out: v, W: l.Wv}}, xb, T, &st.sc)
		for t := range T {
			if c.QKVBias {
				addTo(q[t*qd:(t+1)*qd], l.Bq)
				addTo(k[t*kvd:(t+1)*kvd], l.Bk)
				addTo(v[t*kvd:(t+1)*kvd], l.Bv)
			}
			p := int(st.tokPos[t])
			for h := range c.Heads {
				qh := q[t*qd+h*hd : t*qd+(h+1)*hd]
				if c.QKNorm {
					kernels.RMSNorm(qh, qh, l.QNorm, c.NormEps)
				}
				m.rope(qh, p)
			}
			s := &seqs[st.tokSeq[t]]
			off := (int(s.Blocks[p/kv.BlockSize])*kv.BlockSize + p%kv.BlockSize) * kvd
			for h := range c.KVHeads {
				kh := k[t*kvd+h*hd : t*kvd+(h+1)*hd]
				if c.QKNorm {
					kernels.RMSNorm(kh, kh, l.KNorm, c.NormEps)
				}
				m.rope(kh, p)
			}
			copy(kv.K[li][off:off+kvd], k[t*kvd:(t+1)*kvd])
			copy(kv.V[li][off:off+kvd], v[t*kvd:(t+1)*kvd])
		}
		m.attention(pool, st, kv, seqs, li, T, maxPos)
		pool.MatMul(xb, l.Wo, att, T, &st.sc)
		addTo(x, xb)
		for t := range T {
			kernels.RMSNorm(xb[t*dim:(t+1)*dim], x[t*dim:(t+1)*dim], l.FFNNorm, c.NormEps)
		}
		pool.MatMulSwiGLU(st.hb, st.hb2, l.W1, l.W3, xb, T, &st.sc)
		pool.MatMul(xb, l.W2, st.hb, T, &st.sc)
		addTo(x, xb)
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	if S == 0 {
		return nil
	}
	// Only the last token of each sequence that asked is projected: the
	// classifier is the largest matrix of small models.
	xf := xb[:S*dim]
	j, t := 0, 0
	for i := range seqs {
		s := &seqs[i]
		t += len(s.Tokens)
		if s.Logits != nil {
			kernels.RMSNorm(xf[j*dim:(j+1)*dim], x[(t-1)*dim:t*dim], m.FinalNorm, c.NormEps)
			j++
		}
	}
	st.logits = grow(st.logits, S*c.Vocab)
	pool.MatMul(st.logits, m.Output, xf, S, &st.sc)
	j = 0
	for i := range seqs {
		if s := &seqs[i]; s.Logits != nil {
			copy(s.Logits, st.logits[j*c.Vocab:(j+1)*c.Vocab])
			j++
		}
	}
	return nil
}

func addTo(dst, src []float32) {
	src = src[:len(dst)]
	for i, v := range src {
		dst[i] += v
	}
}

func (m *Model) rope(h []float32, pos int) {
	half := len(h) / 2
	cs, sn := m.cos[pos*half:(pos+1)*half], m.sin[pos*half:(pos+1)*half]
	if m.Config.Rope == RopeHalf {
		for j := range half {
			v0, v1 := h[j], h[j+half]
			h[j] = v0*cs[j] - v1*sn[j]
			h[j+half] = v0*sn[j] + v1*cs[j]
		}
		return
	}
	for j := range half {
		v0, v1 := h[2*j], h[2*j+1]
		h[2*j] = v0*cs[j] - v1*sn[j]
		h[2*j+1] = v0*sn[j] + v1*cs[j]
	}
}

// attention computes every (token, head) pair independently: the scores of
// a token at position p cover positions [0,p] of its own sequence, read
// through its block table, in position order.
func (m *Model) attention(pool *kernels.Pool, st *State, kv *KVStore, seqs []Seq, li, T, maxPos int) {
	j := &st.attn
	j.m, j.st, j.kv, j.seqs, j.li = m, st, kv, seqs, li
	for len(j.scores) < pool.Threads() {
		j.scores = append(j.scores, nil)
	}
	for w := range pool.Threads() {
		if cap(j.scores[w]) < maxPos {
			j.scores[w] = make([]float32, maxPos, max(maxPos, m.Config.SeqLen))
		}
	}
	pool.RunJob(T*m.Config.Heads, 1, j)
	j.m, j.st, j.kv, j.seqs = nil, nil, nil, nil
}

// attnJob is the attention of one layer as a pool job; it lives in State so
// dispatching it allocates nothing, and keeps one score buffer per thread.
type attnJob struct {
	m      *Model
	st     *State
	kv     *KVStore
	seqs   []Seq
	li     int
	scores [][]float32
}

func (j *attnJob) Run(w, lo, hi int) {
	c := &j.m.Config
	st, kv := j.st, j.kv
	qd, kvd, hd := c.QDim(), c.KVDim(), c.HeadDim
	group := c.Heads / c.KVHeads
	scale := float32(math.Sqrt(float64(hd)))
	K, V := kv.K[j.li], kv.V[j.li]
	bs := kv.BlockSize
	scores := j.scores[w]
	for u := lo; u < hi; u++ {
		t, h := u/c.Heads, u%c.Heads
		s := &j.seqs[st.tokSeq[t]]
		p := int(st.tokPos[t])
		qh := st.q[t*qd+h*hd : t*qd+(h+1)*hd]
		ko := (h / group) * hd
		sc := scores[:p+1]
		// Keys and values are read a block at a time: within a block
		// the positions are kvd apart.
		for b0 := 0; b0 <= p; b0 += bs {
			b1 := min(p+1, b0+bs)
			off := int(s.Blocks[b0/bs])*bs*kvd + ko
			kernels.DotStrided(sc[b0:b1], qh, K[off:], kvd)
		}
		for i := range sc {
			sc[i] /= scale
		}
		kernels.Softmax(sc)
		out := st.att[t*qd+h*hd : t*qd+(h+1)*hd]
		clear(out)
		for b0 := 0; b0 <= p; b0 += bs {
			b1 := min(p+1, b0+bs)
			off := int(s.Blocks[b0/bs])*bs*kvd + ko
			kernels.AxpyStrided(sc[b0:b1], V[off:], kvd, out)
		}
	}
}
