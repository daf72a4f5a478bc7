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
	// The tokens with bytes (EOS aside) as tries: exit holds those with
	// exitByte, local the others, localRest those of local not plain.
	exit, local, localRest trie
	shapes                 shapeCache
	composed               composedCache
	// counted holds, per position set within a JSON string character,
	// the tokens by characters started (counted.go); built with the
	// vocabulary, read-only after.
	counted map[uint64]*countedSet
}

// exitByte splits the vocabulary for the shape cache: it ends a JSON
// string, so the tokens without it (nearly all) are decided by the few
// states around a string's or a structure's position, and those with it
// (few) are walked against the whole automaton.
const exitByte = '"'

// trie is a set of tokens laid out in preorder: node i is one byte, at
// depth dep (its ancestors are its prefix); end is the index past its
// subtree, so a walk that finds a node dead skips every token under it;
// the tokens whose bytes end at node i are ids[tok0 of i : tok0 of i+1]
// (the last node is a sentinel).
type trie struct {
	nodes []trieNode
	ids   []int32
	// root[c] is the node (plus one; 0: none) of depth 0 and byte c, and
	// kids[c<<8|c1] the node (plus one) of depth 1 under it with byte c1:
	// a walk finds its first two bytes' nodes by index (see spans).
	root [256]int32
	kids []int32
}

type trieNode struct {
	end  int32
	tok0 int32
	dep  uint16
	b    byte
}

// newTrie builds the trie of ids, sorted by bytes.
func (v *Vocab) newTrie(ids []int32) trie {
	var tr trie
	var open []int32 // open[d]: the node at depth d on the current path
	var prev []byte
	for _, id := range ids {
		t := v.toks[id]
		l := 0
		for l < len(t) && l < len(prev) && t[l] == prev[l] {
			l++
		}
		for j := l; j < len(t); j++ {
			n := int32(len(tr.nodes))
			for len(open) > j {
				tr.nodes[open[len(open)-1]].end = n
				open = open[:len(open)-1]
			}
			tr.nodes = append(tr.nodes, trieNode{tok0: int32(len(tr.ids)), dep: uint16(j), b: t[j]})
			open = append(open, n)
		}
		// The token ends at the newest node: sorted order puts a prefix
		// before its extensions and equal byte strings together.
		tr.ids = append(tr.ids, id)
		prev = t
	}
	n := int32(len(tr.nodes))
	for _, o := range open {
		tr.nodes[o].end = n
	}
	tr.nodes = append(tr.nodes, trieNode{end: n + 1, tok0: int32(len(tr.ids))})
	tr.kids = make([]int32, 256*256)
	var c0 int
	for i, nd := range tr.nodes[:n] {
		switch nd.dep {
		case 0:
			c0 = int(nd.b)
			tr.root[c0] = int32(i) + 1
		case 1:
			tr.kids[c0<<8|int(nd.b)] = int32(i) + 1
		}
	}
	return tr
}

// span is a part of a trie that a walk covers: the tokens ending at node
// and, when deep, the node's descendants, the first of them met in state
// st at depth dep.
type span struct {
	node, st int32
	dep      uint16
	deep     bool
}

// fewKids: past a first byte, a state with at most this many live bytes
// has its second bytes' nodes found by index; from one with more (inside
// a free string) they are read in preorder.
const fewKids = 16

// spans appends to dst the spans of tr that a walk from state st0 must
// cover, in preorder. row(s) is state s's 256 transitions (the next state
// plus one; ≤ 0: dead), nil when it cannot be had (the walk's budget
// error: every byte dead). A preorder walk from the root reads every
// child of the root and of each live first byte, one node each scattered
// over megabytes of trie, which cost a cold mask tens of microseconds in
// cache and TLB misses to allow a handful of tokens; here the first two
// bytes are looked up instead.
func spans[T int32 | uint8](dst []span, tr *trie, st0 int32, row func(int32) []T) []span {
	r0 := row(st0)
	if r0 == nil {
		return dst
	}
	last, lastLive := int32(-1), 0
	for c, n := range tr.root {
		if n == 0 || r0[c] <= 0 {
			continue
		}
		if tr.nodes[n-1].end == n { // a leaf: its tokens alone
			dst = append(dst, span{node: n - 1})
			continue
		}
		s1 := int32(r0[c]) - 1
		r1 := row(s1)
		if r1 == nil {
			continue
		}
		if s1 != last {
			last, lastLive = s1, 0
			for _, t := range r1 {
				if t > 0 {
					lastLive++
				}
			}
		}
		if lastLive > fewKids {
			dst = append(dst, span{node: n - 1, st: s1, dep: 1, deep: true})
			continue
		}
		dst = append(dst, span{node: n - 1})
		for c1, k := range tr.kids[c<<8 : c<<8+256] {
			if k != 0 && r1[c1] > 0 {
				dst = append(dst, span{node: k - 1, st: int32(r1[c1]) - 1, dep: 2, deep: true})
			}
		}
	}
	return dst
}

// dfaRow is spans' row for a DFA state, filled on first use.
func (d *dfa) dfaRow(s int32) []int32 {
	r := d.row(s)
	if slices.Contains(r, 0) {
		if d.fill(s); d.err != nil {
			return nil
		}
	}
	return r
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
	var all, exit, local, localRest []int32
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
	total := 0
	for id, t := range tokens {
		if len(t) > maxTokenBytes {
			return nil, fmt.Errorf("structured: token %d is %d bytes (limit %d)", id, len(t), maxTokenBytes)
		}
		total += len(t)
	}
	// The copies in one array: a slice each would be one object per token
	// (200k) for every collection to mark.
	arena := make([]byte, 0, total)
	for id, t := range tokens {
		binary.LittleEndian.PutUint32(lb[:], uint32(len(t)))
		h.Write(lb[:])
		h.Write(t)
		arena = append(arena, t...)
		v.toks[id] = arena[len(arena)-len(t) : len(arena) : len(arena)]
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
	v.exit, v.local, v.localRest = v.newTrie(exit), v.newTrie(local), v.newTrie(localRest)
	v.buildCounted()
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
// walk over the shape's small table); the tokens with exitByte (few) are
// walked against the automaton. A state whose shape is too large gets the
// whole walk. The caller holds the grammar's lock.
func (v *Vocab) computeMask(d *dfa, st int32, states []int32) (mask []uint64, owned bool) {
	if local, shared, ok := v.countedMask(d, st); ok {
		extra := d.extra[:0]
		if d.states[st].accept {
			extra = append(extra, v.eos...)
		}
		return v.addExit(d, st, states, local, shared, extra), !shared
	}
	key, ok := d.shape(st, maxShapeStates)
	if !ok {
		return v.walkMask(d, st, states), true
	}
	local := v.shapes.get(key)
	if local == nil {
		local = v.shapeMask(d, key)
		v.shapes.put(string(key), local)
	}
	// The exit tokens (and EOS) allowed; the mask is the shared one when
	// they add nothing to it.
	extra := d.extra[:0]
	if d.states[st].accept {
		extra = append(extra, v.eos...)
	}
	return v.addExit(d, st, states, local, true, extra), false
}

// addExit adds to local (the mask of the tokens without exitByte; shared:
// not to be modified) the tokens of extra (d.extra's storage) and the
// tokens with exitByte that st allows.
func (v *Vocab) addExit(d *dfa, st int32, states []int32, local []uint64, shared bool, extra []int32) []uint64 {
	extra = walkTrieIDs(extra, d, st, states, &v.exit)
	d.extra = extra[:0]
	if !shared {
		for _, id := range extra {
			local[id>>6] |= 1 << (uint(id) & 63)
		}
		return local
	}
	// The tokens local lacks, in walk order (the same order for the same
	// set); the mask is local's own slice when there are none, else the
	// composed mask of (local, adds), shared by every state and grammar
	// that meets the pair.
	adds := extra[:0]
	for _, id := range extra {
		if local[id>>6]&(1<<(uint(id)&63)) == 0 {
			adds = append(adds, id)
		}
	}
	if len(adds) == 0 {
		return local
	}
	return v.composed.get(local, adds)
}

// maxComposedBytes bounds the composed masks of one vocabulary; past it
// the cache is dropped.
const maxComposedBytes = 128 << 20

// composedCache maps a shared mask and the tokens added to it to the
// resulting mask. A state's mask is its shape's (or counted set's) mask
// plus the few tokens with exitByte it allows; the pair recurs across
// positions and grammars (a string followed by the same punctuation),
// and a copy of a whole mask per state costs more than its walk.
type composedCache struct {
	mu    sync.Mutex
	m     map[composedKey][]composed
	bytes int
}

type composedKey struct {
	base *uint64 // the shared mask's first word: its identity
	h    uint64  // hash of the tokens added
}

type composed struct {
	adds []int32
	mask []uint64
}

// get is the mask of base plus adds (base shared, read-only; adds a
// scratch slice, copied when kept).
func (c *composedCache) get(base []uint64, adds []int32) []uint64 {
	k := composedKey{base: &base[0], h: hashStacks(adds)}
	c.mu.Lock()
	for _, e := range c.m[k] {
		if slices.Equal(e.adds, adds) {
			c.mu.Unlock()
			return e.mask
		}
	}
	c.mu.Unlock()
	mask := slices.Clone(base)
	for _, id := range adds {
		mask[id>>6] |= 1 << (uint(id) & 63)
	}
	n := len(mask)*8 + len(adds)*4
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || c.bytes+n > maxComposedBytes {
		c.m, c.bytes = map[composedKey][]composed{}, 0
	}
	c.m[k] = append(c.m[k], composed{adds: slices.Clone(adds), mask: mask})
	c.bytes += n
	return mask
}

// walkMask walks the whole vocabulary from DFA state st.
func (v *Vocab) walkMask(d *dfa, st int32, states []int32) []uint64 {
	mask := make([]uint64, v.MaskWords())
	tr := &v.local
	if v.loopsOnPlain(d, st) {
		copy(mask, v.plain)
		tr = &v.localRest
	}
	if d.states[st].accept {
		for _, e := range v.eos {
			mask[e>>6] |= 1 << (uint(e) & 63)
		}
	}
	walkTrie(mask, d, st, states, tr)
	walkTrie(mask, d, st, states, &v.exit)
	return mask
}

// walkTrie sets in mask the tokens of tr whose bytes all lead somewhere
// from state st.
func walkTrie(mask []uint64, d *dfa, st int32, states []int32, tr *trie) {
	sp := spans(d.spans[:0], tr, st, d.dfaRow)
	d.spans = sp[:0]
	nodes := tr.nodes
	for _, p := range sp {
		for _, id := range tr.ids[nodes[p.node].tok0:nodes[p.node+1].tok0] {
			mask[id>>6] |= 1 << (uint(id) & 63)
		}
		if !p.deep {
			continue
		}
		states[p.dep] = p.st
		for i, end := int(p.node)+1, int(nodes[p.node].end); i < end; {
			nd := &nodes[i]
			s := states[nd.dep]
			row := d.trans[s>>pageShift][int(s&pageMask)<<8:]
			nx := row[nd.b]
			if nx == 0 {
				// First visit: the whole row, one step per byte class
				// (a walk meets many bytes from one state).
				if d.fill(s); d.err != nil {
					nx = -1
				} else {
					nx = row[nd.b]
				}
			}
			if nx <= 0 {
				i = int(nd.end)
				continue
			}
			states[nd.dep+1] = nx - 1
			for _, id := range tr.ids[nd.tok0:nodes[i+1].tok0] {
				mask[id>>6] |= 1 << (uint(id) & 63)
			}
			i++
		}
	}
}

// walkTrieIDs appends to ids the tokens of tr whose bytes all lead
// somewhere from state st, in preorder.
func walkTrieIDs(ids []int32, d *dfa, st int32, states []int32, tr *trie) []int32 {
	sp := spans(d.spans[:0], tr, st, d.dfaRow)
	d.spans = sp[:0]
	nodes := tr.nodes
	for _, p := range sp {
		ids = append(ids, tr.ids[nodes[p.node].tok0:nodes[p.node+1].tok0]...)
		if !p.deep {
			continue
		}
		states[p.dep] = p.st
		for i, end := int(p.node)+1, int(nodes[p.node].end); i < end; {
			nd := &nodes[i]
			s := states[nd.dep]
			row := d.trans[s>>pageShift][int(s&pageMask)<<8:]
			nx := row[nd.b]
			if nx == 0 {
				if d.fill(s); d.err != nil {
					nx = -1
				} else {
					nx = row[nd.b]
				}
			}
			if nx <= 0 {
				i = int(nd.end)
				continue
			}
			states[nd.dep+1] = nx - 1
			ids = append(ids, tr.ids[nd.tok0:nodes[i+1].tok0]...)
			i++
		}
	}
	return ids
}

// shapeLoops reports whether a shape's first state loops on every plain
// byte (then every plain token is allowed: inside a free string).
func shapeLoops(table []byte) bool {
	for c := 0x20; c < 0x7f; c++ {
		if plainByte(byte(c)) && table[c] != 1 {
			return false
		}
	}
	return true
}

// shapeMask is the mask of the tokens without exitByte that a shape (see
// dfa.shape) allows from its first state.
func (v *Vocab) shapeMask(d *dfa, table []byte) []uint64 {
	mask := make([]uint64, v.MaskWords())
	tr := &v.local
	if shapeLoops(table) {
		copy(mask, v.plain)
		tr = &v.localRest
	}
	sp := spans(d.spans[:0], tr, 0, func(s int32) []byte { return table[s<<8 : s<<8+256] })
	d.spans = sp[:0]
	states := make([]uint8, v.maxLen+1)
	nodes := tr.nodes
	for _, p := range sp {
		for _, id := range tr.ids[nodes[p.node].tok0:nodes[p.node+1].tok0] {
			mask[id>>6] |= 1 << (uint(id) & 63)
		}
		if !p.deep {
			continue
		}
		states[p.dep] = uint8(p.st)
		for i, end := int(p.node)+1, int(nodes[p.node].end); i < end; {
			nd := &nodes[i]
			nx := table[int(states[nd.dep])<<8|int(nd.b)]
			if nx == 0 {
				i = int(nd.end)
				continue
			}
			states[nd.dep+1] = nx - 1
			for _, id := range tr.ids[nd.tok0:nodes[i+1].tok0] {
				mask[id>>6] |= 1 << (uint(id) & 63)
			}
			i++
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
