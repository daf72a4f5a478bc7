package structured

import (
	"fmt"
	"regexp/syntax"
	"unicode"
	"unicode/utf8"
)

// CompileRegex compiles a regular expression (RE2 syntax, which covers the
// ECMA-262 patterns JSON Schema and vLLM's guided_regex use in practice)
// that the whole output must match.
func CompileRegex(pattern string) (*Grammar, error) {
	b := newBuilder()
	r, err := compileRegexInto(b, pattern, false, true)
	if err != nil {
		return nil, err
	}
	b.alt(0, ref(r))
	return b.finish()
}

// CompileChoice is exactly one of the given strings.
func CompileChoice(choices []string) (*Grammar, error) {
	if len(choices) == 0 {
		return nil, fmt.Errorf("%w: empty choice", ErrUnsatisfiable)
	}
	b := newBuilder()
	for _, c := range choices {
		b.alt(0, lit(c)...)
	}
	return b.finish()
}

// maxPattern bounds a regular expression's source.
const maxPattern = 1 << 16

type reCompiler struct {
	b        *builder
	jsonMode bool // runes written as JSON string characters
}

// compileRegexInto adds a rule matching pattern. jsonMode writes runes as
// the characters of a JSON string (quotes, backslashes and controls
// escaped). anchored: the whole text must match (vLLM's regex); otherwise
// JSON Schema's search semantics (a match anywhere unless ^/$ anchor it).
func compileRegexInto(b *builder, pattern string, jsonMode, anchored bool) (int32, error) {
	if len(pattern) > maxPattern {
		return 0, fmt.Errorf("regular expression of %d bytes (limit %d)", len(pattern), maxPattern)
	}
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return 0, err
	}
	c := &reCompiler{b: b, jsonMode: jsonMode}
	var parts []*syntax.Regexp
	if re.Op == syntax.OpConcat {
		parts = re.Sub
	} else {
		parts = []*syntax.Regexp{re}
	}
	start, end := anchored, anchored
	for len(parts) > 0 && (parts[0].Op == syntax.OpBeginText || parts[0].Op == syntax.OpBeginLine) {
		parts, start = parts[1:], true
	}
	for len(parts) > 0 && (parts[len(parts)-1].Op == syntax.OpEndText || parts[len(parts)-1].Op == syntax.OpEndLine) {
		parts, end = parts[:len(parts)-1], true
	}
	var seq []elem
	any := func() elem {
		return ref(b.star(ref(c.class([]rune{0, unicode.MaxRune}))))
	}
	if !start {
		seq = append(seq, any())
	}
	for _, p := range parts {
		e, err := c.node(p)
		if err != nil {
			return 0, err
		}
		seq = append(seq, e...)
	}
	if !end {
		seq = append(seq, any())
	}
	return b.seqRule("regex", seq...), nil
}

func (c *reCompiler) node(re *syntax.Regexp) ([]elem, error) {
	b := c.b
	switch re.Op {
	case syntax.OpNoMatch:
		return []elem{ref(b.newRule("nomatch"))}, nil
	case syntax.OpEmptyMatch:
		return nil, nil
	case syntax.OpLiteral:
		var out []elem
		for _, r := range re.Rune {
			if re.Flags&syntax.FoldCase != 0 {
				out = append(out, ref(c.class(foldClass(r))))
			} else {
				out = append(out, ref(c.class([]rune{r, r})))
			}
		}
		return out, nil
	case syntax.OpCharClass:
		return []elem{ref(c.class(re.Rune))}, nil
	case syntax.OpAnyCharNotNL:
		return []elem{ref(c.class([]rune{0, '\n' - 1, '\n' + 1, unicode.MaxRune}))}, nil
	case syntax.OpAnyChar:
		return []elem{ref(c.class([]rune{0, unicode.MaxRune}))}, nil
	case syntax.OpCapture:
		return c.node(re.Sub[0])
	case syntax.OpConcat:
		var out []elem
		for _, s := range re.Sub {
			e, err := c.node(s)
			if err != nil {
				return nil, err
			}
			out = append(out, e...)
		}
		return out, nil
	case syntax.OpAlternate:
		r := b.newRule("alt")
		for _, s := range re.Sub {
			e, err := c.node(s)
			if err != nil {
				return nil, err
			}
			b.alt(r, e...)
		}
		return []elem{ref(r)}, nil
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
		e, err := c.node(re.Sub[0])
		if err != nil {
			return nil, err
		}
		min, max := 0, -1
		switch re.Op {
		case syntax.OpPlus:
			min = 1
		case syntax.OpQuest:
			max = 1
		case syntax.OpRepeat:
			min, max = re.Min, re.Max
		}
		return []elem{ref(b.repeat(min, max, e...))}, b.err
	}
	return nil, fmt.Errorf("regular expression operator %v is not supported", re.Op)
}

func foldClass(r rune) []rune {
	out := []rune{r, r}
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		out = append(out, f, f)
	}
	return out
}

// class is a rule matching one rune of the class (pairs of inclusive
// ranges), as UTF-8 or as a JSON string character.
func (c *reCompiler) class(ranges []rune) int32 {
	b := c.b
	r := b.newRule("class")
	for i := 0; i+1 < len(ranges); i += 2 {
		lo, hi := ranges[i], ranges[i+1]
		if c.jsonMode {
			// Characters a JSON string must escape, escaped; the rest
			// as UTF-8.
			for ch := lo; ch <= hi && ch < 0x20; ch++ {
				b.alt(r, lit(jsonEscape(ch))...)
			}
			lo = max(lo, 0x20)
			for _, special := range []rune{'"', '\\'} {
				if lo <= special && special <= hi {
					b.alt(r, lit(jsonEscape(special))...)
					if lo < special {
						c.utf8Alts(r, lo, special-1)
					}
					lo = special + 1
				}
			}
		}
		if lo <= hi {
			c.utf8Alts(r, lo, hi)
		}
	}
	return r
}

func jsonEscape(ch rune) string {
	switch ch {
	case '"':
		return `\"`
	case '\\':
		return `\\`
	case '\n':
		return `\n`
	case '\r':
		return `\r`
	case '\t':
		return `\t`
	case '\b':
		return `\b`
	case '\f':
		return `\f`
	}
	return fmt.Sprintf(`\u%04x`, ch)
}

// utf8Alts adds to rule r one alternative per byte-range sequence that
// together encode exactly the runes in [lo, hi] (surrogates excluded).
func (c *reCompiler) utf8Alts(r int32, lo, hi rune) {
	if lo <= 0xd7ff && hi >= 0xd800 {
		if lo <= 0xd7ff {
			c.utf8Alts(r, lo, 0xd7ff)
		}
		if hi >= 0xe000 {
			c.utf8Alts(r, 0xe000, hi)
		}
		return
	}
	if lo >= 0xd800 && hi <= 0xdfff {
		return
	}
	if lo >= 0xd800 && lo <= 0xdfff {
		lo = 0xe000
	}
	for _, bound := range []rune{0x7f, 0x7ff, 0xffff} {
		if lo <= bound && hi > bound {
			c.utf8Alts(r, lo, bound)
			c.utf8Alts(r, bound+1, hi)
			return
		}
	}
	if hi <= 0x7f {
		var s byteSet
		s.addRange(byte(lo), byte(hi))
		c.b.alt(r, term(s))
		return
	}
	n := utf8.RuneLen(lo)
	for i := 1; i < n; i++ {
		m := rune(1)<<(6*i) - 1
		if lo&^m != hi&^m {
			if lo&m != 0 {
				c.utf8Alts(r, lo, lo|m)
				c.utf8Alts(r, (lo|m)+1, hi)
				return
			}
			if hi&m != m {
				c.utf8Alts(r, lo, (hi&^m)-1)
				c.utf8Alts(r, hi&^m, hi)
				return
			}
		}
	}
	var a, z [4]byte
	utf8.EncodeRune(a[:], lo)
	utf8.EncodeRune(z[:], hi)
	es := make([]elem, n)
	for i := 0; i < n; i++ {
		var s byteSet
		s.addRange(a[i], z[i])
		es[i] = term(s)
	}
	c.b.alt(r, es...)
}
