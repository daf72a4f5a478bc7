package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

var knownPatterns = []struct {
	name, pattern string
}{
	{"qwen2", PatternQwen2},
	{"llama3", PatternLlama3},
	{"gpt2", PatternGPT2},
	{"o200k", PatternO200k},
}

// nativeEnds returns the piece ends the hand-written matcher produces.
func nativeEnds(p *nativeSplitter, s string) []int {
	var out []int
	for pos := 0; pos < len(s); {
		end := p.next(s, pos)
		if end <= pos {
			panic("native splitter made no progress")
		}
		out = append(out, end)
		pos = end
	}
	return out
}

func checkSplitAgreement(t *testing.T, name string, native *nativeSplitter, re *regexSplitter, s string) {
	t.Helper()
	s = validText(s)
	got, want := nativeEnds(native, s), re.ends(s)
	if !slices.Equal(got, want) {
		t.Fatalf("%s: split(%q)\nnative %v %q\nregexp2 %v %q", name, s, got, pieces(s, got), want, pieces(s, want))
	}
}

func pieces(s string, ends []int) []string {
	var out []string
	pos := 0
	for _, e := range ends {
		out = append(out, s[pos:e])
		pos = e
	}
	return out
}

// TestNativeSplitterMatchesRegexp2 is the contract of the fast path: for
// every known pattern it must cut text exactly where regexp2 does.
func TestNativeSplitterMatchesRegexp2(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, kp := range knownPatterns {
		native, ok := newNativeSplitter(kp.pattern)
		if !ok {
			t.Fatalf("%s: no native splitter", kp.name)
		}
		re, err := newRegexSplitter(kp.pattern)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range trickyTexts {
			checkSplitAgreement(t, kp.name, native, re, s)
		}
		for i := 0; i < 400; i++ {
			checkSplitAgreement(t, kp.name, native, re, randomText(rng, 1+rng.IntN(30)))
		}
	}
}

func TestPatternNames(t *testing.T) {
	for name, want := range map[string]string{"qwen2": PatternQwen2, "llama-bpe": PatternLlama3, "gpt-2": PatternGPT2, "o200k": PatternO200k} {
		if got, ok := patternForName(name); !ok || got != want {
			t.Errorf("patternForName(%q) = %q, %v", name, got, ok)
		}
	}
	if _, ok := patternForName(`\w+`); ok {
		t.Error("a regex must not be taken for a name")
	}
	if _, err := newSplitter(`(unclosed`); err == nil {
		t.Error("bad regex compiled")
	}
	sp, err := newSplitter(`\d+`)
	if err != nil {
		t.Fatal(err)
	}
	// Text between matches becomes pieces of its own (HF "Isolated").
	if got := pieces("ab12cd3", sp.(*regexSplitter).ends("ab12cd3")); !slices.Equal(got, []string{"ab", "12", "cd", "3"}) {
		t.Errorf("isolated split = %q", got)
	}
}

// TestSplitLongRunsLinear guards against quadratic backtracking on long runs
// that the patterns give back one rune at a time.
func TestSplitLongRunsLinear(t *testing.T) {
	for _, kp := range knownPatterns {
		native, _ := newNativeSplitter(kp.pattern)
		for _, unit := range []string{" ", "A", "\u0301", "!", "1", "中", " \n"} {
			s := strings.Repeat(unit, 200_000/len(unit)) + "x"
			start := time.Now()
			nativeEnds(native, s)
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("%s: %d bytes of %q took %v", kp.name, len(s), unit, d)
			}
		}
	}
}
