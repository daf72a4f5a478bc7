package structured

import (
	"encoding/binary"
	"errors"
	"slices"
)

// A stack is interned: id -> (position, parent stack id); parent -1 is the
// bottom. The position is where parsing resumes in the program: a byte set
// at the top of every stack in a DFA state, or the end of the root
// alternative for an accepting stack.
type frame struct {
	pos    int32
	parent int32
}

// DFA state limits: a grammar whose generation reaches more distinct states
// than this fails the sequence rather than growing without bound.
const (
	maxStates = 1 << 15
	maxStacks = 1 << 21
)

// maxMemo bounds the closure memo (stack ids kept); a variable for the
// test that makes it tiny.
var maxMemo = 1 << 22

// ErrStateBudget is returned when a grammar's lazily built automaton has
// reached its size limit.
var ErrStateBudget = errors.New("structured: grammar state budget exhausted")

// Transition table pages: 1<<pageShift states each.
const (
	pageShift = 6
	pageMask  = 1<<pageShift - 1
)

// row is state st's transitions, one per byte.
func (d *dfa) row(st int32) []int32 {
	off := int(st&pageMask) << 8
	return d.trans[st>>pageShift][off : off+256 : off+256]
}

type dstate struct {
	stacks []int32
	accept bool
}

type dfa struct {
	g      *Grammar
	frames []frame
	frameI map[uint64]int32 // pos<<32 | parent
	states []*dstate
	// trans[st>>pageShift][(st&pageMask)<<8|b]: 0 not computed yet, -1
	// dead, else next state + 1. Pages of fixed size, never copied: a
	// flat table grown by append copied all of it (most of a new state's
	// cost in a large automaton).
	trans [][]int32
	// States are interned by a hash of their sorted stack set; stateC
	// holds the rare sets whose hash another set already has, by their
	// bytes.
	stateI map[uint64]int32
	stateC map[string]int32
	// closure memo: the stacks reachable from frame s without consuming
	// a byte are memo[memoAt[s]-1 : memoAt[s]-1+memoN[s]] (memoAt 0: not
	// computed). A step's targets recur across the states of a position
	// (every character of a string returns to the same frame), so each
	// expansion is computed once per frame.
	memo   []int32
	memoAt []int32
	memoN  []int32
	// Dedup by generation: stamp[s] == gen marks stack s as met in the
	// current expansion (seen) or union (added).
	seen, added []uint32
	seenGen     uint32
	addedGen    uint32
	scratch     []int32
	keybuf      []byte
	classes     []byteSet // fill's scratch
	spans       []span    // the mask walks' scratch
	// shape's scratch: local[state] is the state's index in the shape
	// being explored, plus one (0: not in it).
	local    []uint8
	members  []int32
	shapeKey []byte
	extra    []int32 // computeMask's scratch
	err      error
}

// bytes is about what the automaton holds: transition pages, states and
// their stack sets, interned frames, the closure memo and the maps'
// entries (estimated at 32 bytes each).
func (d *dfa) bytes() int64 {
	n := int64(len(d.trans)) * (1 << pageShift) * 256 * 4
	n += int64(cap(d.frames))*8 + int64(len(d.frameI))*32
	for _, s := range d.states {
		n += 48 + int64(cap(s.stacks))*4
	}
	n += int64(len(d.stateI)+len(d.stateC)) * 32
	n += int64(cap(d.memo)+cap(d.memoAt)+cap(d.memoN)+cap(d.seen)+cap(d.added)) * 4
	return n
}

func (d *dfa) init(g *Grammar) {
	d.g = g
	d.frameI = make(map[uint64]int32)
	d.stateI = make(map[uint64]int32)
	d.scratch = d.scratch[:0]
	d.beginUnion()
	for _, start := range g.alts[0] {
		d.union(d.intern(start, -1))
	}
	d.addState() // state 0: the start
}

func (d *dfa) intern(pos, parent int32) int32 {
	k := uint64(uint32(pos))<<32 | uint64(uint32(parent))
	if id, ok := d.frameI[k]; ok {
		return id
	}
	if len(d.frames) >= maxStacks {
		d.err = ErrStateBudget
		return -1
	}
	id := int32(len(d.frames))
	d.frames = append(d.frames, frame{pos, parent})
	d.frameI[k] = id
	return id
}

// beginUnion starts a new stack set in d.scratch.
func (d *dfa) beginUnion() {
	d.scratch = d.scratch[:0]
	d.addedGen++
	if d.addedGen == 0 { // wrapped: old stamps could match
		clear(d.added)
		d.addedGen = 1
	}
}

// union adds to d.scratch the stacks reachable from s without consuming
// a byte (s's closure), each once.
func (d *dfa) union(s int32) {
	if s < 0 {
		return
	}
	if len(d.added) < len(d.frames) {
		d.added = append(d.added, make([]uint32, len(d.frames)-len(d.added)+len(d.frames)/2)...)
	}
	for _, x := range d.closure(s) {
		if int(x) >= len(d.added) {
			d.added = append(d.added, make([]uint32, int(x)+1-len(d.added)+len(d.frames)/2)...)
		}
		if d.added[x] != d.addedGen {
			d.added[x] = d.addedGen
			d.scratch = append(d.scratch, x)
		}
	}
}

// closure is s's closure (memoized; d.memo's storage, valid until the
// next closure call).
func (d *dfa) closure(s int32) []int32 {
	if int(s) < len(d.memoAt) && d.memoAt[s] > 0 {
		at := d.memoAt[s] - 1
		return d.memo[at : at+d.memoN[s]]
	}
	if len(d.memo) > maxMemo {
		// Bounded: start the memo again (closures are recomputed as met).
		d.memo = d.memo[:0]
		clear(d.memoAt)
	}
	at := int32(len(d.memo))
	d.seenGen++
	if d.seenGen == 0 {
		clear(d.seen)
		d.seenGen = 1
	}
	d.expand(s)
	n := int32(len(d.memo)) - at
	if len(d.memoAt) < len(d.frames) {
		grow := len(d.frames) - len(d.memoAt) + len(d.frames)/2
		d.memoAt = append(d.memoAt, make([]int32, grow)...)
		d.memoN = append(d.memoN, make([]int32, grow)...)
	}
	if d.err != nil {
		// Not memoized: the closure may be incomplete.
		d.memo = d.memo[:at]
		return nil
	}
	d.memoAt[s], d.memoN[s] = at+1, n
	return d.memo[at : at+n]
}

// expand appends to d.memo the stacks reachable from s without consuming
// a byte: calls are pushed, ends popped.
func (d *dfa) expand(s int32) {
	if s < 0 {
		return
	}
	if int(s) >= len(d.seen) {
		d.seen = append(d.seen, make([]uint32, int(s)+1-len(d.seen)+len(d.frames)/2)...)
	}
	if d.seen[s] == d.seenGen {
		return
	}
	d.seen[s] = d.seenGen
	f := d.frames[s]
	n := d.g.prog[f.pos]
	switch n.kind {
	case nodeTerm:
		d.memo = append(d.memo, s)
	case nodeEnd:
		if f.parent < 0 {
			d.memo = append(d.memo, s) // accepting
			return
		}
		d.expand(f.parent)
	default:
		// Push the return position; returning to the end of an
		// alternative is a tail call, so use the caller's parent.
		ret := f.pos + 1
		var cont int32
		if d.g.prog[ret].kind == nodeEnd && f.parent >= 0 {
			cont = f.parent
		} else {
			cont = d.intern(ret, f.parent)
		}
		for _, start := range d.g.alts[n.kind] {
			d.expand(d.intern(start, cont))
		}
	}
}

// hashStacks is a hash of a sorted stack set.
func hashStacks(st []int32) uint64 {
	h := uint64(len(st)) * 0x9e3779b97f4a7c15
	for _, s := range st {
		h ^= uint64(uint32(s))
		h *= 0xbf58476d1ce4e5b9
		h ^= h >> 31
	}
	return h
}

// addState interns the stack set in d.scratch as a DFA state.
func (d *dfa) addState() int32 {
	st := d.scratch
	slices.Sort(st)
	d.scratch = st[:0]
	if len(st) == 0 {
		return -1
	}
	h := hashStacks(st)
	id, ok := d.stateI[h]
	collided := false
	if ok {
		if slices.Equal(d.states[id].stacks, st) {
			return id
		}
		d.keybuf = d.keybuf[:0]
		for _, s := range st {
			d.keybuf = binary.LittleEndian.AppendUint32(d.keybuf, uint32(s))
		}
		if id, ok := d.stateC[string(d.keybuf)]; ok {
			return id
		}
		collided = true
	}
	if len(d.states) >= maxStates {
		d.err = ErrStateBudget
		return -1
	}
	ds := &dstate{stacks: slices.Clone(st)}
	for _, s := range st {
		f := d.frames[s]
		if d.g.prog[f.pos].kind == nodeEnd {
			ds.accept = true
		}
	}
	id = int32(len(d.states))
	d.states = append(d.states, ds)
	if int(id)>>pageShift == len(d.trans) {
		d.trans = append(d.trans, make([]int32, 256<<pageShift))
	}
	if collided {
		if d.stateC == nil {
			d.stateC = map[string]int32{}
		}
		d.stateC[string(d.keybuf)] = id
	} else {
		d.stateI[h] = id
	}
	return id
}

// dead reports whether state st has no way forward: no byte and not
// accepting.
func (d *dfa) dead(st int32) bool {
	if st < 0 || int(st) >= len(d.states) {
		return true
	}
	return len(d.states[st].stacks) == 0
}

// step is the transition of state st on byte c, or -1.
func (d *dfa) step(st int32, c byte) int32 {
	ds := d.states[st]
	row := d.row(st)
	if t := row[c]; t > 0 {
		return t - 1
	} else if t < 0 {
		return -1
	}
	if d.err != nil {
		return -1
	}
	d.beginUnion()
	for _, s := range ds.stacks {
		f := d.frames[s]
		n := &d.g.prog[f.pos]
		if n.kind == nodeTerm && n.set.has(c) {
			d.union(d.intern(f.pos+1, f.parent))
		}
	}
	next := d.addState()
	if d.err != nil {
		// Not cached: a later call may be retried after a reset.
		return -1
	}
	if next < 0 {
		row[c] = -1
	} else {
		row[c] = next + 1
	}
	return next
}

// fill computes every transition of state st not computed yet, one
// successor per class of bytes that the state's byte sets do not tell
// apart: the successors are those step gives, at the cost of a few
// expansions instead of 256.
func (d *dfa) fill(st int32) {
	if d.err != nil {
		return
	}
	// Partition the bytes by which of the state's byte sets hold them.
	classes := d.classes[:0]
	classes = append(classes, byteSet{^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0)})
	for _, s := range d.states[st].stacks {
		n := &d.g.prog[d.frames[s].pos]
		if n.kind != nodeTerm {
			continue
		}
		for i, k := 0, len(classes); i < k; i++ {
			in := classes[i].and(n.set)
			if in.empty() {
				continue
			}
			out := classes[i].andNot(n.set)
			if out.empty() {
				continue
			}
			classes[i] = in
			classes = append(classes, out)
		}
	}
	d.classes = classes
	row := d.row(st)
	for _, cl := range classes {
		rep := cl.first()
		t := row[rep]
		if t == 0 {
			if d.step(st, rep); d.err != nil {
				return
			}
			t = row[rep]
		}
		for w, bits := range cl {
			for bits != 0 {
				c := w<<6 | tz64(bits)
				bits &= bits - 1
				row[c] = t
			}
		}
	}
}

// maxShapeStates bounds a shape: past it the state's mask is walked
// against the automaton. (Shapes cut at a depth, with their long tokens
// walked, were measured slower: exploring a large shape builds states
// that no token reaches.)
const maxShapeStates = 64

// shape explores the states reachable from st on every byte but
// exitByte and returns their transitions on those bytes, in the order
// met: row i (256 bytes) holds, per byte, the index plus one of the state
// it leads to (0: dead, and always 0 for exitByte). A token without
// exitByte is allowed from st exactly when its bytes lead through this
// table without a 0, so two states with one shape allow the same such
// tokens.
//
// It reports false when more than max states are met, when the state
// budget is near, or on a DFA error. The table is d's scratch, valid
// until the next call.
func (d *dfa) shape(st int32, max int) ([]byte, bool) {
	if len(d.states)+max > maxStates/2 {
		return nil, false
	}
	members := append(d.members[:0], st)
	d.setLocal(st, 1)
	key := d.shapeKey[:0]
	ok := true
	for i := 0; i < len(members) && ok; i++ {
		m := members[i]
		d.fill(m)
		if d.err != nil {
			ok = false
			break
		}
		row := d.row(m)
		for c, t := range row {
			if t <= 0 || c == exitByte {
				key = append(key, 0)
				continue
			}
			s := t - 1
			l := d.getLocal(s)
			if l == 0 {
				if len(members) == max {
					ok = false
					break
				}
				members = append(members, s)
				l = uint8(len(members))
				d.setLocal(s, l)
			}
			key = append(key, l)
		}
	}
	for _, m := range members {
		d.local[m] = 0
	}
	d.members, d.shapeKey = members, key
	return key, ok
}

func (d *dfa) getLocal(s int32) uint8 {
	if int(s) < len(d.local) {
		return d.local[s]
	}
	return 0
}

func (d *dfa) setLocal(s int32, l uint8) {
	if int(s) >= len(d.local) {
		d.local = append(d.local, make([]uint8, int(s)+1-len(d.local)+len(d.states))...)
	}
	d.local[s] = l
}
