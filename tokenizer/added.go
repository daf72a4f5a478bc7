package tokenizer

import (
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/tandemllm/tandem/tokenid"
)

// addedMatcher finds added tokens in raw text, leftmost-longest, like HF's
// AddedVocabulary (an Aho-Corasick automaton with that match kind). Added
// tokens are few and almost all start with '<', so a first-byte index plus
// strings.IndexAny is faster than an automaton on ordinary prompts.
type addedMatcher struct {
	toks    []AddedToken
	byFirst [256][]int32 // indexes into toks, longest first
	firsts  string       // distinct first bytes, when all are ASCII
	anyHigh bool         // some token starts with a non-ASCII byte
}

func newAddedMatcher(toks []AddedToken) *addedMatcher {
	a := &addedMatcher{}
	for _, t := range toks {
		if t.Content == "" {
			continue
		}
		a.toks = append(a.toks, t)
	}
	order := make([]int32, len(a.toks))
	for i := range order {
		order[i] = int32(i)
	}
	sort.SliceStable(order, func(i, j int) bool {
		return len(a.toks[order[i]].Content) > len(a.toks[order[j]].Content)
	})
	var firsts []byte
	for _, i := range order {
		b := a.toks[i].Content[0]
		if a.byFirst[b] == nil {
			if b >= utf8.RuneSelf {
				a.anyHigh = true
			} else {
				firsts = append(firsts, b)
			}
		}
		a.byFirst[b] = append(a.byFirst[b], i)
	}
	a.firsts = string(firsts)
	return a
}

func (a *addedMatcher) empty() bool { return a == nil || len(a.toks) == 0 }

// find returns the next added token in s at or after from, with the span it
// covers (widened by LStrip/RStrip), or ok=false.
func (a *addedMatcher) find(s string, from int) (start, end int, id tokenid.ID, ok bool) {
	for i := from; i < len(s); i++ {
		if !a.anyHigh {
			j := strings.IndexAny(s[i:], a.firsts)
			if j < 0 {
				return 0, 0, 0, false
			}
			i += j
		}
		for _, k := range a.byFirst[s[i]] {
			t := &a.toks[k]
			if !strings.HasPrefix(s[i:], t.Content) {
				continue
			}
			start, end = i, i+len(t.Content)
			if t.LStrip {
				for start > from {
					r, w := utf8.DecodeLastRuneInString(s[from:start])
					if !unicode.IsSpace(r) {
						break
					}
					start -= w
				}
			}
			if t.RStrip {
				for end < len(s) {
					r, w := utf8.DecodeRuneInString(s[end:])
					if !unicode.IsSpace(r) {
						break
					}
					end += w
				}
			}
			return start, end, t.ID, true
		}
	}
	return 0, 0, 0, false
}
