package structured

import (
	"slices"
	"strings"
	"testing"

	"github.com/tandemllm/tandem/tokenid"
)

// TestCountedMasks: in strings with minLength/maxLength, every state's
// mask (by characters remaining) equals the reference walk's, over a
// small vocabulary of ASCII runs up to past the kept budgets, escapes,
// whole and partial UTF-8 sequences and tokens with '"'; every state
// reachable (breadth first, bounded) is compared, and the counted path is
// taken for some of them.
func TestCountedMasks(t *testing.T) {
	var toks [][]byte
	for _, s := range []string{"a", "b", "ab", "abc", "\\", "\\n", "n", "\\u", "\"", "a\"", "\",", "\"}", "}", "{", ":", ",", " ",
		"\xe4", "\xe4\xb8", "\xb8", "\xad", "\xb8\xad", "中", "中文", "é", "\xc3", "\xa9", "\xf0\x9f", "\x98\x80", "😀", "\n", "é\""} {
		toks = append(toks, []byte(s))
	}
	for _, n := range []int{4, 7, 15, 16, 17, 20, 33} {
		toks = append(toks, []byte(strings.Repeat("x", n)), []byte(strings.Repeat("y", n-1)+"\""))
	}
	toks = append(toks, nil) // EOS
	v, err := NewVocab(toks, []tokenid.ID{tokenid.ID(len(toks) - 1)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, schema string }{
		{"max 3", `{"type":"string","maxLength":3}`},
		{"2 to 20", `{"type":"string","minLength":2,"maxLength":20}`},
		{"min 18", `{"type":"string","minLength":18}`},
		{"max 40", `{"type":"string","maxLength":40}`},
		{"in an object", `{"type":"object","properties":{"k":{"type":"string","maxLength":17},"m":{"type":"string"}},"required":["k","m"],"additionalProperties":false}`},
		{"two counts", `{"anyOf":[{"type":"string","maxLength":2},{"type":"string","minLength":5,"maxLength":6}]}`},
		{"in an array", `{"type":"array","items":{"type":"string","minLength":1,"maxLength":4},"maxItems":2}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := CompileJSONSchema([]byte(tc.schema))
			if err != nil {
				t.Fatal(err)
			}
			c := Bind(g, v)
			counted := 0
			queue := []int32{0}
			seen := map[int32]bool{0: true}
			for i := 0; i < len(queue) && i < 4000; i++ {
				st := queue[i]
				mask, err := c.mask(st)
				if err != nil {
					t.Fatal(err)
				}
				g.dfaMu.Lock()
				want := refMask(v, &g.dfa, st)
				if _, _, ok := v.countedMask(&g.dfa, st); ok {
					counted++
				}
				for b := 0; b < 256; b++ {
					if nx := g.dfa.step(st, byte(b)); nx >= 0 && !seen[nx] {
						seen[nx] = true
						queue = append(queue, nx)
					}
				}
				g.dfaMu.Unlock()
				if !slices.Equal(mask, want) {
					t.Fatalf("state %d: mask %#x, reference %#x", st, mask, want)
				}
			}
			if counted == 0 {
				t.Errorf("no state took the counted path")
			}
			t.Logf("%d states, %d by count", len(queue), counted)
		})
	}
}
