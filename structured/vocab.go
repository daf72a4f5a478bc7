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
	// plain marks tokens made only of printable ASCII other than '"' and
	// '\\'; restOrder/restLCP are the other tokens, sorted. A state that
	// loops to itself on every such byte (inside a free string) allows
	// every plain token, so its walk covers only the rest.
	plain     []uint64
	restOrder []int32
	restLCP   []uint16
}

// plainByte: printable ASCII but '"' and '\\'.
func plainByte(c byte) bool { return c >= 0x20 && c < 0x7f && c != '"' && c != '\\' }

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
	v.plain = make([]uint64, v.MaskWords())
	for _, id := range v.order {
		isPlain := true
		for _, c := range v.toks[id] {
			if !plainByte(c) {
				isPlain = false
				break
			}
		}
		if isPlain {
			v.plain[id>>6] |= 1 << (uint(id) & 63)
		} else {
			v.restOrder = append(v.restOrder, id)
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
	v.lcp = v.lcps(v.order)
	slices.SortFunc(v.restOrder, func(a, b int32) int { return bytes.Compare(v.toks[a], v.toks[b]) })
	v.restLCP = v.lcps(v.restOrder)
	return v, nil
}

// lcps is each token's common prefix with the one before it in order.
func (v *Vocab) lcps(order []int32) []uint16 {
	lcp := make([]uint16, len(order))
	for i := 1; i < len(order); i++ {
		a, b := v.toks[order[i-1]], v.toks[order[i]]
		k := 0
		for k < len(a) && k < len(b) && a[k] == b[k] {
			k++
		}
		lcp[i] = uint16(k)
	}
	return lcp
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

// loopsOnPlain reports whether every plain byte takes state st back to
// itself: then every plain token does too, so all are allowed.
func (v *Vocab) loopsOnPlain(d *dfa, st int32) bool {
	for c := byte(0x20); c < 0x7f; c++ {
		if plainByte(c) && d.step(st, c) != st {
			return false
		}
	}
	return true
}

// computeMask walks the sorted vocabulary from DFA state st. The caller
// holds the grammar's lock.
func (v *Vocab) computeMask(d *dfa, st int32, states []int32) []uint64 {
	mask := make([]uint64, v.MaskWords())
	if d.states[st].accept {
		for _, e := range v.eos {
			mask[e>>6] |= 1 << (uint(e) & 63)
		}
	}
	order, lcps := v.order, v.lcp
	if v.loopsOnPlain(d, st) {
		copy(mask, v.plain)
		if d.states[st].accept {
			for _, e := range v.eos {
				mask[e>>6] |= 1 << (uint(e) & 63)
			}
		}
		order, lcps = v.restOrder, v.restLCP
	}
	states[0] = st
	valid := 0 // states[0..valid] hold the previous token's live prefix
	for i, id := range order {
		t := v.toks[id]
		l := int(lcps[i])
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
