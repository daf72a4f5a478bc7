package structured

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"sync"
	"time"

	"github.com/tandemllm/tandem/tokenid"
)

// maxMaskBytes bounds the masks of its own one Compiled keeps; past it the
// cache is dropped and masks are recomputed as needed.
const maxMaskBytes = 256 << 20

// Compiled is a grammar bound to a vocabulary: the mask cache lives here.
// Safe for concurrent use (one lock: the engines step their sequences from
// one goroutine).
type Compiled struct {
	g  *Grammar
	v  *Vocab
	mu sync.Mutex
	// masks[state] (nil until computed).
	masks     [][]uint64
	maskBytes int
	states    []int32 // walk scratch, one per byte depth
}

// Bind prepares g for masks over v.
func Bind(g *Grammar, v *Vocab) *Compiled {
	c := &Compiled{g: g, v: v, states: make([]int32, v.maxLen+1)}
	c.precompute(precomputeMasks, precomputeTime)
	return c
}

// Bind's precomputation bounds: the masks of the states nearest the start
// (breadth first over bytes) are computed when the grammar is bound, up to
// this many states visited or this much time, and while the automaton is small
// (a state's mask may build states; the budget errors must stay the
// walk's own).
var (
	precomputeMasks = 16384
	precomputeTime  = 10 * time.Millisecond
)

// precompute computes the masks of the states reachable from the start,
// breadth first over bytes, within the bounds (the start, accepting states
// and states with more than one successor): a sequence's first steps
// (and every sequence's, the grammar being cached per vocabulary) then
// read masks instead of building states and walking the vocabulary.
func (c *Compiled) precompute(maxMasks int, maxTime time.Duration) {
	if maxMasks <= 0 {
		return
	}
	t0 := time.Now()
	g := c.g
	seen := map[int32]bool{0: true}
	queue := []int32{0}
	for n := 0; n < len(queue) && n < maxMasks; n++ {
		if time.Since(t0) > maxTime {
			return
		}
		g.dfaMu.Lock()
		small := g.dfa.err == nil && len(g.dfa.states) < maxStates/8 && len(g.dfa.frames) < maxStacks/8
		g.dfaMu.Unlock()
		if !small {
			return
		}
		st := queue[n]
		g.dfaMu.Lock()
		g.dfa.fill(st)
		if g.dfa.err != nil {
			g.dfaMu.Unlock()
			return
		}
		row := g.dfa.row(st)
		var first int32
		branches := st == 0 || g.dfa.states[st].accept
		for _, t := range row {
			if t <= 0 {
				continue
			}
			if first == 0 {
				first = t
			} else if t != first {
				branches = true
			}
			if !seen[t-1] {
				seen[t-1] = true
				queue = append(queue, t-1)
			}
		}
		g.dfaMu.Unlock()
		// A state with one way forward (inside a literal: a key, an
		// enum member) is mostly met inside a token: its mask is left
		// to the walk, the bound spent on states where sequences branch.
		if branches {
			if _, err := c.mask(st); err != nil {
				return
			}
		}
	}
}

// Vocab is the vocabulary the masks are over.
func (c *Compiled) Vocab() *Vocab { return c.v }

// mask returns the (shared, read-only) mask of state st.
func (c *Compiled) mask(st int32) ([]uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if int(st) < len(c.masks) && c.masks[st] != nil {
		return c.masks[st], nil
	}
	c.g.dfaMu.Lock()
	m, owned := c.v.computeMask(&c.g.dfa, st, c.states)
	err := c.g.dfa.err
	c.g.dfaMu.Unlock()
	if err != nil {
		return nil, err
	}
	n := 0
	if owned { // a shared mask is the vocabulary's caches' to count
		n = len(m) * 8
	}
	if c.maskBytes+n > maxMaskBytes {
		c.masks, c.maskBytes = nil, 0
	}
	for len(c.masks) <= int(st) {
		c.masks = append(c.masks, nil)
	}
	c.masks[st] = m
	c.maskBytes += n
	return m, nil
}

// heapBytes is about what c holds of its own: the masks it computed that
// no cache of the vocabulary shares, and its index of them (its grammar's
// automaton is the grammar's, Grammar.heapBytes).
func (c *Compiled) heapBytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return int64(c.maskBytes) + int64(cap(c.masks))*24
}

// Matcher follows one sequence through a Compiled grammar.
type Matcher struct {
	c    *Compiled
	st   int32
	done bool
}

// NewMatcher starts a sequence at the grammar's start.
func (c *Compiled) NewMatcher() *Matcher { return &Matcher{c: c} }

// ErrRejected is returned by Accept for a token the mask did not allow.
var ErrRejected = errors.New("structured: token not allowed by the grammar")

// Mask returns the bitmask of allowed token ids for the next step: bit id%64
// of word id/64. The slice is shared and must not be modified. After EOS
// was accepted the mask is empty.
func (m *Matcher) Mask() ([]uint64, error) {
	if m.done {
		return make([]uint64, m.c.v.MaskWords()), nil
	}
	return m.c.mask(m.st)
}

// Allowed reports whether id may come next (without computing a mask).
func (m *Matcher) Allowed(id tokenid.ID) bool {
	if m.done {
		return false
	}
	st, ok := m.peek(id)
	_ = st
	return ok
}

func (m *Matcher) peek(id tokenid.ID) (int32, bool) {
	v := m.c.v
	if id < 0 || int(id) >= v.n {
		return 0, false
	}
	g := m.c.g
	g.dfaMu.Lock()
	defer g.dfaMu.Unlock()
	if v.IsEOS(id) {
		return m.st, g.dfa.states[m.st].accept
	}
	t := v.toks[id]
	if len(t) == 0 {
		return 0, false
	}
	st := m.st
	for _, b := range t {
		st = g.dfa.step(st, b)
		if st < 0 {
			return 0, false
		}
	}
	return st, true
}

// Accept advances past token id; an EOS token ends the sequence (allowed
// only in an accepting state).
func (m *Matcher) Accept(id tokenid.ID) error {
	if m.done {
		return fmt.Errorf("%w: token %d after the end", ErrRejected, id)
	}
	st, ok := m.peek(id)
	if !ok {
		if err := m.c.g.dfaErr(); err != nil {
			return err
		}
		return fmt.Errorf("%w: token %d", ErrRejected, id)
	}
	if m.c.v.IsEOS(id) {
		m.done = true
		return nil
	}
	m.st = st
	return nil
}

// CanEnd reports whether the output so far is a complete match (EOS allowed).
func (m *Matcher) CanEnd() bool {
	if m.done {
		return true
	}
	g := m.c.g
	g.dfaMu.Lock()
	defer g.dfaMu.Unlock()
	return g.dfa.states[m.st].accept
}

// Done reports whether EOS was accepted.
func (m *Matcher) Done() bool { return m.done }

// Terminated reports whether nothing but EOS may follow: the output is
// complete and cannot be extended.
func (m *Matcher) Terminated() bool {
	if m.done {
		return true
	}
	g := m.c.g
	g.dfaMu.Lock()
	defer g.dfaMu.Unlock()
	ds := g.dfa.states[m.st]
	if !ds.accept {
		return false
	}
	for _, s := range ds.stacks {
		if g.prog[g.dfa.frames[s].pos].kind == nodeTerm {
			return false
		}
	}
	return true
}

func (g *Grammar) dfaErr() error {
	g.dfaMu.Lock()
	defer g.dfaMu.Unlock()
	return g.dfa.err
}

// MatchString reports whether s is in the grammar's language (tests,
// tools).
func (g *Grammar) MatchString(s string) bool {
	g.dfaMu.Lock()
	defer g.dfaMu.Unlock()
	st := int32(0)
	for i := 0; i < len(s); i++ {
		st = g.dfa.step(st, s[i])
		if st < 0 {
			return false
		}
	}
	return g.dfa.states[st].accept
}

// ApplyMask sets the logits of disallowed tokens to -Inf (ids past the
// vocabulary too). It reports an error when nothing is allowed, which a
// non-empty grammar never leaves (EOS is allowed in accepting states).
func (m *Matcher) ApplyMask(logits []float32) error {
	mask, err := m.Mask()
	if err != nil {
		return err
	}
	ninf := float32(math.Inf(-1))
	any := false
	for w := 0; w*64 < len(logits); w++ {
		var bits uint64
		if w < len(mask) {
			bits = mask[w]
		}
		base := w * 64
		end := min(base+64, len(logits))
		if bits == 0 {
			for i := base; i < end; i++ {
				logits[i] = ninf
			}
			continue
		}
		any = true
		if bits == ^uint64(0) && end == base+64 {
			continue
		}
		for i := base; i < end; i++ {
			if bits&(1<<uint(i-base)) == 0 {
				logits[i] = ninf
			}
		}
	}
	if !any {
		return fmt.Errorf("%w: no token allowed", ErrRejected)
	}
	return nil
}

// Pick returns an allowed token chosen by r (a uniform random value): the
// mocker's way to sample. Half the time (r's low bit) it draws among the
// allowed tokens that hold a '"', '}' or ']' when there are any, else
// among all allowed tokens, uniformly: free strings and containers then end
// after a few tokens, as a model's do, while every token still comes from
// the mask.
func (m *Matcher) Pick(r uint64) (tokenid.ID, error) {
	mask, err := m.Mask()
	if err != nil {
		return 0, err
	}
	if r&1 == 1 && !m.done {
		if id, ok := pickIn(mask, m.c.v.closers, r>>1); ok {
			return id, nil
		}
	}
	if id, ok := pickIn(mask, nil, r>>1); ok {
		return id, nil
	}
	return 0, fmt.Errorf("%w: no token allowed", ErrRejected)
}

// pickIn draws uniformly (by r) among the bits of mask (and of and, when
// given).
func pickIn(mask, and []uint64, r uint64) (tokenid.ID, bool) {
	word := func(i int) uint64 {
		if and != nil {
			return mask[i] & and[i]
		}
		return mask[i]
	}
	n := 0
	for i := range mask {
		n += bits.OnesCount64(word(i))
	}
	if n == 0 {
		return 0, false
	}
	k := int(r % uint64(n))
	for i := range mask {
		w := word(i)
		c := bits.OnesCount64(w)
		if k >= c {
			k -= c
			continue
		}
		for ; k > 0; k-- {
			w &= w - 1
		}
		return tokenid.ID(i*64 + bits.TrailingZeros64(w)), true
	}
	return 0, false
}
