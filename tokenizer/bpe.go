package tokenizer

import (
	"math"
)

// noRank marks a pair that cannot merge.
const noRank = math.MaxUint32

// bpeSym is one symbol of a word being merged: a byte span of the word and
// the token it currently stands for (-1: not in the vocabulary, which only
// SentencePiece allows before byte fallback).
type bpeSym struct {
	start, end int32 // end < 0: merged into its left neighbour
	id         int32
	prev, next int32 // indexes into the symbol slice, -1 at the ends
	rank       uint32
	mergeID    int32 // token made by merging with next, valid when rank != noRank
}

// merger holds the merge table shared by both BPE flavours. All three agree
// on the rule "merge the adjacent pair of lowest rank, leftmost on ties"
// (HF's priority queue, tiktoken's scan and SentencePiece/llama2.c's
// highest-score scan are all this rule); they differ in how a pair is ranked.
type merger struct {
	// pairs (HF merges.txt): key left<<32|right, value rank<<32|merged id.
	pairs map[uint64]uint64
	// Otherwise the pair is ranked by its concatenated text: tiktoken ranks
	// are the merged token's id (rank == nil); SentencePiece ranks come from
	// piece scores, equal scores sharing a rank.
	vocab map[string]int
	rank  []uint32
}

func pairKey(l, r int32) uint64 { return uint64(uint32(l))<<32 | uint64(uint32(r)) }

func (m *merger) pair(word string, l, r *bpeSym) (uint32, int32) {
	if m.pairs != nil {
		if l.id < 0 || r.id < 0 {
			return noRank, 0
		}
		v, ok := m.pairs[pairKey(l.id, r.id)]
		if !ok {
			return noRank, 0
		}
		return uint32(v >> 32), int32(uint32(v))
	}
	id, ok := m.vocab[word[l.start:r.end]]
	if !ok {
		return noRank, 0
	}
	if m.rank == nil {
		return uint32(id), int32(id)
	}
	return m.rank[id], int32(id)
}

// smallWord is the length up to which a linear scan for the best pair beats
// a heap: words are short in practice, and the scan needs no allocation.
const smallWord = 48

// merge applies merges to syms in place (they must be linked in order, with
// rank unset); the result is read by following next from index 0.
func (m *merger) merge(word string, syms []bpeSym) {
	if len(syms) < 2 {
		return
	}
	for i := 0; i+1 < len(syms); i++ {
		syms[i].rank, syms[i].mergeID = m.pair(word, &syms[i], &syms[i+1])
	}
	syms[len(syms)-1].rank = noRank
	if len(syms) <= smallWord {
		m.mergeScan(word, syms)
	} else {
		m.mergeHeap(word, syms)
	}
}

// absorb merges the right neighbour of syms[i] into it and re-ranks the
// pairs that changed.
func (m *merger) absorb(word string, syms []bpeSym, i int32) {
	s := &syms[i]
	r := &syms[s.next]
	s.id = s.mergeID
	s.end = r.end
	s.next = r.next
	r.end = -1
	if s.next >= 0 {
		syms[s.next].prev = i
		s.rank, s.mergeID = m.pair(word, s, &syms[s.next])
	} else {
		s.rank = noRank
	}
	if s.prev >= 0 {
		p := &syms[s.prev]
		p.rank, p.mergeID = m.pair(word, p, s)
	}
}

func (m *merger) mergeScan(word string, syms []bpeSym) {
	for {
		best, bestRank := int32(-1), uint32(noRank)
		for i := int32(0); i >= 0; i = syms[i].next {
			if syms[i].rank < bestRank {
				best, bestRank = i, syms[i].rank
			}
		}
		if best < 0 {
			return
		}
		m.absorb(word, syms, best)
	}
}

// heapEnt orders candidate merges by rank, then by position, which is the
// leftmost-on-ties rule. Entries go stale when a neighbour changes; they are
// checked against the symbol when popped instead of being removed.
type heapEnt struct {
	rank        uint32
	left, right int32
}

func entLess(a, b heapEnt) bool {
	return a.rank < b.rank || (a.rank == b.rank && a.left < b.left)
}

func (m *merger) mergeHeap(word string, syms []bpeSym) {
	h := make([]heapEnt, 0, len(syms))
	push := func(e heapEnt) {
		h = append(h, e)
		for i := len(h) - 1; i > 0; {
			p := (i - 1) / 2
			if !entLess(h[i], h[p]) {
				break
			}
			h[i], h[p] = h[p], h[i]
			i = p
		}
	}
	pop := func() heapEnt {
		top := h[0]
		last := len(h) - 1
		h[0] = h[last]
		h = h[:last]
		for i := 0; ; {
			l, r, min := 2*i+1, 2*i+2, i
			if l < len(h) && entLess(h[l], h[min]) {
				min = l
			}
			if r < len(h) && entLess(h[r], h[min]) {
				min = r
			}
			if min == i {
				break
			}
			h[i], h[min] = h[min], h[i]
			i = min
		}
		return top
	}
	for i := range syms {
		if syms[i].rank != noRank {
			push(heapEnt{syms[i].rank, int32(i), syms[i].next})
		}
	}
	for len(h) > 0 {
		e := pop()
		s := &syms[e.left]
		if s.end < 0 || s.next != e.right || s.rank != e.rank {
			continue
		}
		m.absorb(word, syms, e.left)
		if s.rank != noRank {
			push(heapEnt{s.rank, e.left, s.next})
		}
		if s.prev >= 0 && syms[s.prev].rank != noRank {
			push(heapEnt{syms[s.prev].rank, s.prev, e.left})
		}
	}
}
