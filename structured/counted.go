package structured

import (
	"slices"
	"sync"
)

// Counted strings (minLength/maxLength) are decided by how many characters
// remain, not by their shapes. Inside a string whose characters come from
// the JSON character rule, the tokens without exitByte that a state allows
// depend only on where the state is within one character (at a boundary,
// after a '\\', inside a UTF-8 sequence) and on how many more characters
// the string may hold: such a token never closes the string, so a minimum
// does not matter to it, and it is allowed exactly when its bytes are
// string characters and it starts no more characters than remain. The
// vocabulary keeps, per position within a character, every token's count
// of characters started, computed once when the vocabulary is built; a
// mask is then a lookup (or, for long budgets, a copy less the few tokens
// longer than the budget) instead of a shape per count, whose states are
// new at every count.

// charRule is the JSON string character rule as newJSONRules builds it,
// flattened as finish lays out a rule: its alternatives one after another,
// each followed by a nodeEnd. Positions in it are a Grammar's positions
// less the rule's first one, the same in every grammar.
var charRule = sync.OnceValue(func() []node {
	b := newBuilder()
	j := newJSONRules(b)
	var out []node
	for _, a := range b.rules[j.char] {
		for _, e := range a {
			out = append(out, node{kind: nodeTerm, set: e.set})
		}
		out = append(out, node{kind: nodeEnd})
	}
	return out
})

// charBoundary is charStarts of charRule.
var charBoundary = sync.OnceValue(func() uint64 { return charStarts(charRule()) })

// charStarts is the positions in prog that begin an alternative: the
// character boundary.
func charStarts(prog []node) uint64 {
	var s uint64
	start := true
	for i, n := range prog {
		if start {
			s |= 1 << uint(i)
		}
		start = n.kind == nodeEnd
	}
	return s
}

// remInf marks a character repetition without an upper bound.
const remInf = 1 << 30

// countedCut: budgets below it have their masks kept; above it, a mask is
// the whole set less the tokens starting more characters than the budget.
const countedCut = 16

// charStep is the character rule's step on byte c from the positions in
// p (a bit per position): the positions after it (the boundary where a
// character ends) and whether c started a character.
func charStep(prog []node, starts, p uint64, c byte) (uint64, bool) {
	var next uint64
	started := false
	for bits := p; bits != 0; bits &= bits - 1 {
		i := tz64(bits)
		if !prog[i].set.has(c) {
			continue
		}
		if starts&(1<<uint(i)) != 0 {
			started = true
		}
		if prog[i+1].kind == nodeEnd {
			next |= starts
		} else {
			next |= 1 << uint(i+1)
		}
	}
	return next, started
}

// countedSet is, for one position set within a character, the tokens
// without exitByte whose bytes are string characters from there, by how
// many characters they start.
type countedSet struct {
	small [countedCut][]uint64 // small[b]: those starting at most b characters
	full  []uint64             // all of them
	long  []int32              // those starting countedCut or more, most first
	count []int32              // long's counts
}

// mask is the set's mask for a budget of b characters; shared reports
// that it is the set's own slice (read-only).
func (cs *countedSet) mask(b int) ([]uint64, bool) {
	if b < countedCut {
		return cs.small[b], true
	}
	if len(cs.long) == 0 || int(cs.count[0]) <= b {
		return cs.full, true
	}
	m := slices.Clone(cs.full)
	for i, id := range cs.long {
		if int(cs.count[i]) <= b {
			break
		}
		m[id>>6] &^= 1 << (uint(id) & 63)
	}
	return m, false
}

// buildCounted computes the counted sets of every position set within a
// character that a string can be in: those reachable from the boundary.
func (v *Vocab) buildCounted() {
	prog, starts := charRule(), charBoundary()
	v.counted = map[uint64]*countedSet{}
	queue := []uint64{starts}
	v.counted[starts] = nil
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for c := 0; c < 256; c++ {
			if c == exitByte {
				continue
			}
			n, _ := charStep(prog, starts, p, byte(c))
			if _, ok := v.counted[n]; n != 0 && !ok {
				v.counted[n] = nil
				queue = append(queue, n)
			}
		}
	}
	ps := make([]uint64, v.maxLen+1)
	cnt := make([]int32, v.maxLen+1)
	counts := make([]int32, v.n)
	for p := range v.counted {
		cs := &countedSet{full: make([]uint64, v.MaskWords())}
		for i := range counts {
			counts[i] = -1
		}
		ps[0], cnt[0] = p, 0
		maxCount := int32(0)
		nodes := v.local.nodes
		for i := 0; i < len(nodes)-1; {
			nd := &nodes[i]
			n, started := charStep(prog, starts, ps[nd.dep], nd.b)
			if n == 0 {
				i = int(nd.end)
				continue
			}
			k := cnt[nd.dep]
			if started {
				k++
			}
			ps[nd.dep+1], cnt[nd.dep+1] = n, k
			for _, id := range v.local.ids[nd.tok0:nodes[i+1].tok0] {
				counts[id] = k
				cs.full[id>>6] |= 1 << (uint(id) & 63)
				maxCount = max(maxCount, k)
				if k >= countedCut {
					cs.long = append(cs.long, id)
				}
			}
			i++
		}
		for b := range cs.small {
			cs.small[b] = make([]uint64, v.MaskWords())
		}
		for id, k := range counts {
			if k < 0 || k >= countedCut {
				continue
			}
			for b := int(k); b < countedCut; b++ {
				cs.small[b][id>>6] |= 1 << (uint(id) & 63)
			}
		}
		slices.SortStableFunc(cs.long, func(a, b int32) int { return int(counts[b] - counts[a]) })
		cs.count = make([]int32, len(cs.long))
		for i, id := range cs.long {
			cs.count[i] = counts[id]
		}
		v.counted[p] = cs
	}
}

// countedMask is the mask of the tokens without exitByte that state st
// allows, when st is inside a string of JSON characters: each of its
// stacks is within one character rule call (all returning to one frame,
// the repetition's) or expects only exitByte. ok is false otherwise.
func (v *Vocab) countedMask(d *dfa, st int32) (mask []uint64, shared, ok bool) {
	g := d.g
	if g.charLo < 0 || v.counted == nil {
		return nil, false, false
	}
	prog := charRule()
	var quote byteSet
	quote.add(exitByte)
	var p uint64
	parent := int32(-1)
	for _, s := range d.states[st].stacks {
		f := d.frames[s]
		n := &g.prog[f.pos]
		if n.kind != nodeTerm {
			return nil, false, false
		}
		if rel := f.pos - g.charLo; rel >= 0 && int(rel) < len(prog) {
			if parent >= 0 && f.parent != parent || f.parent < 0 {
				return nil, false, false
			}
			parent = f.parent
			p |= 1 << uint(rel)
			continue
		}
		if n.set != quote {
			return nil, false, false
		}
	}
	if p == 0 {
		return nil, false, false
	}
	rem, ok := g.rem[d.frames[parent].pos]
	if !ok {
		return nil, false, false
	}
	cs := v.counted[p]
	if cs == nil {
		return nil, false, false
	}
	// At a boundary the next character is one of the remaining ones
	// after it too: the frame's count is what remains after the
	// character being read.
	budget := int(rem)
	if p&charBoundary() != 0 {
		budget++
	}
	mask, shared = cs.mask(budget)
	return mask, shared, true
}
