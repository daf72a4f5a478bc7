package structured

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"

	"github.com/tandemllm/tandem/tokenid"
)

// maxVocab bounds the vocabulary size a Vocab accepts.
const maxVocab = 1 << 22

// maxTokenBytes bounds one token's byte string.
const maxTokenBytes = 1 << 10

// Vocab is a model's vocabulary as the mask walk needs it: every token's
// bytes, sorted, with the common prefix of each with the one before.
// Immutable after NewVocab; safe for concurrent use.
type Vocab struct {
	n      int
	toks   [][]byte
	order  []int32  // ids sorted by bytes (tokens with bytes only)
	lcp    []uint16 // lcp[i]: common prefix of order[i] and order[i-1]
	maxLen int
	eos    []tokenid.ID
	fp     string
	// closers marks tokens holding a byte that ends a JSON string or
	// container ('"', '}', ']'): Pick's bias toward short outputs.
	closers []uint64
}

// NewVocab builds a Vocab. tokens[id] is token id's byte string; an empty
// one (a control token) is never allowed by a mask. eos lists the ids that
// end generation; they are allowed exactly in accepting states.
func NewVocab(tokens [][]byte, eos []tokenid.ID) (*Vocab, error) {
	if len(tokens) == 0 || len(tokens) > maxVocab {
		return nil, fmt.Errorf("structured: vocabulary of %d tokens (want 1..%d)", len(tokens), maxVocab)
	}
	v := &Vocab{n: len(tokens), toks: make([][]byte, len(tokens))}
	h := sha256.New()
	var lb [4]byte
	isEOS := make(map[tokenid.ID]bool, len(eos))
	for _, e := range eos {
		if e < 0 || int(e) >= len(tokens) {
			return nil, fmt.Errorf("structured: EOS id %d outside the vocabulary of %d", e, len(tokens))
		}
		if !isEOS[e] {
			isEOS[e] = true
			v.eos = append(v.eos, e)
		}
	}
	for id, t := range tokens {
		if len(t) > maxTokenBytes {
			return nil, fmt.Errorf("structured: token %d is %d bytes (limit %d)", id, len(t), maxTokenBytes)
		}
		binary.LittleEndian.PutUint32(lb[:], uint32(len(t)))
		h.Write(lb[:])
		h.Write(t)
		v.toks[id] = slices.Clone(t)
		if len(t) > 0 && !isEOS[tokenid.ID(id)] {
			v.order = append(v.order, int32(id))
			v.maxLen = max(v.maxLen, len(t))
		}
	}
	v.closers = make([]uint64, v.MaskWords())
	for _, id := range v.order {
		if bytes.ContainsAny(v.toks[id], `"}]`) {
			v.closers[id>>6] |= 1 << (uint(id) & 63)
		}
	}
	for _, e := range v.eos {
		binary.LittleEndian.PutUint32(lb[:], uint32(e))
		h.Write(lb[:])
	}
	v.fp = hex.EncodeToString(h.Sum(nil))
	slices.SortFunc(v.order, func(a, b int32) int { return bytes.Compare(v.toks[a], v.toks[b]) })
	v.lcp = make([]uint16, len(v.order))
	for i := 1; i < len(v.order); i++ {
		a, b := v.toks[v.order[i-1]], v.toks[v.order[i]]
		k := 0
		for k < len(a) && k < len(b) && a[k] == b[k] {
			k++
		}
		v.lcp[i] = uint16(k)
	}
	return v, nil
}

// Size is the number of token ids (the mask's length in bits).
func (v *Vocab) Size() int { return v.n }

// MaskWords is the length of a mask in uint64 words.
func (v *Vocab) MaskWords() int { return (v.n + 63) / 64 }

// Fingerprint is a hash of the token bytes and EOS ids.
func (v *Vocab) Fingerprint() string { return v.fp }

// Token returns token id's bytes (shared: do not modify).
func (v *Vocab) Token(id tokenid.ID) []byte {
	if id < 0 || int(id) >= v.n {
		return nil
	}
	return v.toks[id]
}

// IsEOS reports whether id ends generation.
func (v *Vocab) IsEOS(id tokenid.ID) bool { return slices.Contains(v.eos, id) }

// computeMask walks the sorted vocabulary from DFA state st. The caller
// holds the grammar's lock.
func (v *Vocab) computeMask(d *dfa, st int32, states []int32) []uint64 {
	mask := make([]uint64, v.MaskWords())
	if d.states[st].accept {
		for _, e := range v.eos {
			mask[e>>6] |= 1 << (uint(e) & 63)
		}
	}
	states[0] = st
	valid := 0 // states[0..valid] hold the previous token's live prefix
	for i, id := range v.order {
		t := v.toks[id]
		l := int(v.lcp[i])
		if l > valid {
			continue // shares the dead prefix of an earlier token
		}
		j := l
		for ; j < len(t); j++ {
			nx := d.trans[int(states[j])<<8|int(t[j])]
			if nx > 0 {
				states[j+1] = nx - 1
				continue
			}
			if nx < 0 {
				break
			}
			if nx = d.step(states[j], t[j]); nx < 0 {
				break
			}
			states[j+1] = nx
		}
		valid = j
		if j == len(t) {
			mask[id>>6] |= 1 << (uint(id) & 63)
		}
	}
	return mask
}
