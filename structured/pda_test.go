package structured

import (
	"slices"
	"testing"

	"github.com/tandemllm/tandem/tokenid"
)

// TestClosureMemoBound: with the closure memo bounded to a few stacks (so
// it is dropped and rebuilt over and over), every reachable state's mask
// still equals the reference walk's.
func TestClosureMemoBound(t *testing.T) {
	defer func(m int) { maxMemo = m }(maxMemo)
	maxMemo = 4
	var toks [][]byte
	for _, s := range []string{"a", "ab", "1", "12", "-", ".", "e", "\"", "\",", "\"}", "\":", "}", "{", "[", "]", ":", ",", " ",
		"true", "tr", "null", "\\", "\\n", "é", "\"a\"", "k", "\"k\":"} {
		toks = append(toks, []byte(s))
	}
	toks = append(toks, nil) // EOS
	v, err := NewVocab(toks, []tokenid.ID{tokenid.ID(len(toks) - 1)})
	if err != nil {
		t.Fatal(err)
	}
	for _, schema := range []string{
		`{"type":"object","properties":{"k":{"type":"string","maxLength":5},"a":{"type":"array","items":{"type":"integer"}},"b":{"type":"boolean"}},"required":["k"]}`,
		`{"anyOf":[{"type":"null"},{"type":"object","properties":{"k":{"$ref":"#"}}}]}`,
	} {
		g, err := CompileJSONSchema([]byte(schema))
		if err != nil {
			t.Fatal(err)
		}
		c := Bind(g, v)
		queue := []int32{0}
		seen := map[int32]bool{0: true}
		for i := 0; i < len(queue) && i < 1500; i++ {
			st := queue[i]
			mask, err := c.mask(st)
			if err != nil {
				t.Fatal(err)
			}
			g.dfaMu.Lock()
			want := refMask(v, &g.dfa, st)
			for b := 0; b < 256; b++ {
				if nx := g.dfa.step(st, byte(b)); nx >= 0 && !seen[nx] {
					seen[nx] = true
					queue = append(queue, nx)
				}
			}
			if n := len(g.dfa.memo); n > 4*maxMemo+1024 {
				t.Errorf("memo holds %d stacks, bound %d", n, maxMemo)
			}
			g.dfaMu.Unlock()
			if !slices.Equal(mask, want) {
				t.Fatalf("%s: state %d: mask %#x, reference %#x", schema, st, mask, want)
			}
		}
		t.Logf("%d states", len(queue))
	}
}

// TestStateHashCollision: a stack set whose hash is taken by another
// state gets its own state, found again through the collision map.
func TestStateHashCollision(t *testing.T) {
	g, err := CompileRegex("ab|cd")
	if err != nil {
		t.Fatal(err)
	}
	d := &g.dfa
	st := d.step(0, 'a')
	if st <= 0 {
		t.Fatalf("step: %d", st)
	}
	stacks := slices.Clone(d.states[st].stacks)
	d.stateI[hashStacks(stacks)] = 0 // as if state 0's set had this hash
	n := len(d.states)
	d.scratch = append(d.scratch[:0], stacks...)
	id := d.addState()
	if id != int32(n) || !slices.Equal(d.states[id].stacks, stacks) {
		t.Fatalf("colliding set: state %d of %d, stacks %v, want a new state with %v", id, n, d.states[id].stacks, stacks)
	}
	d.scratch = append(d.scratch[:0], stacks...)
	if again := d.addState(); again != id {
		t.Fatalf("colliding set again: state %d, want %d", again, id)
	}
	d.scratch = append(d.scratch[:0], d.states[0].stacks...)
	if zero := d.addState(); zero != 0 {
		t.Fatalf("state 0's set: state %d", zero)
	}
}
