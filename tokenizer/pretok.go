package tokenizer

import (
	"fmt"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// Pre-tokenizer split patterns, exactly as they appear in tokenizer.json
// files and in tiktoken. A pattern listed here is run by a hand-written
// backtracking matcher (much faster than regexp2 on English text: regexp2
// converts every input to []rune and allocates per match); any other
// pattern runs on regexp2. The fuzz and table tests check both give identical pieces.
const (
	// PatternQwen2 is Qwen2/Qwen2.5/Qwen3's split (digits one by one).
	PatternQwen2 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// PatternLlama3 is Llama 3's split, which is also tiktoken's cl100k_base.
	PatternLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// PatternGPT2 is GPT-2's split, the default of HF's ByteLevel use_regex.
	PatternGPT2 = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	// PatternO200k is tiktoken's o200k_base split.
	PatternO200k = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|` +
		`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|` +
		`\p{N}{1,3}|` +
		` ?[^\s\p{L}\p{N}]+[\r\n/]*|` +
		`\s*[\r\n]+|` +
		`\s+(?!\S)|` +
		`\s+`
)

// patternForName maps llama.cpp's tokenizer.ggml.pre names (and a few of our
// own) to split patterns, for NewByteLevelBPE. The empty name means GPT-2's
// pattern, HF ByteLevel's default. llama.cpp's "default" is deliberately
// absent: it stands for a different multi-regex split we do not implement.
func patternForName(name string) (string, bool) {
	switch name {
	case "qwen2", "qwen3", "qwen":
		return PatternQwen2, true
	case "llama3", "llama-bpe", "llama-3", "cl100k", "cl100k_base":
		return PatternLlama3, true
	case "gpt2", "gpt-2", "":
		return PatternGPT2, true
	case "o200k", "o200k_base":
		return PatternO200k, true
	}
	return "", false
}

// splitter cuts text into pre-tokens. Pieces tile the text: text between
// regex matches becomes a piece of its own (HF's "Isolated" behaviour).
type splitter interface {
	pattern() string
}

// runeClass is a bit set of the Unicode properties the known patterns test.
type runeClass uint16

const (
	cLu runeClass = 1 << iota
	cLl
	cLt
	cLm
	cLo
	cM
	cN
	cL     // any letter
	cS     // \s, which in regexp2 is unicode.IsSpace
	cCR    // \r
	cLF    // \n
	cSP    // ' '
	cSlash // '/'
)

type elemKind uint8

const (
	eClass       elemKind = iota
	eContraction          // 's|'t|'re|'ve|'m|'ll|'d
	eNotNonSpace          // (?!\S)
)

type elem struct {
	kind     elemKind
	mask     runeClass
	neg      bool // class is [^mask]
	fold     bool // contraction is case-insensitive
	min, max int  // max < 0: unbounded; for eContraction min 0 means optional
}

func opt(mask runeClass) elem         { return elem{mask: mask, min: 0, max: 1} }
func star(mask runeClass) elem        { return elem{mask: mask, min: 0, max: -1} }
func plus(mask runeClass) elem        { return elem{mask: mask, min: 1, max: -1} }
func upTo(mask runeClass, n int) elem { return elem{mask: mask, min: 1, max: n} }
func not(e elem) elem                 { e.neg = true; return e }

// nativeSplitter is a small backtracking matcher for alternations of
// quantified character classes, which is all the known patterns use. It
// reproduces regex semantics: the first alternative that matches at a
// position wins, quantifiers are greedy and give back one rune at a time.
type nativeSplitter struct {
	src   string
	alts  [][]elem
	ascii [utf8.RuneSelf]runeClass
	sub   bool // patterns test letter subcategories (o200k)
}

func newNativeSplitter(pattern string) (*nativeSplitter, bool) {
	contr := elem{kind: eContraction, fold: true, min: 1}
	optContr := elem{kind: eContraction, fold: true, min: 0}
	notS := elem{kind: eNotNonSpace}
	letterOrNum := cL | cN
	var alts [][]elem
	sub := false
	switch pattern {
	case PatternQwen2, PatternLlama3:
		digits := upTo(cN, 1)
		if pattern == PatternLlama3 {
			digits = upTo(cN, 3)
		}
		alts = [][]elem{
			{contr},
			{not(opt(cCR | cLF | letterOrNum)), plus(cL)},
			{digits},
			{opt(cSP), not(plus(cS | letterOrNum)), star(cCR | cLF)},
			{star(cS), plus(cCR | cLF)},
			{plus(cS), notS},
			{plus(cS)},
		}
	case PatternGPT2:
		c := contr
		c.fold = false
		alts = [][]elem{
			{c},
			{opt(cSP), plus(cL)},
			{opt(cSP), plus(cN)},
			{opt(cSP), not(plus(cS | letterOrNum))},
			{plus(cS), notS},
			{plus(cS)},
		}
	case PatternO200k:
		sub = true
		upper := cLu | cLt | cLm | cLo | cM
		lower := cLl | cLm | cLo | cM
		alts = [][]elem{
			{not(opt(cCR | cLF | letterOrNum)), star(upper), plus(lower), optContr},
			{not(opt(cCR | cLF | letterOrNum)), plus(upper), star(lower), optContr},
			{upTo(cN, 3)},
			{opt(cSP), not(plus(cS | letterOrNum)), star(cCR | cLF | cSlash)},
			{star(cS), plus(cCR | cLF)},
			{plus(cS), notS},
			{plus(cS)},
		}
	default:
		return nil, false
	}
	p := &nativeSplitter{src: pattern, alts: alts, sub: sub}
	for r := rune(0); r < utf8.RuneSelf; r++ {
		p.ascii[r] = p.classify(r)
	}
	return p, true
}

func (p *nativeSplitter) pattern() string { return p.src }

func (p *nativeSplitter) classify(r rune) runeClass {
	var c runeClass
	switch r {
	case '\r':
		c |= cCR
	case '\n':
		c |= cLF
	case ' ':
		c |= cSP
	case '/':
		c |= cSlash
	}
	switch {
	case unicode.IsLetter(r):
		c |= cL
		if p.sub {
			switch {
			case unicode.Is(unicode.Lu, r):
				c |= cLu
			case unicode.Is(unicode.Ll, r):
				c |= cLl
			case unicode.Is(unicode.Lo, r):
				c |= cLo
			case unicode.Is(unicode.Lm, r):
				c |= cLm
			case unicode.Is(unicode.Lt, r):
				c |= cLt
			}
		}
	case unicode.IsNumber(r):
		c |= cN
	case unicode.IsMark(r):
		c |= cM
	}
	if unicode.IsSpace(r) {
		c |= cS
	}
	return c
}

func (p *nativeSplitter) class(s string, pos int) (runeClass, int) {
	if b := s[pos]; b < utf8.RuneSelf {
		return p.ascii[b], 1
	}
	r, w := utf8.DecodeRuneInString(s[pos:])
	return p.classify(r), w
}

func (e *elem) matches(c runeClass) bool {
	return (c&e.mask != 0) != e.neg
}

// next returns the end of the piece that starts at pos (pos < len(s)).
func (p *nativeSplitter) next(s string, pos int) int {
	for gap := pos; gap < len(s); {
		for _, alt := range p.alts {
			if end := p.seq(s, gap, alt); end > gap {
				if gap > pos {
					return gap // the unmatched text before this match
				}
				return end
			}
		}
		_, w := p.class(s, gap)
		gap += w
	}
	return len(s)
}

// seq matches els at pos and returns the end, or -1.
func (p *nativeSplitter) seq(s string, pos int, els []elem) int {
	if len(els) == 0 {
		return pos
	}
	e := &els[0]
	switch e.kind {
	case eNotNonSpace:
		if pos < len(s) {
			if c, _ := p.class(s, pos); c&cS == 0 {
				return -1
			}
		}
		return p.seq(s, pos, els[1:])
	case eContraction:
		if n := contraction(s, pos, e.fold); n > 0 {
			if end := p.seq(s, pos+n, els[1:]); end >= 0 {
				return end
			}
		}
		if e.min == 0 {
			return p.seq(s, pos, els[1:])
		}
		return -1
	}
	end, count := pos, 0
	for (e.max < 0 || count < e.max) && end < len(s) {
		c, w := p.class(s, end)
		if !e.matches(c) {
			break
		}
		end += w
		count++
	}
	for {
		if count < e.min {
			return -1
		}
		if len(els) == 1 {
			return end
		}
		if r := p.seq(s, end, els[1:]); r >= 0 {
			return r
		}
		if count == e.min {
			return -1
		}
		_, w := utf8.DecodeLastRuneInString(s[pos:end])
		end -= w
		count--
	}
}

// contraction matches 's|'t|'re|'ve|'m|'ll|'d at pos and returns its length.
func contraction(s string, pos int, fold bool) int {
	if pos+1 >= len(s) || s[pos] != '\'' {
		return 0
	}
	lower := func(b byte) byte {
		if fold && 'A' <= b && b <= 'Z' {
			return b + 'a' - 'A'
		}
		return b
	}
	switch lower(s[pos+1]) {
	case 's', 't', 'm', 'd':
		return 2
	case 'r', 'v':
		if pos+2 < len(s) && lower(s[pos+2]) == 'e' {
			return 3
		}
	case 'l':
		if pos+2 < len(s) && lower(s[pos+2]) == 'l' {
			return 3
		}
	}
	return 0
}

// regexSplitter runs an arbitrary pattern on regexp2 (which, unlike Go's
// regexp, has the look-ahead HF patterns use).
type regexSplitter struct {
	src string
	re  *regexp2.Regexp
}

func newRegexSplitter(pattern string) (*regexSplitter, error) {
	re, err := regexp2.Compile(pattern, regexp2.None)
	if err != nil {
		return nil, fmt.Errorf("compile pre-tokenizer pattern %q: %w", pattern, err)
	}
	// No MatchTimeout: regexp2 implements it with a shared background clock
	// goroutine, which stalled fuzzing workers here; patterns come from model
	// files an operator chose, not from requests.
	return &regexSplitter{src: pattern, re: re}, nil
}

func (r *regexSplitter) pattern() string { return r.src }

// ends returns the end offsets of the pieces of s.
func (r *regexSplitter) ends(s string) []int {
	runes := []rune(s)
	// regexp2 reports rune offsets; map them back to bytes.
	byteAt := make([]int, len(runes)+1)
	off := 0
	for i, c := range runes {
		byteAt[i] = off
		off += utf8.RuneLen(c)
	}
	byteAt[len(runes)] = off
	var out []int
	last := 0
	m, err := r.re.FindRunesMatch(runes)
	for err == nil && m != nil {
		start, end := m.Index, m.Index+m.Length
		if end > start {
			if start > last {
				out = append(out, byteAt[start])
			}
			out = append(out, byteAt[end])
			last = end
		}
		m, err = r.re.FindNextMatch(m)
	}
	if last < len(runes) {
		out = append(out, len(s))
	}
	return out
}

// newSplitter picks the native matcher when it knows the pattern.
func newSplitter(pattern string) (splitter, error) {
	if p, ok := newNativeSplitter(pattern); ok {
		return p, nil
	}
	return newRegexSplitter(pattern)
}
