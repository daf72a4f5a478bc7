package structured

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"

	"github.com/tandemllm/tandem/tokenid"
)

// maxVocab bounds the vocabulary size a Vocab accepts.
const maxVocab = 1 << 22

// maxTokenBytes bounds one token's byte string.
const maxTokenBytes = 1 << 10

// Vocab is a model's vocabulary as the mask walk needs it: every token's
// bytes, sorted, with the common prefix of each with the one before.
// Immutable after NewVocab but for its shape cache (under its own lock);
// safe for concurrent use.
type Vocab struct {
	n      int
	toks   [][]byte
	maxLen int
	eos    []tokenid.ID
	fp     string
	// closers marks tokens holding a byte that ends a JSON string or
	// container ('"', '}', ']'): Pick's bias toward short outputs.
	closers []uint64
	// plain marks tokens made only of printable ASCII other than '"' and
	// '\\'. A state that loops to itself on every such byte (inside a
	// free string) allows every plain token, so its walk covers only the
	// rest.
	plain []uint64
	// all is every token with bytes (EOS aside), rest those not plain;
	// exit those holding exitByte, local the others, localRest those of
	// local not plain.
	all, rest, exit, local, localRest tokenList
	shapes                            shapeCache
}

// exitByte splits the vocabulary for the shape cache: it ends a JSON
// string, so the tokens without it (nearly all) are decided by the few
// states around a string's or a structure's position, and those with it
// (few) are walked against the whole automaton.
const exitByte = '"'

// tokenList is a sorted list of token ids with, per token, its common
// prefix with the one before, and the index of the first token of each
// first byte (bucket[256] is the length): a walk that finds a first byte
// dead skips all the tokens that start with it.
type tokenList struct {
	order  []int32
	lcp    []uint16
	bucket [257]int32
}

// newTokenList indexes ids, sorted by bytes.
func (v *Vocab) newTokenList(ids []int32) tokenList {
	l := tokenList{order: ids, lcp: v.lcps(ids)}
	i := 0
	for c := 0; c <= 256; c++ {
		for i < len(l.order) && int(v.toks[l.order[i]][0]) < c {
			i++
		}
		l.bucket[c] = int32(i)
	}
	return l
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
	var all, rest, exit, local, localRest []int32
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
			all = append(all, int32(id))
			v.maxLen = max(v.maxLen, len(t))
		}
	}
	v.plain = make([]uint64, v.MaskWords())
	for _, id := range all {
		isPlain := true
		for _, c := range v.toks[id] {
			if !plainByte(c) {
				isPlain = false
				break
			}
		}
		if isPlain {
			v.plain[id>>6] |= 1 << (uint(id) & 63)
		}
	}
	v.closers = make([]uint64, v.MaskWords())
	for _, id := range all {
		if bytes.ContainsAny(v.toks[id], `"}]`) {
			v.closers[id>>6] |= 1 << (uint(id) & 63)
		}
	}
	for _, e := range v.eos {
		binary.LittleEndian.PutUint32(lb[:], uint32(e))
		h.Write(lb[:])
	}
	v.fp = hex.EncodeToString(h.Sum(nil))
	slices.SortFunc(all, func(a, b int32) int { return bytes.Compare(v.toks[a], v.toks[b]) })
	for _, id := range all {
		if v.plain[id>>6]&(1<<(uint(id)&63)) == 0 {
			rest = append(rest, id)
		}
		switch {
		case bytes.IndexByte(v.toks[id], exitByte) >= 0:
			exit = append(exit, id)
		case v.plain[id>>6]&(1<<(uint(id)&63)) != 0:
			local = append(local, id)
		default:
			local = append(local, id)
			localRest = append(localRest, id)
		}
	}
	v.all, v.rest = v.newTokenList(all), v.newTokenList(rest)
	v.exit, v.local, v.localRest = v.newTokenList(exit), v.newTokenList(local), v.newTokenList(localRest)
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

// computeMask is the mask of DFA state st. The tokens without exitByte
// come from the shape cache, keyed by st's shape (computed on a miss by a
// walk over the shape's small table); the tokens with it are walked
// against the automaton. A state whose shape is too large gets the whole
// walk. The caller holds the grammar's lock.
func (v *Vocab) computeMask(d *dfa, st int32, states []int32) []uint64 {
	key, ok := d.shape(st, maxShapeStates)
	if !ok {
		return v.walkMask(d, st, states)
	}
	mask := make([]uint64, v.MaskWords())
	local := v.shapes.get(key)
	if local == nil {
		local = v.shapeMask(key)
		v.shapes.put(string(key), local)
	}
	copy(mask, local)
	walkList(mask, d, st, states, v.toks, &v.exit)
	if d.states[st].accept {
		for _, e := range v.eos {
			mask[e>>6] |= 1 << (uint(e) & 63)
		}
	}
	return mask
}

// walkMask walks the whole sorted vocabulary from DFA state st.
func (v *Vocab) walkMask(d *dfa, st int32, states []int32) []uint64 {
	mask := make([]uint64, v.MaskWords())
	list := &v.all
	if v.loopsOnPlain(d, st) {
		copy(mask, v.plain)
		list = &v.rest
	}
	if d.states[st].accept {
		for _, e := range v.eos {
			mask[e>>6] |= 1 << (uint(e) & 63)
		}
	}
	walkList(mask, d, st, states, v.toks, list)
	return mask
}

// walkList sets in mask the tokens of l whose bytes all lead somewhere
// from state st, sharing common prefixes and skipping every token under
// a dead prefix.
func walkList(mask []uint64, d *dfa, st int32, states []int32, toks [][]byte, l *tokenList) {
	states[0] = st
	valid := 0 // states[0..valid] hold the previous token's live prefix
	order, lcps := l.order, l.lcp
	for i := 0; i < len(order); i++ {
		id := order[i]
		t := toks[id]
		k := int(lcps[i])
		if k > valid {
			continue // shares the dead prefix of an earlier token
		}
		j := k
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
		} else if j == 0 {
			i = int(l.bucket[int(t[0])+1]) - 1 // every token with this first byte
		}
	}
}

// shapeMask is the mask of the tokens without exitByte that a shape (see
// dfa.shape) allows from its first state.
func (v *Vocab) shapeMask(table []byte) []uint64 {
	mask := make([]uint64, v.MaskWords())
	l := &v.local
	loops := true
	for c := 0x20; c < 0x7f; c++ {
		if plainByte(byte(c)) && table[c] != 1 {
			loops = false
			break
		}
	}
	if loops {
		copy(mask, v.plain)
		l = &v.localRest
	}
	states := make([]uint8, v.maxLen+1)
	valid := 0
	order, lcps := l.order, l.lcp
	for i := 0; i < len(order); i++ {
		id := order[i]
		t := v.toks[id]
		k := int(lcps[i])
		if k > valid {
			continue
		}
		j := k
		for ; j < len(t); j++ {
			nx := table[int(states[j])<<8|int(t[j])]
			if nx == 0 {
				break
			}
			states[j+1] = nx - 1
		}
		valid = j
		if j == len(t) {
			mask[id>>6] |= 1 << (uint(id) & 63)
		} else if j == 0 {
			i = int(l.bucket[int(t[0])+1]) - 1
		}
	}
	return mask
}

// maxShapeBytes bounds the shape cache of one vocabulary; past it the
// cache is dropped and shapes are walked again as met.
const maxShapeBytes = 128 << 20

// shapeCache maps a shape's table to the mask of the tokens without
// exitByte it allows. It is shared by every grammar bound to the
// vocabulary: the shapes of string contents and of JSON's punctuation
// recur across positions and schemas.
type shapeCache struct {
	mu    sync.Mutex
	m     map[string][]uint64
	bytes int
}

func (s *shapeCache) get(key []byte) []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[string(key)]
}

func (s *shapeCache) put(key string, mask []uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[key]; ok {
		return
	}
	n := len(key) + len(mask)*8
	if s.m == nil || s.bytes+n > maxShapeBytes {
		s.m, s.bytes = map[string][]uint64{}, 0
	}
	s.m[key] = mask
	s.bytes += n
}
