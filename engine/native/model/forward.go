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
//
// The elements are fp32 (KVF32: K and V) or IEEE halves (KVF16: K16 and
// V16, llama.cpp's default cache type): halves take half the memory, and
// decode, which reads every cached key and value once per token, is bound
// by that memory's bandwidth. Half values are rounded once, when written;
// attention widens them exactly, so batched and single-token results stay
// bitwise equal within one type. An fp16 layer is laid out head-major,
// [kv_head][slot][head_dim], so that one head's keys, which attention reads
// in position order, are one contiguous run of memory per run of
// consecutive blocks instead of short runs KVDim apart (slot-major halves
// decoded slower than fp32, the strided reads costing more than the halved
// bytes saved: docs/benchmarks/native.md). ReadBlock and
// WriteBlock convert to and from the slot-major fp32 layout that KV
// transfer carries.
type KVStore struct {
	BlockSize int
	NumBlocks int
	KVDim     int
	HeadDim   int
	Type      KVType
	K, V      [][]float32 // KVF32: [layer][NumBlocks*BlockSize*KVDim], slot-major
	K16, V16  [][]uint16  // KVF16: [layer][KVDim/HeadDim*NumBlocks*BlockSize*HeadDim], head-major
}

// KVType is the element type of a KVStore.
type KVType uint8

const (
	KVF32 KVType = iota
	KVF16
)

func (t KVType) String() string {
	if t == KVF16 {
		return "f16"
	}
	return "f32"
}

// ParseKVType reads a KV cache type name: f32 or f16.
func ParseKVType(s string) (KVType, error) {
	switch s {
	case "f32":
		return KVF32, nil
	case "f16":
		return KVF16, nil
	}
	return 0, fmt.Errorf("unknown KV cache type %q (want f32 or f16)", s)
}

// Bytes is the size of one element.
func (t KVType) Bytes() int {
	if t == KVF16 {
		return 2
	}
	return 4
}

// NewKVStore allocates an fp32 store for the model's shape.
func NewKVStore(c *Config, blockSize, numBlocks int) (*KVStore, error) {
	return NewKVStoreOf(c, blockSize, numBlocks, KVF32)
}

// NewKVStoreOf allocates a store of element type t.
func NewKVStoreOf(c *Config, blockSize, numBlocks int, t KVType) (*KVStore, error) {
	if blockSize <= 0 || numBlocks <= 0 {
		return nil, fmt.Errorf("kv store: block size %d and block count %d must be positive", blockSize, numBlocks)
	}
	if t != KVF32 && t != KVF16 {
		return nil, fmt.Errorf("kv store: unknown element type %d", t)
	}
	kv := &KVStore{BlockSize: blockSize, NumBlocks: numBlocks, KVDim: c.KVDim(), HeadDim: c.HeadDim, Type: t}
	n := blockSize * numBlocks * kv.KVDim
	for range c.Layers {
		if t == KVF16 {
			kv.K16 = append(kv.K16, make([]uint16, n))
			kv.V16 = append(kv.V16, make([]uint16, n))
		} else {
			kv.K = append(kv.K, make([]float32, n))
			kv.V = append(kv.V, make([]float32, n))
		}
	}
	return kv, nil
}

// BlockFloats is the number of floats of one block in one layer's K (or V).
func (kv *KVStore) BlockFloats() int { return kv.BlockSize * kv.KVDim }

// Layers is the number of layers the store holds.
func (kv *KVStore) Layers() int { return max(len(kv.K), len(kv.K16)) }

// ReadBlock widens block b of layer l's keys (or values, v) into dst
// (BlockFloats values).
func (kv *KVStore) ReadBlock(dst []float32, l, b int, v bool) {
	n := kv.BlockFloats()
	if kv.Type == KVF16 {
		src := kv.halves(l, v)
		bs, hd := kv.BlockSize, kv.HeadDim
		for h := range kv.KVDim / hd {
			// Head h's rows into the slot-major layout, KVDim apart.
			off := kv.headBase(h) + b*bs*hd
			kernels.F16ToF32Rows(dst[h*hd:n], kv.KVDim, src[off:off+bs*hd], hd, bs, hd)
		}
		return
	}
	copy(dst[:n], kv.floats(l, v)[b*n:(b+1)*n])
}

// WriteBlock stores src (BlockFloats values) as block b of layer l's keys
// (or values, v), rounded to halves in a KVF16 store.
func (kv *KVStore) WriteBlock(src []float32, l, b int, v bool) {
	n := kv.BlockFloats()
	if kv.Type == KVF16 {
		for s := range kv.BlockSize {
			kv.put16(l, v, b*kv.BlockSize+s, src[s*kv.KVDim:(s+1)*kv.KVDim])
		}
		return
	}
	copy(kv.floats(l, v)[b*n:(b+1)*n], src[:n])
}

// put stores slot's keys and values (KVDim each) in layer l.
func (kv *KVStore) put(l, slot int, k, v []float32) {
	d := kv.KVDim
	if kv.Type == KVF16 {
		kv.put16(l, false, slot, k)
		kv.put16(l, true, slot, v)
		return
	}
	copy(kv.K[l][slot*d:(slot+1)*d], k[:d])
	copy(kv.V[l][slot*d:(slot+1)*d], v[:d])
}

// put16 rounds one slot's keys (or values, v) into the head-major fp16
// layout.
func (kv *KVStore) put16(l int, v bool, slot int, x []float32) {
	dst, hd := kv.halves(l, v), kv.HeadDim
	for h := range kv.KVDim / hd {
		off := kv.headBase(h) + slot*hd
		kernels.F32ToF16Row(dst[off:off+hd], x[h*hd:(h+1)*hd])
	}
}

// headBase is where kv head h's slots start in an fp16 layer.
func (kv *KVStore) headBase(h int) int { return h * kv.NumBlocks * kv.BlockSize * kv.HeadDim }

// headRows returns the first n slots of block blk of layer l's keys (or
// values, v), restricted to kv head kh, as (values, stride between slots):
// the fp32 store itself, or the halves widened into buf (n·HeadDim values)
// for a KVF16 store.
func (kv *KVStore) headRows(buf []float32, l int, v bool, blk, kh, n int) ([]float32, int) {
	bs, hd := kv.BlockSize, kv.HeadDim
	if kv.Type == KVF16 {
		off := kv.headBase(kh) + blk*bs*hd
		kernels.F16ToF32Rows(buf, n*hd, kv.halves(l, v)[off:off+n*hd], n*hd, 1, n*hd)
		return buf, hd
	}
	return kv.floats(l, v)[blk*bs*kv.KVDim+kh*hd:], kv.KVDim
}

// floats is layer l's fp32 keys, or values (v).
func (kv *KVStore) floats(l int, v bool) []float32 {
	if v {
		return kv.V[l]
	}
	return kv.K[l]
}

// halves is layer l's fp16 keys, or values (v).
func (kv *KVStore) halves(l int, v bool) []uint16 {
	if v {
		return kv.V16[l]
	}
	return kv.K16[l]
}

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
	groups                               []attnGroup
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
	if kv.KVDim != c.KVDim() || kv.Layers() != c.Layers {
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
	st.tokSeq, st.tokPos, st.groups = st.tokSeq[:0], st.tokPos[:0], st.groups[:0]
	maxPos := 0
	for i := range seqs {
		s := &seqs[i]
		for j, tok := range s.Tokens {
			t := len(st.tokSeq)
			m.Embed.Row(st.x[t*dim:(t+1)*dim], int(tok))
			st.tokSeq = append(st.tokSeq, int32(i))
			st.tokPos = append(st.tokPos, int32(s.Pos+j))
		}
		t0 := len(st.tokSeq) - len(s.Tokens)
		for g := 0; g < len(s.Tokens); g += attnQueries {
			st.groups = append(st.groups, attnGroup{t0: int32(t0 + g), n: int32(min(attnQueries, len(s.Tokens)-g))})
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
			slot := int(s.Blocks[p/kv.BlockSize])*kv.BlockSize + p%kv.BlockSize
			for h := range c.KVHeads {
				kh := k[t*kvd+h*hd : t*kvd+(h+1)*hd]
				if c.QKNorm {
					kernels.RMSNorm(kh, kh, l.KNorm, c.NormEps)
				}
				m.rope(kh, p)
			}
			kv.put(li, slot, k[t*kvd:(t+1)*kvd], v[t*kvd:(t+1)*kvd])
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

// attnQueries is how many consecutive tokens of one sequence attend
// together: each K/V block is read once per such group and head, and the
// kernels compute several queries per key or value row loaded.
const attnQueries = 16

// attnGroup is up to attnQueries consecutive tokens of one sequence,
// starting at token t0 of the batch (so at consecutive positions).
type attnGroup struct{ t0, n int32 }

// attention computes every (token, head) pair independently: the scores of
// a token at position p cover positions [0,p] of its own sequence, read
// through its block table, in position order. Tokens are processed in
// groups (a pool unit is one group and head), which only shares the loads
// of K/V rows: every score and output keeps the order it has for a token
// alone, so batched and single-token results are bitwise equal.
func (m *Model) attention(pool *kernels.Pool, st *State, kv *KVStore, seqs []Seq, li, T, maxPos int) {
	j := &st.attn
	j.m, j.st, j.kv, j.seqs, j.li, j.ld = m, st, kv, seqs, li, maxPos
	for len(j.scores) < pool.Threads() {
		j.scores = append(j.scores, nil)
		j.kvbuf = append(j.kvbuf, nil)
	}
	if kv.Type == KVF16 {
		for w, b := range j.kvbuf {
			if len(b) < kv.BlockSize*m.Config.HeadDim {
				j.kvbuf[w] = make([]float32, kv.BlockSize*m.Config.HeadDim)
			}
		}
	}
	// One score row of maxPos per query of a group (a decode-only batch
	// needs one row).
	rows := 1
	for _, g := range st.groups {
		rows = max(rows, int(g.n))
	}
	n := rows * maxPos
	for w := range pool.Threads() {
		if cap(j.scores[w]) < n {
			j.scores[w] = make([]float32, n, max(n, rows*min(m.Config.SeqLen, 2*maxPos)))
		}
		j.scores[w] = j.scores[w][:cap(j.scores[w])]
	}
	pool.RunJob(len(st.groups)*m.Config.Heads, 1, j)
	j.m, j.st, j.kv, j.seqs = nil, nil, nil, nil
}

// attnJob is the attention of one layer as a pool job; it lives in State so
// dispatching it allocates nothing, and keeps one score buffer per thread
// (a group's score rows, ld apart).
type attnJob struct {
	m      *Model
	st     *State
	kv     *KVStore
	seqs   []Seq
	li, ld int
	scores [][]float32
	kvbuf  [][]float32 // per thread: one block's head rows widened (KVF16)
}

func (j *attnJob) Run(w, lo, hi int) {
	c := &j.m.Config
	st, kv := j.st, j.kv
	qd, hd := c.QDim(), c.HeadDim
	group := c.Heads / c.KVHeads
	scale := float32(math.Sqrt(float64(hd)))
	bs, ld := kv.BlockSize, j.ld
	scores, buf := j.scores[w], j.kvbuf[w]
	for u := lo; u < hi; u++ {
		g, h := st.groups[u/c.Heads], u%c.Heads
		t0, n := int(g.t0), int(g.n)
		s := &j.seqs[st.tokSeq[t0]]
		p0 := int(st.tokPos[t0]) // query i is at position p0+i
		pl := p0 + n - 1
		qo := t0*qd + h*hd // query i's head at qo + i*qd
		kh := h / group
		// Scores, a block at a time (rows of the block K, ks apart): the
		// keys every query of the group sees (positions up to p0) for all
		// queries at once, then each query's further keys.
		for b0 := 0; b0 <= pl; b0 += bs {
			K, ks := kv.headRows(buf, j.li, false, int(s.Blocks[b0/bs]), kh, min(bs, pl+1-b0))
			b1 := min(b0+bs, p0+1)
			if b1 > b0 {
				kernels.DotStridedN(scores[b0:], ld, st.q[qo:], qd, hd, n, K, ks, b1-b0)
			}
			for i := range n {
				if e := min(b0+bs, p0+i+1); e > max(b0, b1) {
					b := max(b0, b1)
					kernels.DotStrided(scores[i*ld+b:i*ld+e], st.q[qo+i*qd:qo+i*qd+hd], K[(b-b0)*ks:], ks)
				}
			}
		}
		for i := range n {
			sc := scores[i*ld : i*ld+p0+i+1]
			kernels.DivBy(sc, scale)
			kernels.Softmax(sc)
			clear(st.att[qo+i*qd : qo+i*qd+hd])
		}
		// Values, in position order for every query.
		for b0 := 0; b0 <= pl; b0 += bs {
			V, vs := kv.headRows(buf, j.li, true, int(s.Blocks[b0/bs]), kh, min(bs, pl+1-b0))
			b1 := min(b0+bs, p0+1)
			if b1 > b0 {
				kernels.AxpyStridedN(scores[b0:], ld, b1-b0, V, vs, st.att[qo:], qd, hd, n)
			}
			for i := range n {
				if e := min(b0+bs, p0+i+1); e > max(b0, b1) {
					b := max(b0, b1)
					kernels.AxpyStrided(scores[i*ld+b:i*ld+e], V[(b-b0)*vs:], vs, st.att[qo+i*qd:qo+i*qd+hd])
				}
			}
		}
	}
}
