package structured

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"sync"
)

// byteSet is a set of bytes, one bit each.
type byteSet [4]uint64

func (s *byteSet) add(b byte)      { s[b>>6] |= 1 << (b & 63) }
func (s *byteSet) has(b byte) bool { return s[b>>6]&(1<<(b&63)) != 0 }
func (s *byteSet) addRange(lo, hi byte) {
	for c := int(lo); c <= int(hi); c++ {
		s.add(byte(c))
	}
}
func (s byteSet) empty() bool { return s[0]|s[1]|s[2]|s[3] == 0 }
func (s byteSet) invert() byteSet {
	return byteSet{^s[0], ^s[1], ^s[2], ^s[3]}
}
func (s byteSet) and(t byteSet) byteSet {
	return byteSet{s[0] & t[0], s[1] & t[1], s[2] & t[2], s[3] & t[3]}
}
func (s byteSet) andNot(t byteSet) byteSet {
	return byteSet{s[0] &^ t[0], s[1] &^ t[1], s[2] &^ t[2], s[3] &^ t[3]}
}

// first is the smallest byte of a non-empty set.
func (s byteSet) first() byte {
	for w, bits := range s {
		if bits != 0 {
			return byte(w<<6 | tz64(bits))
		}
	}
	return 0
}

func tz64(x uint64) int { return bits.TrailingZeros64(x) }

// elem is one element of an alternative: a nonterminal (ref >= 0) or a byte
// set (ref < 0).
type elem struct {
	ref int32
	set byteSet
}

func term(s byteSet) elem { return elem{ref: -1, set: s} }
func ref(r int32) elem    { return elem{ref: r} }
func oneByte(b byte) elem {
	var s byteSet
	s.add(b)
	return term(s)
}

// lit is the elements of a literal byte string.
func lit(s string) []elem {
	out := make([]elem, len(s))
	for i := 0; i < len(s); i++ {
		out[i] = oneByte(s[i])
	}
	return out
}

// Limits keep a compiled grammar's size bounded whatever the input.
const (
	maxRules     = 1 << 18
	maxElems     = 1 << 21
	maxRepeatMax = 4096 // larger counted repetitions are refused (or capped, where a subset is allowed)
)

var errTooLarge = errors.New("structured: grammar too large")

// builder accumulates rules. Rule 0 is the root.
type builder struct {
	rules [][][]elem
	names []string
	elems int
	err   error
	// char is the JSON string character rule (0: none yet; rule 0 is
	// the root) and marks the positions after a call of it in a
	// repetition, with the characters that may follow (see counted.go).
	char  int32
	marks []remMark
}

// remMark: element elem of alternative alt of rule is the return point
// after one character of a repetition of the character rule, after which
// at most rem more characters may come (remInf: any number).
type remMark struct {
	rule, alt, elem int32
	rem             int32
}

// isChar reports whether e is exactly one call of the character rule.
func (b *builder) isChar(e []elem) bool {
	return b.char > 0 && len(e) == 1 && e[0].ref == b.char
}

func (b *builder) mark(rule int32, rem int) {
	if rem > remInf {
		rem = remInf
	}
	b.marks = append(b.marks, remMark{rule: rule, alt: 0, elem: 1, rem: int32(rem)})
}

func newBuilder() *builder {
	b := &builder{}
	b.newRule("root")
	return b
}

func (b *builder) newRule(name string) int32 {
	if len(b.rules) >= maxRules {
		b.fail(errTooLarge)
		return 0
	}
	b.rules = append(b.rules, nil)
	b.names = append(b.names, name)
	return int32(len(b.rules) - 1)
}

func (b *builder) fail(err error) {
	if b.err == nil {
		b.err = err
	}
}

func (b *builder) alt(r int32, es ...elem) {
	b.elems += len(es) + 1
	if b.elems > maxElems {
		b.fail(errTooLarge)
		return
	}
	b.rules[r] = append(b.rules[r], es)
}

// seqRule is a new rule with one alternative.
func (b *builder) seqRule(name string, es ...elem) int32 {
	r := b.newRule(name)
	b.alt(r, es...)
	return r
}

// star is a rule matching e*, right-recursive (a tail call in the PDA).
func (b *builder) star(e ...elem) int32 {
	r := b.newRule("star")
	b.alt(r, append(append([]elem{}, e...), ref(r))...)
	b.alt(r)
	if b.isChar(e) {
		b.mark(r, remInf)
	}
	return r
}

// repeat is a rule matching e{min,max}; max < 0 means unbounded.
func (b *builder) repeat(min, max int, e ...elem) int32 {
	if max >= 0 && max < min {
		b.fail(fmt.Errorf("%w: repetition {%d,%d} accepts nothing", ErrUnsatisfiable, min, max))
		return b.newRule("never")
	}
	if min > maxRepeatMax || max > maxRepeatMax {
		b.fail(fmt.Errorf("%w: repetition bound %d above %d", errTooLarge, max, maxRepeatMax))
		return b.newRule("never")
	}
	// tail: optional part.
	var tail int32
	if max < 0 {
		tail = b.star(e...)
	} else {
		tail = b.newRule("opt")
		b.alt(tail)
		// opt_k = e opt_{k-1} | ε, built from the inside out.
		for k := 0; k < max-min; k++ {
			r := b.newRule("opt")
			b.alt(r, append(append([]elem{}, e...), ref(tail))...)
			b.alt(r)
			if b.isChar(e) {
				b.mark(r, k)
			}
			tail = r
		}
	}
	out := tail
	for k := 0; k < min; k++ {
		out = b.seqRule("req", append(append([]elem{}, e...), ref(out))...)
		if b.isChar(e) {
			if max < 0 {
				b.mark(out, remInf)
			} else {
				b.mark(out, k+max-min)
			}
		}
	}
	return out
}

// choice is a rule with one alternative per element sequence.
func (b *builder) choice(alts ...[]elem) int32 {
	r := b.newRule("choice")
	for _, a := range alts {
		b.alt(r, a...)
	}
	return r
}

// node kinds in the flattened program.
const (
	nodeTerm = -1
	nodeEnd  = -2
)

// node is one position of the flattened grammar: a byte set, a call of a
// rule, or the end of an alternative.
type node struct {
	kind int32 // rule index (call), nodeTerm or nodeEnd
	set  byteSet
}

// Grammar is a compiled, vocabulary-independent grammar. It is safe for
// concurrent use; its DFA is built lazily under its lock.
type Grammar struct {
	prog  []node
	alts  [][]int32 // rule -> start positions of its alternatives
	names []string
	// charLo is the position of the character rule's first node, or -1
	// (no such rule, or one not laid out as charRule); rem maps the
	// return points after its calls in repetitions to the characters
	// that may still follow (counted.go).
	charLo int32
	rem    map[int32]int32
	dfaMu  sync.Mutex
	dfa    dfa
}

// heapBytes is about what g holds: its program and its automaton (which
// grows as masks are computed).
func (g *Grammar) heapBytes() int64 {
	g.dfaMu.Lock()
	defer g.dfaMu.Unlock()
	return int64(cap(g.prog))*40 + g.dfa.bytes() // a node: its kind and a byteSet
}

// finish flattens the rules, checks them (no left recursion, a non-empty
// language) and prepares the DFA.
func (b *builder) finish() (*Grammar, error) {
	if b.err != nil {
		return nil, b.err
	}
	g := &Grammar{alts: make([][]int32, len(b.rules)), names: b.names}
	g.prog = make([]node, 0, b.elems)
	for r, alts := range b.rules {
		for _, a := range alts {
			g.alts[r] = append(g.alts[r], int32(len(g.prog)))
			for _, e := range a {
				if e.ref >= 0 {
					if int(e.ref) >= len(b.rules) {
						return nil, fmt.Errorf("structured: rule %d undefined", e.ref)
					}
					g.prog = append(g.prog, node{kind: e.ref})
				} else {
					g.prog = append(g.prog, node{kind: nodeTerm, set: e.set})
				}
			}
			g.prog = append(g.prog, node{kind: nodeEnd})
		}
	}
	if err := g.check(); err != nil {
		return nil, err
	}
	g.charLo = -1
	if b.char > 0 && int(b.char) < len(g.alts) && len(g.alts[b.char]) > 0 {
		lo := g.alts[b.char][0]
		cr := charRule()
		if int(lo)+len(cr) <= len(g.prog) && slices.Equal(g.prog[lo:int(lo)+len(cr)], cr) {
			g.charLo = lo
			g.rem = make(map[int32]int32, len(b.marks))
			for _, m := range b.marks {
				g.rem[g.alts[m.rule][m.alt]+m.elem] = m.rem
			}
		}
	}
	g.dfa.init(g)
	if g.dfa.dead(0) {
		return nil, fmt.Errorf("%w: the grammar accepts nothing", ErrUnsatisfiable)
	}
	return g, nil
}

// ErrUnsatisfiable is returned for a schema or grammar that accepts no
// output at all.
var ErrUnsatisfiable = errors.New("structured: unsatisfiable")

// check refuses left recursion (the PDA would push forever) and grammars
// whose root derives no finite string.
func (g *Grammar) check() error {
	n := len(g.alts)
	nullable := make([]bool, n)
	productive := make([]bool, n)
	for changed := true; changed; {
		changed = false
		for r := 0; r < n; r++ {
			for _, start := range g.alts[r] {
				null, prod := true, true
				for p := start; g.prog[p].kind != nodeEnd; p++ {
					k := g.prog[p].kind
					if k == nodeTerm {
						null = false
					} else {
						null = null && nullable[k]
						prod = prod && productive[k]
					}
				}
				if null && !nullable[r] {
					nullable[r], changed = true, true
				}
				if prod && !productive[r] {
					productive[r], changed = true, true
				}
			}
		}
	}
	if !productive[0] {
		return fmt.Errorf("%w: the grammar derives no finite output", ErrUnsatisfiable)
	}
	// Left-call graph: r -> s when s can be called with only nullable
	// rules before it in an alternative of r.
	state := make([]uint8, n) // 0 new, 1 on path, 2 done
	var visit func(r int32) error
	visit = func(r int32) error {
		state[r] = 1
		for _, start := range g.alts[r] {
			for p := start; g.prog[p].kind != nodeEnd; p++ {
				k := g.prog[p].kind
				if k == nodeTerm {
					break
				}
				switch state[k] {
				case 1:
					return fmt.Errorf("structured: rule %q is left-recursive", g.names[k])
				case 0:
					if err := visit(k); err != nil {
						return err
					}
				}
				if !nullable[k] {
					break
				}
			}
		}
		state[r] = 2
		return nil
	}
	for r := 0; r < n; r++ {
		if state[r] == 0 {
			if err := visit(int32(r)); err != nil {
				return err
			}
		}
	}
	return nil
}
