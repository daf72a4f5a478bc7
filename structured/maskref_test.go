package structured

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/tandemllm/tandem/tokenid"
)

// refOrder is the reference walk's index of a vocabulary: every token
// with bytes (EOS aside) sorted by bytes, and those not plain, each with
// its common prefix with the one before.
type refOrder struct {
	order, restOrder []int32
	lcp, restLCP     []uint16
}

var refOrders sync.Map // *Vocab -> *refOrder

func refOrderOf(v *Vocab) *refOrder {
	if r, ok := refOrders.Load(v); ok {
		return r.(*refOrder)
	}
	r := &refOrder{}
	for id, t := range v.toks {
		if len(t) > 0 && !v.IsEOS(tokenid.ID(id)) {
			r.order = append(r.order, int32(id))
		}
	}
	slices.SortFunc(r.order, func(a, b int32) int { return bytes.Compare(v.toks[a], v.toks[b]) })
	for _, id := range r.order {
		if v.plain[id>>6]&(1<<(uint(id)&63)) == 0 {
			r.restOrder = append(r.restOrder, id)
		}
	}
	lcps := func(order []int32) []uint16 {
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
	r.lcp, r.restLCP = lcps(r.order), lcps(r.restOrder)
	refOrders.Store(v, r)
	return r
}

// refMask is the mask walk before the shape cache and the tries (the
// whole sorted vocabulary from st, the plain tokens at once where st
// loops on them): the reference the masks must equal.
func refMask(v *Vocab, d *dfa, st int32) []uint64 {
	r := refOrderOf(v)
	states := make([]int32, v.maxLen+1)
	mask := make([]uint64, v.MaskWords())
	if d.states[st].accept {
		for _, e := range v.eos {
			mask[e>>6] |= 1 << (uint(e) & 63)
		}
	}
	order, lcps := r.order, r.lcp
	if v.loopsOnPlain(d, st) {
		copy(mask, v.plain)
		if d.states[st].accept {
			for _, e := range v.eos {
				mask[e>>6] |= 1 << (uint(e) & 63)
			}
		}
		order, lcps = r.restOrder, r.restLCP
	}
	states[0] = st
	valid := 0
	for i, id := range order {
		t := v.toks[id]
		l := int(lcps[i])
		if l > valid {
			continue
		}
		j := l
		for ; j < len(t); j++ {
			nx := d.step(states[j], t[j])
			if nx < 0 {
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

// checkMasksAgainstRef walks c (the mocker's sampling) for up to steps
// tokens and compares every mask with refMask's.
func checkMasksAgainstRef(t *testing.T, name string, c *Compiled, rng *rand.Rand, steps int) int {
	t.Helper()
	m := c.NewMatcher()
	n := 0
	for range steps {
		mask, err := m.Mask()
		if errors.Is(err, ErrStateBudget) {
			return n
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		c.g.dfaMu.Lock()
		want := refMask(c.v, &c.g.dfa, m.st)
		c.g.dfaMu.Unlock()
		if !slices.Equal(mask, want) {
			for w := range want {
				if mask[w] != want[w] {
					t.Fatalf("%s: step %d: mask word %d = %#x, reference %#x", name, n, w, mask[w], want[w])
				}
			}
		}
		n++
		id, err := m.Pick(rng.Uint64())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := m.Accept(id); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if m.Done() {
			return n
		}
	}
	return n
}

// TestMasksEqualReference: the masks (shape cache and exit-token walk)
// equal the reference walk's at every state met by random walks of the
// walk schemas, the other constraint kinds, and a sample of the corpus,
// over both vocabularies.
func TestMasksEqualReference(t *testing.T) {
	others := []struct{ kind, spec string }{
		{KindJSONObject, ""},
		{KindRegex, `[a-z"]{2,5}(\d+|"x")`},
		{KindChoice, `["alpha","beta\"q","γ"]`},
		{KindGrammar, `root ::= "[" item ("," item)* "]"
item ::= "\"" [^"\\]* "\"" | [0-9]+`},
		{KindToolCalls, `{"tools":[{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}]}`},
	}
	for _, vname := range []string{"o200k", "qwen3"} {
		t.Run(vname, func(t *testing.T) {
			var v *Vocab
			if vname == "o200k" {
				v = testO200k(t)
			} else {
				v = testQwen3(t)
			}
			rng := rand.New(rand.NewPCG(5, 6))
			steps := 0
			for i, s := range walkSchemas {
				g, err := CompileJSONSchema([]byte(s))
				if err != nil {
					t.Fatal(err)
				}
				steps += checkMasksAgainstRef(t, fmt.Sprintf("walk schema %d", i), Bind(g, v), rng, 300)
			}
			for _, o := range others {
				g, err := CompileSpec(o.kind, o.spec)
				if err != nil {
					t.Fatalf("%s: %v", o.kind, err)
				}
				steps += checkMasksAgainstRef(t, o.kind, Bind(g, v), rng, 300)
			}
			if testing.Short() {
				t.Logf("%d masks equal the reference (-short: no corpus)", steps)
				return
			}
			corpus := loadCorpus(t)
			for i := 0; i < len(corpus); i += 1 + len(corpus)/30 {
				g, err := CompileJSONSchema(corpus[i].rooted())
				if err != nil {
					continue
				}
				steps += checkMasksAgainstRef(t, corpus[i].name, Bind(g, v), rng, 100)
			}
			t.Logf("%d masks equal the reference", steps)
		})
	}
}
